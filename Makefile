# pyprofd — continuous profiler for Python fleets.
#
#   make deps       install the Debian packages the build and the demo need
#   make test-deps  deps, and what the tests alone need: their packages, and
#                   speedscope's file-format schema (build/deps/)
#   make            build build/pyprofd and build/pyprofd-ctl
#   make pythons    the Debian sid root the tests run CPython 3.13-3.15 from (PYTHONS_ROOT)
#   make collector  the OpenTelemetry Collector the OTLP tests send to (COLLECTOR_BIN)
#   make test       test-deps + build + the criterion suite against every CPython found
#   make sanitize   the same suite on an ASan + UBSan build (in build-sanitize/)
#   make fuzz       build every libFuzzer harness (tests/fuzz) and run each a while
#   make demo       the daemon attached to a live Python workload: list, top, dump
#   make bench      pyprofd against CPython's own engines, deep stacks, threads, the daemon
#   make bench-daemon  measure the daemon: 10 targets x 4 threads at 100 Hz on 3.15
#   make bench-accuracy  each phase's share against the truth: every interpreter, rate, quiet and busy
#   make bench-ablation  each prover off in turn: µs and pages per sample, the daemon's CPU
#   make bench-history measure the history store over a synthetic day
#   make bench-hostile what a hostile local user costs the daemon (as root)
#   make bench-fleet   exec to first sample, discovery's CPU, the CPU budget (as root)
#   make bench-page    the profile page in headless Chromium on 50,000 stacks
#   make bench-readv   what one process_vm_readv costs the reader, by pages, hot and cold
#   make bench-async   cost per sample of async-aware sampling, 1,000 and 100,000 tasks (as root)
#   make bench-context cost per sample of reading each sample's request: spans, labels (as root)
#   make bench-native  cost per sample of C frames (--native), quiet and busy (as root)
#   make bench-bound   the per-sample time bound against task chains, exception chains, threads (as root)
#   make soak       the daemon for SOAK_MINUTES (30) under targets, queries, churn and
#                   hostile clients: RSS, descriptors, rates and errors every minute
#   make install    binaries, systemd units and man pages (PREFIX, DESTDIR)
#   make clean
#
# V=1 shows the commands.

BUILD    ?= build
CC       ?= cc
PYTHON   ?= python3

# What building both programs and running the demo take: a C compiler, the
# libraries the programs link, clang, llvm-strip and bpftool for the
# unwinder's kernel programs, python3 for the demo's workload.
DEB_PACKAGES = build-essential pkg-config libelf-dev libjansson-dev libev-dev \
               libprotobuf-c-dev protobuf-c-compiler libsqlite3-dev libinih-dev \
               libsystemd-dev zlib1g-dev libcurl4-openssl-dev libbpf-dev bpftool clang llvm libdw-dev \
               linux-libc-dev python3
# What the tests (and benchmarks, fuzzing, the pythons and collector roots)
# take besides: see README.md, Dependencies.
TEST_DEB_PACKAGES = libcriterion-dev procps util-linux libcap2-bin systemd man-db \
                    protobuf-compiler chromium ca-certificates python3-jsonschema \
                    libclang-rt-14-dev mmdebstrap golang-go libseccomp-dev gdb

# speedscope's file-format schema, which the tests hold the speedscope export
# to.  It is speedscope's, not ours to commit: make test-deps fetches the npm package
# it is published in (npm pack, from whatever registry the machine's npm is
# configured with) and keeps only the schema.  The pin is the registry's
# dist.integrity for this version; a tarball that does not match is refused.
# Under build/ whatever $(BUILD) is, so make sanitize shares the one copy.
SPEEDSCOPE_VERSION   = 1.25.0
SPEEDSCOPE_INTEGRITY = sha512-cpf9HWTZf1ijLXBJrk87Ve/54tnYx6rlf0gUThvn3ook6h63hLXVOQiMf44PT+XoV503cPfvfiT5gP5vojp6Ag==
SPEEDSCOPE_PACKAGE   = speedscope@$(SPEEDSCOPE_VERSION)
DEPS_DIR             = build/deps
SPEEDSCOPE_TGZ       = $(DEPS_DIR)/speedscope-$(SPEEDSCOPE_VERSION).tgz
SPEEDSCOPE_SCHEMA    = $(DEPS_DIR)/speedscope-file-format-schema.json

# CPython 3.13, 3.14, 3.15 and 3.15's debug build (python3.15d) for the tests,
# with numpy for 3.14 (Debian's default Python there: a real C extension):
# Debian's own packages, which only sid has, in a sid root built by mmdebstrap
# from the Debian archive apt is configured with (PYTHONS_MIRROR overrides
# it).  The root lives outside the clone, so every clone and every CI run
# shares one; the tests run its interpreters chrooted (see tests/pythons.h).
PYTHONS_ROOT     ?= /var/cache/pyprofd/sid
PYTHONS_MIRROR   ?=
PYTHONS_PACKAGES  = python3.13 python3.14 python3.15 python3.15-dbg python3.15-dev \
                    python3-opentelemetry-sdk python3-opentelemetry-exporter-otlp-proto-http \
                    python3-numpy
# Whole and of this package list: what tests/pythons-root.sh writes last.
PYTHONS_READY     = [ "$$(cat $(PYTHONS_ROOT)/.pyprofd-pythons 2>/dev/null)" = \
                      "packages: $(PYTHONS_PACKAGES)" ]

