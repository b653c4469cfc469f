#!/bin/sh
# private.sh PYTHON HARNESS ARGS...: run a fuzz harness where the processes
# it can see are its own.  Fuzzed attaches name any pid and fuzzed rules judge
# every process that starts: on the machine at large that is whatever runs
# there (a test suite's targets, other users' programs), read and judged at
# every input, which made the RPC harness slow and its coverage a matter of
# chance.  As root it runs in a pid namespace of its own, with /proc mounted
# for it, beside one Python process that sleeps (so attaches and rules meet a
# real runtime, at a small pid libFuzzer soon finds); otherwise, as before.
python=$1
shift
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then
	exec "$@"
fi
exec unshare --pid --fork --mount-proc sh -c '
	"$0" -c "import time
while True: time.sleep(3600)" &
	exec "$@"' "$python" "$@"
