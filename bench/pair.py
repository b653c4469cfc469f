#!/usr/bin/env python3
"""Two builds of the daemon side by side, at the same moments: which costs less, and by how much.

A host others use moves the daemon's CPU by a third from one minute to the
next (bench/daemon.py): two runs one after the other cannot tell a change
of a few percent from the host's drift.  Here both daemons run at once on
one set of targets (bench/workloads/service4.py, or --workload, on CPython
3.15 from the root of `make pythons` when there), each sampling half of
them at --rate, so the host's moods fall on both alike; each measures its
CPU over the same windows.  Then the halves are swapped (the halves and the
order the daemons started in differ a little too), and the effect of B
against A is the mean of the two orders' differences, the bias of the
halves taken out.  Each daemon runs as installed, alone on its targets
(two on one process would each find the other's 3.15 markers written).

    python3 bench/pair.py --a BUILD_A --b BUILD_B [--windows 6 --seconds 8]

BUILD is a directory holding pyprofd and pyprofd-ctl (a build directory,
or a copy of one).  A and B may be the same build: the difference is then
this host's noise.  Prints figures; never passes or fails on them.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import daemon as bench_daemon  # noqa: E402
import pythons  # noqa: E402


def cpu_ns(pid):
    """The process's CPU time to the nanosecond: each live thread's, as the scheduler counts it."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended between the listing and the read
    return total


class Daemon:
    def __init__(self, build):
        self.ctl = os.path.join(build, "pyprofd-ctl")
        self.state = tempfile.mkdtemp(prefix="pyprofd-pair.")
        self.sock = os.path.join(self.state, "pyprofd.sock")
        self.proc = subprocess.Popen([os.path.join(build, "pyprofd"), "--state-dir", self.state,
                                      "--log-level", "warn"])
        for _ in range(200):
            if os.path.exists(self.sock):
                return
            time.sleep(0.05)
        raise RuntimeError("%s: no socket after 10 s" % build)

    def attach(self, targets, rate):
        for t in targets:
            subprocess.run([self.ctl, "--socket", self.sock, "attach", str(t.pid), "--rate", str(rate)],
                           check=True, capture_output=True)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        shutil.rmtree(self.state, ignore_errors=True)


def one_order(args, python, first, second):
    """CPU % of one core of each build over the same windows: first samples the first half of the targets."""
    targets = bench_daemon.start_targets(python, args.targets, name=args.workload)
    daemons = []
    try:
        for build in (first, second):
            daemons.append(Daemon(build))
        half = len(targets) // 2
        daemons[0].attach(targets[:half], args.rate)
        daemons[1].attach(targets[half:], args.rate)
        time.sleep(2.0)  # the first samples decode everything: measure steady state
        windows = []
        for _ in range(args.windows):
            c0, w0 = [cpu_ns(d.proc.pid) for d in daemons], time.monotonic()
            time.sleep(args.seconds)
            c1, w1 = [cpu_ns(d.proc.pid) for d in daemons], time.monotonic()
            windows.append([100 * (b - a) / 1e9 / (w1 - w0) for a, b in zip(c0, c1)])
        return windows
    finally:
        for d in daemons:
            d.stop()
        bench_daemon.stop(targets)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, help="the build measured against (a directory with pyprofd)")
    ap.add_argument("--b", required=True, help="the build measured")
    ap.add_argument("--targets", type=int, default=10, help="targets in all, half for each daemon (10)")
    ap.add_argument("--rate", type=int, default=100)
    ap.add_argument("--windows", type=int, default=6, help="windows measured in each order (6)")
    ap.add_argument("--seconds", type=float, default=8, help="each window's length (8)")
    ap.add_argument("--workload", default="service4.py", help="the targets' script, of bench/workloads/")
    args = ap.parse_args()
    if args.targets < 2 or args.windows < 2:
        ap.error("--targets and --windows: 2 at least")
    pys = pythons.find()
    python = pythons.newest(pys, 15) or pythons.newest(pys)
    if not python:
        sys.exit("pair.py: no CPython found")
    print("A %s, B %s: %d targets of %s at %d Hz, half each, on Python %d.%d (%s)"
          % (args.a, args.b, args.targets, args.workload, args.rate, python.major, python.minor,
             python.path + (" in " + python.root if python.root else "")))
    diffs, by_order = [], []
    for order, (first, second) in enumerate(((args.a, args.b), (args.b, args.a))):
        windows = one_order(args, python, first, second)
        # B - A in each window, whichever half B had.
        d = [(w[1] - w[0]) if order == 0 else (w[0] - w[1]) for w in windows]
        a = [w[0] if order == 0 else w[1] for w in windows]
        diffs += d
        by_order.append((statistics.mean(a), statistics.mean(d)))
        print("order %d (%s on the first half):" % (order + 1, "A" if order == 0 else "B"))
        for w, x in zip(windows, d):
            a_pct, b_pct = (w[0], w[1]) if order == 0 else (w[1], w[0])
            print("  A %6.3f %%  B %6.3f %%  B-A %+6.3f" % (a_pct, b_pct, x))
    effect = statistics.mean(m for _, m in by_order)
    base = statistics.mean(a for a, _ in by_order)
    sd = statistics.stdev(diffs)
    print("B - A: %+.3f %% of one core (%+.1f %% of A's %.3f %%); a window's difference varies by %.3f (sd), "
          "the two orders' by %+.3f and %+.3f"
          % (effect, 100 * effect / base if base else 0, base, sd, by_order[0][1], by_order[1][1]))


if __name__ == "__main__":
    main()
