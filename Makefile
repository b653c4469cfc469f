# pyprofd — continuous profiler for Python fleets.
#
#   make deps       install the Debian packages the build and tests need, fetch
#                   speedscope's file-format schema (build/deps/) for the tests
#   make            build build/pyprofd and build/pyprofd-ctl
#   make test       deps + build + the criterion suite against every CPython found
#   make sanitize   the same suite on an ASan + UBSan build (in build-sanitize/)
#   make demo       the daemon attached to a live Python workload: list, top, dump
#   make bench      measure the sampling engine on every CPython found
#   make bench-daemon  measure the daemon: 10 targets x 4 threads at 100 Hz
#   make bench-history measure the history store over a synthetic day
#   make install    binaries, systemd units and man pages (PREFIX, DESTDIR)
#   make clean
#
# V=1 shows the commands.

BUILD    ?= build
CC       ?= cc
PYTHON   ?= python3

DEB_PACKAGES = build-essential pkg-config libelf-dev libjansson-dev libcriterion-dev \
               libev-dev libprotobuf-c-dev protobuf-c-compiler libsqlite3-dev \
               libinih-dev libsystemd-dev zlib1g-dev procps util-linux \
               systemd man-db protobuf-compiler chromium \
               curl ca-certificates python3-jsonschema

# speedscope's file-format schema, which the tests hold the speedscope export
# to.  It is speedscope's, not ours to commit: make deps fetches the npm package
# it is published in and keeps only the schema.  The pin is the registry's
# dist.integrity for this version; a tarball that does not match is refused.
# Under build/ whatever $(BUILD) is, so make sanitize shares the one copy.
SPEEDSCOPE_VERSION   = 1.25.0
SPEEDSCOPE_INTEGRITY = sha512-cpf9HWTZf1ijLXBJrk87Ve/54tnYx6rlf0gUThvn3ook6h63hLXVOQiMf44PT+XoV503cPfvfiT5gP5vojp6Ag==
SPEEDSCOPE_URL       = https://registry.npmjs.org/speedscope/-/speedscope-$(SPEEDSCOPE_VERSION).tgz
DEPS_DIR             = build/deps
SPEEDSCOPE_TGZ       = $(DEPS_DIR)/speedscope-$(SPEEDSCOPE_VERSION).tgz
SPEEDSCOPE_SCHEMA    = $(DEPS_DIR)/speedscope-file-format-schema.json

PKGS     = libelf jansson libprotobuf-c inih libsystemd sqlite3 zlib
WARN     = -Wall -Wextra -Werror -Wshadow -Wpointer-arith -Wstrict-prototypes \
           -Wmissing-prototypes -Wvla -Wformat=2
OPT      ?= -O2 -g
CFLAGS   ?=
CFLAGS   += -std=c11 -D_GNU_SOURCE $(OPT) $(WARN) -MMD -MP -fno-strict-aliasing \
            -Idaemon -Idaemon/unwind -Istorage -Iclient -I$(BUILD)/proto \
            $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS   += $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lev -lm

ifeq ($(SANITIZE),1)
CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
endif

ifneq ($(V),1)
Q = @
E = @echo
else
E = @:
endif