# The OpenTelemetry Collector of the OTLP tests: built from Debian's packaged
# Go sources (sid alone has them) in a sid root of its own, made as the one
# above but of files alone (nothing in it runs: its Go toolchain is static
# and runs on the host), by a small main of ours (tests/collector/main.go);
# the static binary is kept beside the root and runs on the host.
COLLECTOR_ROOT     ?= /var/cache/pyprofd/collector
COLLECTOR_PACKAGES  = golang-go golang-opentelemetry-collector-dev
COLLECTOR_BIN      ?= $(COLLECTOR_ROOT)-bin/pyprofd-test-collector

PKGS     = libelf libdw jansson libprotobuf-c inih libsystemd sqlite3 zlib libcurl libbpf
WARN     = -Wall -Wextra -Werror -Wshadow -Wpointer-arith -Wstrict-prototypes \
           -Wmissing-prototypes -Wvla -Wformat=2
OPT      ?= -O2 -g
CFLAGS   ?=
CFLAGS   += -std=c11 -D_GNU_SOURCE $(OPT) $(WARN) -MMD -MP -fno-strict-aliasing
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LIBS_ALL  = $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lev -lm

ifeq ($(FUZZ),1)
CFLAGS  += -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer \
           -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
endif

ifeq ($(SANITIZE),1)
CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
endif

# The first rule below must not be the default goal.
.DEFAULT_GOAL := all

ifneq ($(V),1)
Q = @
E = @echo
else
E = @:
endif

# ---- the libraries, lowest first ----
#
# Each library is a static archive compiled with its own include path: it
# sees the headers of the libraries below it and nothing else.  Headers it
# may not use at all are shadowed by ones that stop the compiler (see
# POISON below), so "only storage/ includes sqlite3.h" and "the unwinder has
# no event loop, database or RPC in it" are checked by every build.

#   base     base/          the hash table, array growth, arenas, durations, the /proc stat
#                           line, the unwinder's words the others share
#   unwind   daemon/unwind/ the remote unwinder
#   wire     proto/         the RPC contract: generated code, framing, the shared names
#   store    storage/       the SQLite history store
#   export   proto/export/  what users see of a profile: every output format
#   client   client/client.c one connection to the daemon
# and the programs above them: pyprofd (daemon/) and pyprofd-ctl (client/).

