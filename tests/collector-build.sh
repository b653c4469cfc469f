#!/bin/sh
# The OpenTelemetry Collector the OTLP tests send to, built from Debian's
# packaged Go sources in ROOT (a sid root holding golang-go and
# golang-opentelemetry-collector-dev, made by pythons-root.sh):
#
#   collector-build.sh ROOT BIN MAIN.GO
#
# The root's Go toolchain runs on the host (it is static), GOPATH-style
# (GO111MODULE=off) over the root's /usr/share/gocode, and links a static
# binary that runs on the host too.  BIN is written whole or not at all;
# BIN.stamp records the source's hash and the root's package list, and a BIN
# built from the same is kept.  Runs under a lock, like the root's build.
set -eu

root=$1
bin=$2
src=$3
want="$(sha256sum <"$src" | cut -d' ' -f1) $(cat "$root/.pyprofd-pythons" 2>/dev/null || true)"

ready() {
	[ -x "$bin" ] && [ "$(cat "$bin.stamp" 2>/dev/null)" = "$want" ]
}

if ready; then
	echo "collector: $bin is ready"
	exit 0
fi
[ -d "$root/usr/share/gocode/src/go.opentelemetry.io/collector" ] || {
	echo "collector: $root holds no collector sources (make collector builds the root)" >&2
	exit 1
}
mkdir -p "$(dirname "$bin")"
exec 9>"$bin.lock"
flock 9
if ready; then
	echo "collector: $bin is ready"
	exit 0
fi
goroot=$(readlink -f "$root/usr/lib/go")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src/pyprofd-test-collector"
cp "$src" "$work/src/pyprofd-test-collector/main.go"
echo "collector: building $bin from $root (a few minutes)"
cd "$work/src/pyprofd-test-collector"
env -i PATH=/usr/bin:/bin HOME="$work" GOROOT="$goroot" GOTOOLCHAIN=local GOCACHE="$work/cache" \
	GO111MODULE=off CGO_ENABLED=0 GOPATH="$work:$root/usr/share/gocode" \
	"$goroot/bin/go" build -trimpath -o "$bin.new" .
printf '%s\n' "$want" >"$bin.stamp.new"
mv -f "$bin.new" "$bin"
mv -f "$bin.stamp.new" "$bin.stamp"
echo "collector: $bin is ready"