UNWIND_SRC = $(wildcard daemon/unwind/*.c)
DAEMON_SRC = $(wildcard daemon/*.c)
STORE_SRC  = $(wildcard storage/*.c)
CLIENT_SRC = $(wildcard client/*.c)
# The export writers are a library of the client that the tests also link.
EXPORT_SRC = $(wildcard client/export*.c)
TEST_SRC   = $(wildcard tests/*.c)
PROTO      = $(wildcard proto/*.proto)

# protoc-c writes the C for each .proto into the build tree, never the source tree.
PROTO_C    = $(PROTO:proto/%.proto=$(BUILD)/proto/%.pb-c.c)
PROTO_H    = $(PROTO_C:.c=.h)
PROTO_OBJ  = $(PROTO_C:.c=.o)

UNWIND_OBJ = $(UNWIND_SRC:%.c=$(BUILD)/%.o)
DAEMON_OBJ = $(DAEMON_SRC:%.c=$(BUILD)/%.o)
STORE_OBJ  = $(STORE_SRC:%.c=$(BUILD)/%.o)
CLIENT_OBJ = $(CLIENT_SRC:%.c=$(BUILD)/%.o)
EXPORT_OBJ = $(EXPORT_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ   = $(TEST_SRC:%.c=$(BUILD)/%.o)

PYPROFD    = $(BUILD)/pyprofd
CTL        = $(BUILD)/pyprofd-ctl
LIBUNWIND  = $(BUILD)/libpyunwind.a
TESTS_BIN  = $(BUILD)/tests/pyprofd-tests

.PHONY: all deps test check sanitize demo bench bench-daemon bench-history install clean

all: $(PYPROFD) $(CTL)

$(BUILD)/proto/%.pb-c.c $(BUILD)/proto/%.pb-c.h: proto/%.proto
	@mkdir -p $(@D)
	$(E) "  PROTOC  $<"
	$(Q)protoc-c --c_out=$(BUILD)/proto -Iproto $<

# Kept: make would otherwise delete the headers as intermediates.
.SECONDARY: $(PROTO_C) $(PROTO_H)

# Generated protobuf code is not ours to hold to our warnings.
$(BUILD)/proto/%.pb-c.o: $(BUILD)/proto/%.pb-c.c
	$(E) "  CC      $<"
	$(Q)$(CC) $(filter-out -Wmissing-prototypes -Wshadow,$(CFLAGS)) -c -o $@ $<

$(BUILD)/%.o: %.c | $(PROTO_H)
	@mkdir -p $(@D)
	$(E) "  CC      $<"
	$(Q)$(CC) $(CFLAGS) -c -o $@ $<

$(LIBUNWIND): $(UNWIND_OBJ)
	$(E) "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

$(PYPROFD): $(DAEMON_OBJ) $(STORE_OBJ) $(PROTO_OBJ) $(LIBUNWIND)
	$(E) "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(CTL): $(CLIENT_OBJ) $(PROTO_OBJ)
	$(E) "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(TESTS_BIN): $(TEST_OBJ) $(STORE_OBJ) $(EXPORT_OBJ) $(PROTO_OBJ) $(LIBUNWIND)
	@mkdir -p $(@D)
	$(E) "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(shell pkg-config --libs criterion 2>/dev/null)

# Installs only what is missing, so it is cheap to depend on.  The speedscope
# tarball is kept, so each run checks the schema still comes from the pinned
# bytes; the network is used only when the tarball is missing or wrong.  The
# registry's integrity is base64 and sha512sum prints hex: coreutils converts,
# so the check needs nothing a minimal Debian lacks.
deps:
	@missing=$$(for p in $(DEB_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
		echo "installing:" $$missing; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	@set -e; mkdir -p $(DEPS_DIR); \
	tgz=$(SPEEDSCOPE_TGZ); schema=$(SPEEDSCOPE_SCHEMA); \
	want=$$(printf '%s' '$(patsubst sha512-%,%,$(SPEEDSCOPE_INTEGRITY))' | base64 -d | \
		od -An -v -tx1 | tr -d ' \n'); \
	[ $${#want} = 128 ] || { echo "error: SPEEDSCOPE_INTEGRITY is not a sha512 integrity" >&2; exit 1; }; \
	tmp=$$(mktemp $(DEPS_DIR)/.speedscope.XXXXXX); trap 'rm -f "$$tmp"' EXIT; chmod 644 "$$tmp"; \
	if [ ! -f "$$tgz" ] || [ "$$(sha512sum < "$$tgz" | cut -d' ' -f1)" != "$$want" ]; then \
		echo "fetching $(SPEEDSCOPE_URL)"; \
		curl -fsSL --proto '=https' --retry 3 -o "$$tmp" $(SPEEDSCOPE_URL); \
		got=$$(sha512sum < "$$tmp" | cut -d' ' -f1); \
		if [ "$$got" != "$$want" ]; then \
			echo "error: $(SPEEDSCOPE_URL) does not match the pinned hash; refusing it" >&2; \
			echo "  sha512 expected $$want" >&2; \
			echo "  sha512 received $$got" >&2; \
			exit 1; \
		fi; \
		mv "$$tmp" "$$tgz"; \
	fi; \
	tar -xzOf "$$tgz" package/dist/release/file-format-schema.json > "$$tmp"; \
	cmp -s "$$tmp" "$$schema" || mv "$$tmp" "$$schema"

# The suite runs the real binary against real interpreters; see README.md, Tests.
test: deps
	$(Q)$(MAKE) --no-print-directory all $(TESTS_BIN)
	PYPROFD_BIN=$(abspath $(PYPROFD)) PYPROFD_CTL=$(abspath $(CTL)) \
	PYPROFD_TESTS_DIR=$(abspath tests) \
	PYPROFD_SPEEDSCOPE_SCHEMA=$(abspath $(SPEEDSCOPE_SCHEMA)) \
	LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp):print_suppressions=0 \
		$(TESTS_BIN) --jobs 2 $(TEST_ARGS)

check: test

sanitize:
	$(Q)$(MAKE) --no-print-directory BUILD=build-sanitize SANITIZE=1 OPT="-O1 -g" test

# The daemon in a throwaway state directory, attached to a small workload.
demo: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)dir=$$(mktemp -d); sock=$$dir/pyprofd.sock; ctl="$(CTL) --socket $$sock"; \
	$(PYPROFD) --state-dir $$dir --log-level warn & daemon=$$!; \
	$(PYTHON) tests/targets/demo.py & target=$$!; \
	trap 'kill $$target $$daemon 2>/dev/null; wait; rm -rf $$dir' EXIT; \
	for i in $$(seq 100); do [ -S $$sock ] && break; sleep 0.1; done; sleep 1; \
	echo "\$$ pyprofd --state-dir $$dir &"; \
	echo "\$$ pyprofd-ctl attach $$target --label app=demo"; \
	$$ctl attach $$target --label app=demo || exit 1; sleep 3; \
	echo; echo "\$$ pyprofd-ctl list"; $$ctl list || exit 1; \
	echo; echo "\$$ pyprofd-ctl top $$target --once --window 3 --limit 12"; \
	$$ctl top $$target --once --window 3 --limit 12 || exit 1; \
	echo; echo "\$$ pyprofd-ctl dump $$target"; $$ctl dump $$target || exit 1

# Prints figures (us per sample, syscalls and bytes per sample, cache hit rates)
# for every installed CPython; see bench/run.py.
bench: deps
	$(Q)$(MAKE) --no-print-directory all
	$(PYTHON) bench/run.py --pyprofd $(PYPROFD) $(BENCH_ARGS)

# --- install: binaries, systemd units, man pages ---
# Everything goes under $(DESTDIR), so a packager or a test can install as a
# plain user into a scratch root.  The units name the binary by its installed
# path ($(BINDIR), without DESTDIR): templates in systemd/ are filled here.
PREFIX  ?= /usr/local
DESTDIR ?=
BINDIR  ?= $(PREFIX)/bin
UNITDIR ?= $(PREFIX)/lib/systemd/system
MANDIR  ?= $(PREFIX)/share/man
DOCDIR  ?= $(PREFIX)/share/doc/pyprofd

install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(MANDIR)/man8 \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(DOCDIR)
	install -m 0755 $(PYPROFD) $(CTL) $(DESTDIR)$(BINDIR)/
	sed 's|@BINDIR@|$(BINDIR)|g' systemd/pyprofd.service.in > $(DESTDIR)$(UNITDIR)/pyprofd.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/pyprofd.service
	install -m 0644 systemd/pyprofd.socket $(DESTDIR)$(UNITDIR)/
	install -m 0644 daemon/pyprofd.8 $(DESTDIR)$(MANDIR)/man8/
	install -m 0644 client/pyprofd-ctl.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 systemd/pyprofd.conf.example $(DESTDIR)$(DOCDIR)/

# The history store under a synthetic day of 10 targets; see bench/store_bench.c.
$(BUILD)/bench/store_bench: bench/store_bench.c $(STORE_OBJ)
	@mkdir -p $(@D)
	$(E) "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

bench-history: deps
	$(Q)$(MAKE) --no-print-directory all $(BUILD)/bench/store_bench
	$(Q)day=$$(mktemp -d /tmp/pyprofd-bench-day.XXXXXX) && \
	$(BUILD)/bench/store_bench $$day && \
	$(PYTHON) bench/history.py --pyprofd $(PYPROFD) --ctl $(CTL) --synthetic $$day $(BENCH_ARGS); \
	rc=$$?; rm -rf $$day; exit $$rc

# The daemon with 10 targets x 4 threads at 100 Hz for 30 s; see bench/daemon.py.
bench-daemon: deps
	$(Q)$(MAKE) --no-print-directory all
	$(PYTHON) bench/daemon.py --pyprofd $(PYPROFD) --ctl $(CTL) $(BENCH_ARGS)

clean:
	rm -rf build build-sanitize

-include $(UNWIND_OBJ:.o=.d) $(DAEMON_OBJ:.o=.d) $(STORE_OBJ:.o=.d) $(CLIENT_OBJ:.o=.d) $(TEST_OBJ:.o=.d)
