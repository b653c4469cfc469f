#!/usr/bin/env python3
"""Measure the history as the daemon writes it.

1. Bytes per target-hour: the *basic* workload sampled at 100 Hz for a minute
   (10 s buckets, 10 s flushes); the database's growth over the last 40 s,
   scaled to an hour, and the rows an hour would keep once retention has
   merged it into 1 h buckets (one row per thread and stack seen).
2. Queries through the daemon over the synthetic day store_bench leaves
   (--synthetic DIR): 24 h of 10 targets as stacks, as a function table, as a
   diff of its two halves, and the processes it has; wall time of
   pyprofd-ctl, median of 3.  Then the function table while the daemon's
   default retention merges that day (it must not wait for the merge), and
   everything again after it.
3. Sampling punctuality while the history works hard: 10 targets x 4 threads
   at 100 Hz, first with 10 s flushes and no queries, then with 1 s flushes
   and a query of everything running back to back; timer lateness (jitter)
   p50/p99 and achieved rate in each phase.

Prints figures; never passes or fails on them.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pythons import interpreters  # noqa: E402


class Daemon:
    def __init__(self, pyprofd, ctl, state=None, config=None):
        self.state = state or tempfile.mkdtemp(prefix="pyprofd-history-bench.")
        self.sock = os.path.join(self.state, "pyprofd.sock")
        self.ctl_bin = ctl
        argv = [pyprofd, "--state-dir", self.state, "--log-level", "warn"]
        if config:
            path = os.path.join(self.state, "pyprofd.conf")
            with open(path, "w") as f:
                f.write(config)
            argv += ["--config", path]
        self.proc = subprocess.Popen(argv)
        for _ in range(200):
            if os.path.exists(self.sock):
                break
            time.sleep(0.05)

    def ctl(self, *argv, json_out=True):
        args = [self.ctl_bin, "--socket", self.sock] + (["--json"] if json_out else []) + list(argv)
        out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
        return json.loads(out) if json_out else out

    def configure(self, text):
        with open(os.path.join(self.state, "pyprofd.conf"), "w") as f:
            f.write(text)
        self.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        shutil.rmtree(self.state, ignore_errors=True)


def bytes_per_target_hour(args, python):
    d = Daemon(args.pyprofd, args.ctl)
    target = subprocess.Popen([python, "-I", os.path.join(HERE, "workloads", "basic.py")],
                              stdout=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        d.ctl("attach", str(target.pid), "--rate", "100")
        time.sleep(20)
        b0 = d.ctl("status")["history"]
        time.sleep(40)
        b1 = d.ctl("status")["history"]
        stacks = d.ctl("query", "--pid", str(target.pid), "--format", "json", json_out=False)
    finally:
        target.kill()
        d.stop()
    rows_hour = (b1["rows_written"] - b0["rows_written"]) / 40 * 3600
    distinct = len(json.loads(stacks)["stacks"])
    # The file grows by whole pages and its WAL is checkpointed now and then: over
    # a minute its size says little, so rows are counted and priced at the bytes
    # per row the store bench measures (about 42).
    print("history of the basic workload at 100 Hz (10 s buckets, 1 thread):")
    print("  10 s buckets             %8.0f rows per target-hour, ~%.0f KiB at 42 B/row"
          % (rows_hour, rows_hour * 42 / 1024))
    print("  after retention (1 h)    %8d rows per target-hour, ~%.1f KiB (one per thread and stack)"
          % (distinct, distinct * 42 / 1024))
    print("  database file now        %8.0f KiB" % (b1["bytes"] / 1024))


def jitter_phases(args, python):
    d = Daemon(args.pyprofd, args.ctl)
    workload = os.path.join(HERE, "workloads", "service4.py")
    targets = [subprocess.Popen([python, "-I", workload]) for _ in range(10)]
    results = {}
    stop = threading.Event()

    def query_loop():
        while not stop.is_set():
            try:
                d.ctl("query", "--format", "collapsed", json_out=False)
            except subprocess.CalledProcessError:
                if not stop.is_set():
                    raise

    try:
        time.sleep(1.5)
        for phase in ("quiet", "heavy"):
            if phase == "heavy":
                d.configure("[storage]\nflush_interval_s = 1\n")
                threading.Thread(target=query_loop, daemon=True).start()
            for t in targets:  # attaching again starts the timing afresh
                d.ctl("attach", str(t.pid), "--rate", "100")
            time.sleep(args.seconds)
            stats = [d.ctl("stats", str(t.pid)) for t in targets]
            results[phase] = stats
        stop.set()
        time.sleep(1)  # the last query in flight ends before the daemon does
        queries = d.ctl("status")["history"]
    finally:
        for t in targets:
            t.kill()
        d.stop()
    print("sampling while the history works (10 targets x 4 threads, 100 Hz, %.0f s each):" % args.seconds)
    for phase, label in (("quiet", "10 s flushes, no query"), ("heavy", "1 s flushes + queries back to back")):
        st = results[phase]
        print("  %-36s jitter %6.1f us p50, %7.1f us p99 (worst); %.1f Hz achieved (min %.1f)"
              % (label, statistics.median(s["jitter_us_p50"] for s in st),
                 max(s["jitter_us_p99"] for s in st),
                 statistics.mean(s["achieved_rate_hz"] for s in st),
                 min(s["achieved_rate_hz"] for s in st)))
    print("  history rows written: %d" % queries["rows_written"])


def synthetic_cases(d):
    procs = d.ctl("query", "--format", "processes")
    first = min(p["first"] for p in procs)
    last = max(p["last"] for p in procs)
    mid = int((first + last) / 2)
    rng = ["--from", str(int(first)), "--until", str(int(last))]
    return len(procs), [
        ("stacks (collapsed)", ["query", "--format", "collapsed"] + rng),
        ("function table", ["query", "--format", "table"] + rng),
        ("function table, top 20", ["query", "--format", "table", "--limit", "20"] + rng),
        ("diff of the two halves", ["diff", "--base", "%d..%d" % (first, mid),
                                    "--compare", "%d..%d" % (mid, last)]),
        ("processes", ["query", "--format", "processes"] + rng),
    ]


def time_cases(d, cases, runs=3):
    for name, argv in cases:
        times = []
        for _ in range(runs):
            t0 = time.monotonic()
            out = d.ctl(*argv, json_out=False)
            times.append(time.monotonic() - t0)
        print("  %-28s %8.0f ms (%d bytes out)" % (name, statistics.median(times) * 1e3, len(out)))


def synthetic_queries(args):
    """The raw day, then the same day while the daemon's own retention merges it, then after."""
    raw = args.synthetic + "/raw"
    os.mkdir(raw)
    shutil.copy(os.path.join(args.synthetic, "pyprofd.db"), raw)
    d = Daemon(args.pyprofd, args.ctl, state=raw, config="[storage]\nretention = none\n")
    try:
        n, cases = synthetic_cases(d)
        print("queries through the daemon, synthetic day (%d targets, 24 h, 10 s buckets):" % n)
        time_cases(d, cases)
    finally:
        d.proc.terminate()
        d.proc.wait(timeout=30)
    shutil.rmtree(raw)
    # Default retention, started by the first flush: a day of 10 s buckets older than an hour.
    d = Daemon(args.pyprofd, args.ctl, state=args.synthetic,
               config="[storage]\nflush_interval_s = 1\n")
    try:
        time.sleep(1.5)
        print("the same while the daemon merges it into 1 min buckets (default retention):")
        time_cases(d, cases[1:2], runs=5)
        time.sleep(25)
        print("after the merge (25 s later):")
        time_cases(d, cases)
    finally:
        d.proc.terminate()
        d.proc.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pyprofd", default="build/pyprofd")
    ap.add_argument("--ctl", default="build/pyprofd-ctl")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--synthetic", help="a state directory holding store_bench's synthetic day")
    args = ap.parse_args()
    if args.synthetic:
        synthetic_queries(args)
    pys = interpreters()
    if not pys:
        sys.exit("no CPython found")
    python = max(pys, key=lambda p: (p[2], "debian" not in p[0]))[1]
    bytes_per_target_hour(args, python)
    jitter_phases(args, python)


if __name__ == "__main__":
    main()