PROTO      = $(wildcard proto/*.proto)
# protoc-c writes the C for each .proto into the build tree, never the source tree.
PROTO_C    = $(PROTO:proto/%.proto=$(BUILD)/proto/%.pb-c.c)
PROTO_H    = $(PROTO_C:.c=.h)

BASE_SRC   = $(wildcard base/*.c)
UNWIND_SRC = $(filter-out %.bpf.c,$(wildcard daemon/unwind/*.c daemon/unwind/kernel/*.c))
WIRE_SRC   = $(wildcard proto/*.c)
STORE_SRC  = $(wildcard storage/*.c)
EXPORT_SRC = $(wildcard proto/export/*.c)
CLIENT_SRC = client/client.c
# The programs: main.c alone, and their modules as an archive the unit tests link.
DAEMON_SRC = $(filter-out daemon/main.c,$(wildcard daemon/*.c))
CTL_SRC    = $(filter-out $(CLIENT_SRC) client/main.c,$(wildcard client/*.c))
MAIN_SRC   = daemon/main.c $(wildcard client/main.c)

obj = $(1:%.c=$(BUILD)/%.o)
BASE_OBJ   = $(call obj,$(BASE_SRC))
UNWIND_OBJ = $(call obj,$(UNWIND_SRC))
WIRE_OBJ   = $(call obj,$(WIRE_SRC)) $(BUILD)/proto/pyprofd.pb-c.o
STORE_OBJ  = $(call obj,$(STORE_SRC))
# The profile page is written as a page (proto/export/page.html) and built in as bytes.
PAGE_C     = $(BUILD)/proto/export/page.c
EXPORT_OBJ = $(call obj,$(EXPORT_SRC)) $(BUILD)/proto/profile.pb-c.o $(PAGE_C:.c=.o)
CLIENT_OBJ = $(call obj,$(CLIENT_SRC))
# The daemon alone speaks OTLP (daemon/otlp_*.c).
DAEMON_OBJ = $(call obj,$(DAEMON_SRC)) $(BUILD)/proto/otlp_profiles.pb-c.o
CTL_OBJ    = $(call obj,$(CTL_SRC))
MAIN_OBJ   = $(call obj,$(MAIN_SRC))

LIBBASE    = $(BUILD)/lib/libbase.a
LIBUNWIND  = $(BUILD)/lib/libunwind.a
LIBWIRE    = $(BUILD)/lib/libwire.a
LIBSTORE   = $(BUILD)/lib/libstore.a
LIBEXPORT  = $(BUILD)/lib/libexport.a
LIBCLIENT  = $(BUILD)/lib/libclient.a
LIBDAEMON  = $(BUILD)/lib/libdaemon.a
LIBCTL     = $(BUILD)/lib/libctl.a

# Headers a library may not include, shadowed by ones that stop the build.
POISON     = $(BUILD)/poison
NO_SQLITE  = -I$(POISON)/sqlite
NO_EV      = -I$(POISON)/ev
NO_PROTOBUF = -I$(POISON)/protobuf
NO_JSON    = -I$(POISON)/jansson
POISON_H   = $(POISON)/sqlite/sqlite3.h $(POISON)/ev/ev.h \
             $(POISON)/protobuf/protobuf-c/protobuf-c.h $(POISON)/jansson/jansson.h

INC_BASE   = -Ibase
INC_UNWIND = $(INC_BASE) -Idaemon/unwind -Idaemon/unwind/kernel
INC_WIRE   = $(INC_BASE) -Iproto -I$(BUILD)/proto
INC_STORE  = $(INC_BASE) -Istorage
INC_EXPORT = $(INC_BASE) $(INC_WIRE) -Iproto/export
INC_CLIENT = $(INC_WIRE) -Iclient

$(BASE_OBJ):   LIBINC = $(NO_SQLITE) $(NO_EV) $(NO_PROTOBUF) $(NO_JSON) $(INC_BASE)
$(UNWIND_OBJ): LIBINC = $(NO_SQLITE) $(NO_EV) $(NO_PROTOBUF) $(NO_JSON) $(INC_UNWIND)
$(WIRE_OBJ):   LIBINC = $(NO_SQLITE) $(NO_EV) $(NO_JSON) $(INC_WIRE)
$(STORE_OBJ):  LIBINC = $(NO_EV) $(NO_PROTOBUF) $(NO_JSON) $(INC_STORE)
$(EXPORT_OBJ): LIBINC = $(NO_SQLITE) $(NO_EV) $(INC_EXPORT)
$(CLIENT_OBJ): LIBINC = $(NO_SQLITE) $(NO_EV) $(NO_JSON) $(INC_CLIENT)
INC_DAEMON = $(INC_UNWIND) $(INC_WIRE) $(INC_STORE) $(INC_EXPORT) -Idaemon
INC_CTL    = $(INC_EXPORT) $(INC_CLIENT)
$(DAEMON_OBJ) $(BUILD)/daemon/main.o: LIBINC = $(NO_SQLITE) $(INC_DAEMON)
$(CTL_OBJ) $(BUILD)/client/main.o:    LIBINC = $(NO_SQLITE) $(NO_EV) $(INC_CTL)

PYPROFD    = $(BUILD)/pyprofd
CTL        = $(BUILD)/pyprofd-ctl
# What the unwinder links beyond libc: libelf, libbpf for its kernel programs, libdw for C frames.
LINK_UNWIND = -lelf -lbpf -ldw
LIBS_DAEMON = $(LIBDAEMON) $(LIBEXPORT) $(LIBSTORE) $(LIBWIRE) $(LIBUNWIND) $(LIBBASE)
LIBS_CTL   = $(LIBCTL) $(LIBCLIENT) $(LIBEXPORT) $(LIBWIRE) $(LIBBASE)
LINK_DAEMON = $(LIBS_ALL)
LINK_CTL   = -lprotobuf-c -ljansson -lz -lm

# ---- tests: one criterion binary per library, each linking that library alone ----
#
#   tests/base tests/unwind tests/wire tests/storage tests/export   the libraries' unit tests
#   tests/daemon tests/client   the programs' modules (libdaemon.a, libctl.a)
#   tests/system   the programs, run for real: daemon, dump, history, install
# tests/*.c is the support they share (interpreters, helpers).

TEST_SUPPORT_SRC = tests/helpers.c tests/pythons.c
TEST_SUPPORT_OBJ = $(call obj,$(TEST_SUPPORT_SRC))
TEST_SUITES = base unwind wire storage export daemon client system
test_src = $(wildcard tests/$(1)/*.c)
test_obj = $(call obj,$(call test_src,$(1)))
TEST_BINS  = $(TEST_SUITES:%=$(BUILD)/tests/%-tests)
# Programs the suites run beside pyprofd: unit-sandbox applies pyprofd.service's
# system call and address family filters as systemd would (tests/sandbox).
TEST_TOOLS = $(BUILD)/tests/unit-sandbox $(OTEL_PUBS)
TEST_OBJ   = $(foreach s,$(TEST_SUITES),$(call test_obj,$(s))) $(TEST_SUPPORT_OBJ)
LIBS_TEST  = $(shell pkg-config --libs criterion jansson 2>/dev/null)

$(TEST_SUPPORT_OBJ):              LIBINC = $(NO_SQLITE) $(NO_EV) -Itests
$(call test_obj,base):            LIBINC = $(NO_SQLITE) $(NO_EV) $(NO_PROTOBUF) -Itests $(INC_BASE)
$(call test_obj,unwind):          LIBINC = $(NO_SQLITE) $(NO_EV) $(NO_PROTOBUF) -Itests $(INC_UNWIND)
$(call test_obj,wire):            LIBINC = $(NO_SQLITE) $(NO_EV) -Itests $(INC_WIRE)
$(call test_obj,storage):         LIBINC = $(NO_EV) $(NO_PROTOBUF) -Itests $(INC_STORE)
$(call test_obj,export):          LIBINC = $(NO_SQLITE) $(NO_EV) -Itests $(INC_EXPORT)
$(call test_obj,daemon):          LIBINC = $(NO_SQLITE) -Itests $(INC_DAEMON)
$(call test_obj,client):          LIBINC = $(NO_SQLITE) $(NO_EV) -Itests $(INC_CTL)
$(call test_obj,system):          LIBINC = $(NO_SQLITE) $(NO_EV) -Itests -Itests/system $(INC_WIRE)

# ---- fuzzing: every harness in tests/fuzz, built with clang and libFuzzer ----
#
# Each harness sees every header and links every library, as a test does.
FUZZ_SRC     = $(wildcard tests/fuzz/*.c)
FUZZ_OBJ     = $(call obj,$(FUZZ_SRC))
FUZZ_BINS    = $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)
FUZZ_SECONDS ?= 20
# FUZZ_RUNS=N runs each harness for N executions instead of FUZZ_SECONDS;
# FUZZ_HARNESSES="fuzz_rpc ..." runs only those.
FUZZ_RUNS    ?=
FUZZ_HARNESSES ?= $(notdir $(FUZZ_BINS))
FUZZ_LIMIT   = $(if $(FUZZ_RUNS),-runs=$(FUZZ_RUNS),-max_total_time=$(FUZZ_SECONDS))
FUZZ_HOW     = $(if $(FUZZ_RUNS),$(FUZZ_RUNS) executions,$(FUZZ_SECONDS) s)

# The remote-memory harness works on the hand-built runtime of the unwinder's tests.
$(BUILD)/fuzz/fuzz_remote: $(BUILD)/tests/unwind/image.o
$(FUZZ_OBJ): LIBINC = $(NO_SQLITE) -Itests -Itests/unwind $(INC_DAEMON) $(INC_CLIENT)

$(BUILD)/fuzz/%: $(BUILD)/tests/fuzz/%.o $(LIBCTL) $(LIBCLIENT) $(LIBS_DAEMON)
	@mkdir -p $(@D)
	$(E) "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -fsanitize=fuzzer -o $@ $^ $(LINK_DAEMON)

.PHONY: all deps test-deps pythons collector test-build test check sanitize fuzz fuzz-run demo bench bench-daemon bench-accuracy bench-ablation bench-history bench-hostile bench-fleet bench-page bench-readv bench-async bench-context bench-native bench-bound soak install clean

all: $(PYPROFD) $(CTL)

$(BUILD)/proto/%.pb-c.c $(BUILD)/proto/%.pb-c.h: proto/%.proto
	@mkdir -p $(@D)
	$(E) "  PROTOC  $<"
	$(Q)protoc-c --c_out=$(BUILD)/proto -Iproto $<

# Kept: make would otherwise delete the headers as intermediates.
.SECONDARY: $(PROTO_C) $(PROTO_H) $(POISON_H)

$(POISON)/%.h:
	@mkdir -p $(@D)
	$(Q)printf '#error "%s is not for this part of pyprofd: see the layers in the Makefile"\n' $(notdir $@) > $@

# The page as a NUL-ended array, export_page (proto/export/export_int.h).
$(PAGE_C): proto/export/page.html
	@mkdir -p $(@D)
	$(E) "  GEN     $@"
	$(Q){ echo '/* Made by make from $<: edit that. */'; \
	  echo 'extern const char export_page[];'; \
	  echo 'const char export_page[] = {'; \
	  od -An -v -tx1 < $< | sed 's/\([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	  echo '0};'; } > $@.tmp && mv $@.tmp $@

$(PAGE_C:.c=.o): $(PAGE_C)
	$(E) "  CC      $<"
	$(Q)$(CC) $(CFLAGS) -c -o $@ $<

# Generated protobuf code is not ours to hold to our warnings.
$(BUILD)/proto/%.pb-c.o: $(BUILD)/proto/%.pb-c.c | $(POISON_H)
	$(E) "  CC      $<"
	$(Q)$(CC) $(filter-out -Wmissing-prototypes -Wshadow,$(CFLAGS)) $(LIBINC) $(PKG_CFLAGS) -c -o $@ $<

# The unwinder's kernel programs (daemon/unwind/kernel: kread copies a
# thread's frames, kstill looks at which threads ran, kcopy copies a process
# as it falls quiet; each a program of its own, as a kernel may refuse it
# alone): NAME.bpf.c compiled by clang for the BPF target, its DWARF
# stripped (the BTF stays), and built into the unwinder as a libbpf
# skeleton (bytes and loader in a header) that NAME.c includes.
BPF_MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
KERNEL_DIR      = daemon/unwind/kernel
KERNEL_PROGS    = $(patsubst $(KERNEL_DIR)/%.bpf.c,%,$(wildcard $(KERNEL_DIR)/*.bpf.c))
BPF_SKELS       = $(KERNEL_PROGS:%=$(BUILD)/$(KERNEL_DIR)/%.skel.h)
KERNEL_LOADERS  = $(KERNEL_PROGS:%=$(BUILD)/$(KERNEL_DIR)/%.o)
$(BUILD)/$(KERNEL_DIR)/%.bpf.o: $(KERNEL_DIR)/%.bpf.c $(wildcard $(KERNEL_DIR)/*_abi.h $(KERNEL_DIR)/*.bpf.h)
	@mkdir -p $(@D)
	$(E) "  BPF     $<"
	$(Q)clang -O2 -g -Wall -Werror -target bpf -I/usr/include/$(BPF_MULTIARCH) -I$(KERNEL_DIR) -c -o $@.tmp $<
	$(Q)llvm-strip -g $@.tmp && mv $@.tmp $@
$(BUILD)/$(KERNEL_DIR)/%.skel.h: $(BUILD)/$(KERNEL_DIR)/%.bpf.o
	$(E) "  SKEL    $@"
	$(Q)bpftool gen skeleton $< name $*_bpf > $@.tmp && mv $@.tmp $@
$(KERNEL_LOADERS): $(BUILD)/$(KERNEL_DIR)/%.o: $(BUILD)/$(KERNEL_DIR)/%.skel.h
$(KERNEL_LOADERS): LIBINC += -I$(BUILD)/$(KERNEL_DIR)
.SECONDARY: $(BPF_SKELS) $(BPF_SKELS:.skel.h=.bpf.o)

$(BUILD)/%.o: %.c | $(PROTO_H) $(POISON_H)
	@mkdir -p $(@D)
	$(E) "  CC      $<"
	$(Q)$(CC) $(CFLAGS) $(LIBINC) $(PKG_CFLAGS) -c -o $@ $<

$(BUILD)/lib/%.a:
	@mkdir -p $(@D)
	$(E) "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

$(LIBBASE):   $(BASE_OBJ)
$(LIBUNWIND): $(UNWIND_OBJ)
$(LIBWIRE):   $(WIRE_OBJ)
$(LIBSTORE):  $(STORE_OBJ)
$(LIBEXPORT): $(EXPORT_OBJ)
$(LIBCLIENT): $(CLIENT_OBJ)
$(LIBDAEMON): $(DAEMON_OBJ)
$(LIBCTL):    $(CTL_OBJ)

$(PYPROFD): $(BUILD)/daemon/main.o $(LIBS_DAEMON)
	$(E) "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LINK_DAEMON)

$(CTL): $(call obj,$(filter client/%,$(MAIN_SRC))) $(LIBS_CTL)
	$(E) "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LINK_CTL)

# Each suite links its library and the ones below it, and no more: the
# unwinder's tests link neither libev, SQLite nor protobuf-c.
$(BUILD)/tests/base-tests: $(call test_obj,base) $(LIBBASE)
	$(E) "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_TEST)

# Its allocations are counted (tests/unwind/test_steady.c).
$(BUILD)/tests/unwind-tests: $(call test_obj,unwind) $(TEST_SUPPORT_OBJ) $(LIBUNWIND) $(LIBBASE)
	$(E) "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc -o $@ $^ $(LINK_UNWIND) $(LIBS_TEST) -lm

$(BUILD)/tests/wire-tests: $(call test_obj,wire) $(LIBWIRE) $(LIBBASE)
	$(E) "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ -lprotobuf-c $(LIBS_TEST)

$(BUILD)/tests/storage-tests: $(call test_obj,storage) $(TEST_SUPPORT_OBJ) $(LIBSTORE) $(LIBBASE)
	$(E) "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ -lsqlite3 -lpthread $(LIBS_TEST) -lm

$(BUILD)/tests/export-tests: $(call test_obj,export) $(TEST_SUPPORT_OBJ) $(LIBEXPORT) $(LIBWIRE) $(LIBBASE)
	$(E) "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ -lprotobuf-c -lz $(LIBS_TEST) -lm

$(BUILD)/tests/daemon-tests: $(call test_obj,daemon) $(TEST_SUPPORT_OBJ) $(LIBS_DAEMON)
	$(E) "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LINK_DAEMON) $(LIBS_TEST)

$(BUILD)/tests/client-tests: $(call test_obj,client) $(TEST_SUPPORT_OBJ) $(LIBS_CTL)
	$(E) "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LINK_CTL) $(LIBS_TEST)

$(BUILD)/tests/system-tests: $(call test_obj,system) $(TEST_SUPPORT_OBJ) $(BUILD)/proto/otlp_profiles.pb-c.o $(LIBWIRE) $(LIBBASE)
	$(E) "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ -lprotobuf-c $(LIBS_TEST) -lm

$(BUILD)/tests/unit-sandbox: $(BUILD)/tests/sandbox/unit_sandbox.o
	$(E) "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(shell pkg-config --libs libseccomp)

# OpenTelemetry's process and thread contexts published from C, for a plain
# python to dlopen (tests/otel): one source built three ways, differing only
# in how otel_thread_ctx_v1 is reached.  Their own flags, never CFLAGS or
# LDFLAGS, so make sanitize's ASan stays out of a python that lacks it;
# libprotobuf-c linked in and hidden, as the Debian root has none.
OTEL_PUB_DIR    = $(BUILD)/tests/otel
OTEL_PUBS       = $(OTEL_PUB_DIR)/libotelpub-desc.so $(OTEL_PUB_DIR)/libotelpub-gd.so \
                  $(OTEL_PUB_DIR)/libotelpub-ie.so
OTEL_PUB_CFLAGS = -std=c11 -D_GNU_SOURCE -O2 -g $(WARN) -fno-strict-aliasing -fPIC -fvisibility=hidden
$(OTEL_PUB_DIR)/libotelpub-desc.so: OTEL_TLS = -mtls-dialect=gnu2
$(OTEL_PUB_DIR)/libotelpub-gd.so:   OTEL_TLS = -mtls-dialect=gnu
$(OTEL_PUB_DIR)/libotelpub-ie.so:   OTEL_TLS = -DOTEL_PUB_INITIAL_EXEC

$(OTEL_PUB_DIR)/otlp_profiles.pb-c.o: $(BUILD)/proto/otlp_profiles.pb-c.c $(BUILD)/proto/otlp_profiles.pb-c.h
	@mkdir -p $(@D)
	$(E) "  CC      $@"
	$(Q)$(CC) $(filter-out -Wmissing-prototypes -Wshadow,$(OTEL_PUB_CFLAGS)) -I$(BUILD)/proto -c -o $@ $<

$(OTEL_PUBS): $(OTEL_PUB_DIR)/libotelpub-%.so: tests/otel/publisher.c $(OTEL_PUB_DIR)/otlp_profiles.pb-c.o
	$(E) "  CCLD    $@"
	$(Q)$(CC) $(OTEL_PUB_CFLAGS) $(OTEL_TLS) -I$(BUILD)/proto -shared -Wl,-z,defs -o $@ $^ \
		-Wl,--exclude-libs,ALL -Wl,-Bstatic -lprotobuf-c -Wl,-Bdynamic

# $(call install_missing,PACKAGES[,COMMANDS]): apt-get install the packages not
# installed yet, and those named like the commands that are missing (npm
# comes with Node.js where the machine has one, else from Debian).
install_missing = missing=$$(for p in $(1); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; \
	done); \
	for c in $(2); do command -v $$c >/dev/null 2>&1 || missing="$$missing $$c"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:" $$missing; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

# Installs only what is missing, so it is cheap to depend on.
deps:
	@$(call install_missing,$(DEB_PACKAGES))

# The speedscope tarball is kept, so each run checks the schema still comes
# from the pinned bytes; the network is used only when the tarball is
# missing or wrong.  The registry's integrity is base64 and sha512sum prints
# hex: coreutils converts, so the check needs nothing a minimal Debian lacks.
test-deps:
	@$(call install_missing,$(DEB_PACKAGES) $(TEST_DEB_PACKAGES),npm)
	@set -e; mkdir -p $(DEPS_DIR); \
	tgz=$(SPEEDSCOPE_TGZ); schema=$(SPEEDSCOPE_SCHEMA); \
	want=$$(printf '%s' '$(patsubst sha512-%,%,$(SPEEDSCOPE_INTEGRITY))' | base64 -d | \
		od -An -v -tx1 | tr -d ' \n'); \
	[ $${#want} = 128 ] || { echo "error: SPEEDSCOPE_INTEGRITY is not a sha512 integrity" >&2; exit 1; }; \
	tmp=$$(mktemp $(DEPS_DIR)/.speedscope.XXXXXX); pack=$$(mktemp -d $(DEPS_DIR)/.pack.XXXXXX); \
	trap 'rm -rf "$$tmp" "$$pack"' EXIT; chmod 644 "$$tmp"; \
	if [ ! -f "$$tgz" ] || [ "$$(sha512sum < "$$tgz" | cut -d' ' -f1)" != "$$want" ]; then \
		echo "fetching $(SPEEDSCOPE_PACKAGE) (npm pack)"; \
		npm pack --loglevel=error --pack-destination "$$pack" $(SPEEDSCOPE_PACKAGE) >/dev/null || \
			{ echo "error: npm pack could not fetch $(SPEEDSCOPE_PACKAGE) (npm's reason above)" >&2; exit 1; }; \
		got=$$(sha512sum < "$$pack/speedscope-$(SPEEDSCOPE_VERSION).tgz" | cut -d' ' -f1); \
		if [ "$$got" != "$$want" ]; then \
			echo "error: $(SPEEDSCOPE_PACKAGE) does not match the pinned hash; refusing it" >&2; \
			echo "  sha512 expected $$want" >&2; \
			echo "  sha512 received $$got" >&2; \
			exit 1; \
		fi; \
		mv "$$pack/speedscope-$(SPEEDSCOPE_VERSION).tgz" "$$tgz"; \
	fi; \
	tar -xzOf "$$tgz" package/dist/release/file-format-schema.json > "$$tmp"; \
	cmp -s "$$tmp" "$$schema" || mv "$$tmp" "$$schema"

# The suites run the real binaries against real interpreters; see tests/README.md.
TEST_ENV = PYPROFD_BIN=$(abspath $(PYPROFD)) PYPROFD_CTL=$(abspath $(CTL)) \
	PYPROFD_TESTS_DIR=$(abspath tests) \
	PYPROFD_PYTHONS_CACHE=$(abspath $(BUILD))/tests/pythons.cache \
	PYPROFD_SPEEDSCOPE_SCHEMA=$(abspath $(SPEEDSCOPE_SCHEMA)) \
	PYPROFD_UNIT_SANDBOX=$(abspath $(BUILD))/tests/unit-sandbox \
	PYPROFD_OTEL_PUBLISHERS=$(abspath $(BUILD))/tests/otel \
	LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp):print_suppressions=0

# Builds the root when it is missing or holds another package list; see
# tests/pythons-root.sh.  Only root can build it (and run what is in it).
pythons: test-deps
	$(Q)SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	$$SUDO sh tests/pythons-root.sh $(PYTHONS_ROOT) "$(PYTHONS_MIRROR)" $(PYTHONS_PACKAGES)

# The root, then the binary; each step keeps what is there when it is current.
collector: test-deps
	$(Q)SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	$$SUDO env PYPROFD_ROOT_VARIANT=extract PYPROFD_ROOT_NAME=collector \
		sh tests/pythons-root.sh $(COLLECTOR_ROOT) "$(PYTHONS_MIRROR)" $(COLLECTOR_PACKAGES) && \
	$$SUDO sh tests/collector-build.sh $(COLLECTOR_ROOT) $(COLLECTOR_BIN) tests/collector/main.go

COLLECTOR_SKIPPED = echo; \
	echo "**********************************************************************"; \
	echo "* SKIPPED: the OTLP export tests against a real OpenTelemetry Collector"; \
	echo "* ($(COLLECTOR_BIN)): $$cwhy"; \
	echo "**********************************************************************"; \
	echo

# Without the root (no network, not root) the suite still runs, on the other
# interpreters, and says so before and after.
PYTHONS_SKIPPED = echo; \
	echo "**********************************************************************"; \
	echo "* SKIPPED: CPython 3.13, 3.14, 3.15 and 3.15d (its debug build)"; \
	echo "* from the Debian sid root $(PYTHONS_ROOT): $$why"; \
	echo "**********************************************************************"; \
	echo

# What the suite runs, built (test-deps installed already).
test-build:
	$(Q)$(MAKE) --no-print-directory all $(TEST_BINS) $(TEST_TOOLS)

test: test-deps
	$(Q)$(MAKE) --no-print-directory test-build
	$(Q)if [ "$$(id -u)" != 0 ]; then \
		why="only root can run them (chroot)"; \
	elif $(PYTHONS_READY) || $(MAKE) --no-print-directory pythons; then \
		why=; \
	else \
		why="it could not be built (see make pythons above)"; \
	fi; \
	roots=; \
	if [ -z "$$why" ]; then roots="PYPROFD_PYTHONS_ROOT=$(PYTHONS_ROOT)"; else $(PYTHONS_SKIPPED); fi; \
	if [ "$$(id -u)" != 0 ]; then \
		cwhy="only root builds it (mmdebstrap)"; \
	elif $(MAKE) --no-print-directory collector; then \
		cwhy=; roots="$$roots PYPROFD_COLLECTOR=$(COLLECTOR_BIN)"; \
	else \
		cwhy="it could not be built (see make collector above)"; \
	fi; \
	[ -z "$$cwhy" ] || { $(COLLECTOR_SKIPPED); }; \
	failed=; for t in $(TEST_BINS); do \
		echo "== $$t"; \
		env $(TEST_ENV) $$roots $$t --jobs 2 $(TEST_ARGS) || failed="$$failed $$(basename $$t)"; \
	done; \
	[ -z "$$why" ] || { $(PYTHONS_SKIPPED); }; \
	[ -z "$$cwhy" ] || { $(COLLECTOR_SKIPPED); }; \
	if [ -n "$$failed" ]; then echo "failed:$$failed" >&2; exit 1; fi

check: test

# One interpreter of each version and kind (PYPROFD_TEST_ONE_PER_VERSION, see
# tests/pythons.c); make sanitize SANITIZE_ALL=1 runs them all.
sanitize:
	$(Q)$(if $(SANITIZE_ALL),,PYPROFD_TEST_ONE_PER_VERSION=1) $(MAKE) --no-print-directory BUILD=build-sanitize SANITIZE=1 OPT="-O1 -g" test

# Builds every harness and runs each for FUZZ_SECONDS (or FUZZ_RUNS), keeping what it learnt
# in build-fuzz/corpus/NAME (seeded from tests/fuzz/seeds/NAME when there).
fuzz: test-deps
	$(Q)$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang FUZZ=1 OPT="-O1 -g" fuzz-run

# As root each harness runs in a pid namespace of its own, beside one Python
# process of its own (tests/fuzz/private.sh): the pids its inputs attach to and
# the processes its rules judge are those, not whatever runs on the machine.
fuzz-run: $(FUZZ_HARNESSES:%=$(BUILD)/fuzz/%)
	$(Q)failed=; for f in $^; do \
		name=$$(basename $$f); corpus=$(BUILD)/corpus/$$name; mkdir -p $$corpus; \
		seeds=; [ -d tests/fuzz/seeds/$$name ] && seeds=tests/fuzz/seeds/$$name; \
		echo "== $$name for $(FUZZ_HOW)"; \
		$(TEST_ENV) sh tests/fuzz/private.sh $(PYTHON) $$f $(FUZZ_LIMIT) -print_final_stats=1 \
			$(FUZZ_ARGS) $$corpus $$seeds \
			> $(BUILD)/fuzz/$$name.log 2>&1 || { failed="$$failed $$name"; tail -40 $(BUILD)/fuzz/$$name.log; }; \
		grep -E '^stat::number_of_executed_units|^Done' $(BUILD)/fuzz/$$name.log | tail -1; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz findings:$$failed (see $(BUILD)/fuzz/*.log)" >&2; exit 1; fi

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

# pyprofd against CPython's own engines (3.15 with its frame cache, 3.14, 3.13's
# reader) per workload, deep stacks, many threads and the daemon's cost, on the
# interpreters of PYTHONS_ROOT when it is there (as root); see bench/run.py.
bench: test-deps
	$(Q)$(MAKE) --no-print-directory all $(BUILD)/bench/wake_cost
	PYPROFD_PYTHONS_ROOT=$(PYTHONS_ROOT) $(PYTHON) bench/run.py --pyprofd $(PYPROFD) --ctl $(CTL) $(BENCH_ARGS)

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
$(BUILD)/bench/store_bench.o: LIBINC = $(NO_EV) $(NO_PROTOBUF) $(INC_STORE)
$(BUILD)/bench/store_bench: $(BUILD)/bench/store_bench.o $(LIBSTORE) $(LIBBASE)
	$(E) "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ -lsqlite3 -lpthread -lm

bench-history: test-deps
	$(Q)$(MAKE) --no-print-directory all $(BUILD)/bench/store_bench
	$(Q)day=$$(mktemp -d /tmp/pyprofd-bench-day.XXXXXX) && \
	$(BUILD)/bench/store_bench $$day && \
	$(PYTHON) bench/history.py --pyprofd $(PYPROFD) --ctl $(CTL) --synthetic $$day $(BENCH_ARGS); \
	rc=$$?; rm -rf $$day; exit $$rc

# The daemon with 10 targets x 4 threads at 100 Hz for 30 s, 3 rounds beside CPython's sampler; see bench/daemon.py.
bench-daemon: test-deps
	$(Q)$(MAKE) --no-print-directory all $(BUILD)/bench/wake_cost
	PYPROFD_PYTHONS_ROOT=$(PYTHONS_ROOT) $(PYTHON) bench/daemon.py --pyprofd $(PYPROFD) --ctl $(CTL) $(BENCH_ARGS)

# Each phase's share against the truth, every interpreter and rate, quiet and busy; see bench/accuracy.py.
bench-accuracy: all test-deps
	PYPROFD_PYTHONS_ROOT=$(PYTHONS_ROOT) $(PYTHON) bench/accuracy.py --pyprofd $(PYPROFD) $(BENCH_ARGS)

# Each prover off in turn: µs and pages per sample, the daemon's CPU; see bench/ablation.py.
bench-ablation: all test-deps
	PYPROFD_PYTHONS_ROOT=$(PYTHONS_ROOT) $(PYTHON) bench/ablation.py --pyprofd $(PYPROFD) --ctl $(CTL) $(BENCH_ARGS)

# Exec to first sample, discovery's CPU idle and in a burst, the CPU budget; see bench/fleet.py.
bench-fleet: test-deps
	$(Q)$(MAKE) --no-print-directory all
	$(PYTHON) bench/fleet.py --pyprofd $(PYPROFD) --ctl $(CTL) $(BENCH_ARGS)

# The profile page on 50,000 stacks, timed in headless Chromium; see bench/page_bench.c.
$(BUILD)/bench/page_bench.o: LIBINC = $(NO_SQLITE) $(NO_EV) $(INC_EXPORT)
$(BUILD)/bench/page_bench: $(BUILD)/bench/page_bench.o $(LIBEXPORT) $(LIBWIRE) $(LIBBASE)
	$(E) "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ -lprotobuf-c -ljansson -lz -lm

bench-page: test-deps
	$(Q)$(MAKE) --no-print-directory $(BUILD)/bench/page_bench
	$(BUILD)/bench/page_bench $(BENCH_ARGS)

# Bench programs of libc alone: what one process_vm_readv costs by pages pinned,
# back to back and 10 ms apart (bench/readv_cost.c), and what a process that
# only wakes at the daemon's rate costs here, which bench/daemon.py runs
# (bench/wake_cost.c).
BENCH_LIBC = $(BUILD)/bench/readv_cost $(BUILD)/bench/wake_cost
$(BENCH_LIBC:%=%.o): LIBINC = $(NO_SQLITE) $(NO_EV) $(NO_PROTOBUF)
$(BENCH_LIBC): %: %.o
	$(E) "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^

bench-readv:
	$(Q)$(MAKE) --no-print-directory $(BUILD)/bench/readv_cost
	$(BUILD)/bench/readv_cost $(BENCH_ARGS)

# Cost per sample of async-aware sampling with 1,000 and 100,000 suspended tasks; see bench/async.py.
bench-async: test-deps
	$(Q)$(MAKE) --no-print-directory all
	PYPROFD_PYTHONS_ROOT=$(PYTHONS_ROOT) $(PYTHON) bench/async.py --pyprofd $(PYPROFD) $(BENCH_ARGS)

# What reading each sample's request (span, labels) costs per sample; see bench/context.py.
bench-context: test-deps
	$(Q)$(MAKE) --no-print-directory all
	PYPROFD_PYTHONS_ROOT=$(PYTHONS_ROOT) $(PYTHON) bench/context.py --pyprofd $(PYPROFD) $(BENCH_ARGS)

bench-native: test-deps
	$(Q)$(MAKE) --no-print-directory all
	PYPROFD_PYTHONS_ROOT=$(PYTHONS_ROOT) $(PYTHON) bench/native.py --pyprofd $(PYPROFD) $(BENCH_ARGS)

# The per-sample time bound against each reader's worst; see bench/bound.py.
bench-bound: test-deps
	$(Q)$(MAKE) --no-print-directory all
	PYPROFD_PYTHONS_ROOT=$(PYTHONS_ROOT) $(PYTHON) bench/bound.py --pyprofd $(PYPROFD) --ctl $(CTL) $(BENCH_ARGS)

# Unread answers, one user's connections, descriptors used up; see bench/hostile.py.
bench-hostile: test-deps
	$(Q)$(MAKE) --no-print-directory all
	$(PYTHON) bench/hostile.py --pyprofd $(PYPROFD) --ctl $(CTL) $(BENCH_ARGS)

# The daemon for SOAK_MINUTES under targets, queries, churn and hostile clients; see bench/soak.py.
SOAK_MINUTES ?= 30
soak: test-deps
	$(Q)$(MAKE) --no-print-directory all
	$(PYTHON) bench/soak.py --pyprofd $(PYPROFD) --ctl $(CTL) --minutes $(SOAK_MINUTES) $(BENCH_ARGS)

clean:
	rm -rf build build-sanitize build-fuzz

-include $(patsubst %.o,%.d,$(BASE_OBJ) $(UNWIND_OBJ) $(WIRE_OBJ) $(STORE_OBJ) $(EXPORT_OBJ) \
           $(CLIENT_OBJ) $(DAEMON_OBJ) $(CTL_OBJ) $(MAIN_OBJ) $(TEST_OBJ) $(FUZZ_OBJ))
