#!/bin/sh
# The Debian sid root the test suite runs CPython 3.13, 3.14, 3.15 and 3.15's
# debug build from (Debian's own packages; the host's release has none):
#
#   pythons-root.sh ROOT MIRROR PACKAGE...
#
# Built by mmdebstrap into a fresh directory beside ROOT and renamed to ROOT
# once whole, so ROOT is either absent or complete; ROOT/.pyprofd-pythons
# records the packages it holds and a ROOT holding the same list is kept.
# MIRROR empty: the Debian archive this machine's apt is configured with.
# Runs under a lock, so two builds of one ROOT never race.
#
# PYPROFD_ROOT_VARIANT=extract makes a root of files alone (the packages and
# their dependencies unpacked, nothing configured, no essential set), which
# is all a toolchain run from the host needs and a fraction of the time;
# PYPROFD_ROOT_NAME names the root in messages.
set -eu

root=$1
mirror=$2
shift 2
stamp_name=.pyprofd-pythons
want="packages: $*"
variant=${PYPROFD_ROOT_VARIANT:-apt}
name=${PYPROFD_ROOT_NAME:-pythons}

# The first Debian archive of apt's sources (one-line sources.list files and
# deb822 .sources files alike, in the order apt reads them): a `deb` source
# whose path ends in /debian, else one signed by Debian's archive key, else
# the first `deb` source; security suites never (they have no sid).
apt_mirror() {
	files=
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
		/etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] && files="$files $f"
	done
	[ -n "$files" ] || return 0
	# shellcheck disable=SC2086
	awk '
	function consider(uri, suites, keyring,    n, i, s, rank) {
		n = split(suites, s, /[ \t]+/)
		for (i = 1; i <= n; i++)
			if (s[i] != "" && s[i] !~ /-security$/)
				break
		if (i > n)
			return
		sub(/\/+$/, "", uri)
		rank = uri ~ /\/debian$/ ? 3 : keyring ~ /debian-archive-keyring/ ? 2 : 1
		if (rank > best) {
			best = rank
			chosen = uri
		}
	}
	function stanza_end() {
		if (types ~ /(^|[ \t])deb([ \t]|$)/ && tolower(enabled) != "no" && uris != "") {
			split(uris, u, /[ \t]+/)
			consider(u[1], suites, signed)
		}
		types = uris = suites = signed = enabled = ""
	}
	FNR == 1 { if (deb822) stanza_end(); deb822 = FILENAME ~ /\.sources$/ }
	/^[ \t]*#/ { next }
	deb822 && /^[ \t]*$/ { stanza_end(); next }
	deb822 {
		key = $0; val = $0
		sub(/[ \t]*:.*/, "", key)
		key = tolower(key)
		sub(/^[^:]*:[ \t]*/, "", val)
		if (key == "types") types = val
		else if (key == "uris") uris = val
		else if (key == "suites") suites = val
		else if (key == "signed-by") signed = val
		else if (key == "enabled") enabled = val
		next
	}
	$1 == "deb" {
		line = $0; opts = ""
		if (match(line, /\[[^]]*\]/)) {
			opts = substr(line, RSTART, RLENGTH)
			line = substr(line, 1, RSTART - 1) substr(line, RSTART + RLENGTH)
		}
		split(line, f)
		consider(f[2], f[3], opts)
	}
	END { if (deb822) stanza_end(); if (chosen != "") print chosen }
	' $files
}

mkdir -p "$(dirname "$root")"
exec 9>"$root.lock"
flock 9

if [ -f "$root/$stamp_name" ] && [ "$(cat "$root/$stamp_name")" = "$want" ]; then
	echo "$name: $root is ready ($*)"
	exit 0
fi

# What a build killed half-way left; no other build runs while we hold the lock.
rm -rf "$root".new.* "$root".old.*

[ -n "$mirror" ] || mirror=$(apt_mirror)
if [ -z "$mirror" ]; then
	echo "$name: no Debian archive in apt's sources; name one with PYTHONS_MIRROR=URI" >&2
	exit 1
fi
command -v mmdebstrap >/dev/null || {
	echo "$name: mmdebstrap is missing (make deps installs it)" >&2
	exit 1
}

new=$(mktemp -d "$root.new.XXXXXX")
# mktemp's 0700 would keep apt's download user out.
chmod 755 "$new"
old=
trap 'rm -rf "$new" ${old:+"$old"}' EXIT
echo "$name: building $root from $mirror (sid, $variant: $*)"
# The mirror may serve a snapshot whose Release file has expired.
mmdebstrap --variant="$variant" --aptopt='Acquire::Check-Valid-Until "false"' \
	--include="$(echo "$*" | tr ' ' ,)" sid "$new" "deb $mirror sid main"
printf '%s\n' "$want" >"$new/$stamp_name"
if [ -e "$root" ]; then
	old=$(mktemp -d "$root.old.XXXXXX")
	mv -T "$root" "$old/root"
fi
mv -T "$new" "$root"
echo "$name: $root is ready ($*)"
