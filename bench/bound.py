#!/usr/bin/env python3
"""The per-sample time bound against each reader's worst (run as root).

For every interpreter (the host's, and those of the root named by --root, run
chrooted), the daemon samples at 100 Hz, under the default bound
(max_sample_time, 5 ms), the worst a program can make of each reader:

  chain       --chain asyncio tasks (10,000), each awaiting the next,
              --async-mode all (tests/targets/task_chain.py; 3.11 on)
  exceptions  --threads threads (100) each handling an exception below 300
              nested generators, exception mode (bench/workloads/bound.py)
  threads     --threads threads each 100 frames deep, all spinning

beside a quiet neighbour (bench/workloads/soak.py at 100 Hz) whose timer
lateness says whether the loop was held up.  Prints each reader's sample time
(median and 99th percentile), the rate achieved, the share of walks cut at the
bound (walks or task reads), and the neighbour's lateness against its lateness alone.  Prints
figures; never passes or fails on them.
"""
import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pythons import interpreters  # noqa: E402

# bench/async.py's name is a keyword: imported by name.
place = importlib.import_module("async").place
root_interpreters = importlib.import_module("async").root_interpreters

CHAIN = os.path.join(HERE, "..", "tests", "targets", "task_chain.py")
WORST = os.path.join(HERE, "workloads", "bound.py")
QUIET = os.path.join(HERE, "workloads", "soak.py")


class Daemon:
    def __init__(self, args):
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="pyprofd-bench-bound-")
        self.sock = os.path.join(self.dir, "pyprofd.sock")
        self.proc = subprocess.Popen([args.pyprofd, "--state-dir", self.dir, "--log-level", "warn"])
        deadline = time.time() + 30
        while not os.path.exists(self.sock) and time.time() < deadline:
            time.sleep(0.05)

    def ctl(self, *argv):
        r = subprocess.run([self.args.ctl, "--socket", self.sock, "--json"] + list(argv),
                           capture_output=True, text=True)
        return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else None

    def attach(self, pid, *extra):
        # A new interpreter needs a moment before its runtime can be read.
        for _ in range(100):
            if self.ctl("attach", str(pid), "--rate", "100", *extra) is not None:
                return True
            time.sleep(0.1)
        return False

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def neighbour(args):
    python = min((p for p in interpreters() if p[2] <= 15), key=lambda p: -p[2])[1]
    return subprocess.Popen([python, "-I", QUIET, "--same-code"])


def lateness_alone(args):
    """The neighbour's timer lateness with nothing else sampled: what the rows compare with."""
    d, quiet = Daemon(args), neighbour(args)
    try:
        if not d.attach(quiet.pid):
            return None
        time.sleep(args.seconds)
        st = d.ctl("stats", str(quiet.pid))
        return st["jitter_us_p99"] if st else None
    finally:
        quiet.kill()
        quiet.wait()
        d.stop()


def row(args, label, cmd, root, reader):
    tmp = tempfile.mkdtemp(prefix="pyprofd-bench-bound-t-")
    script, size = (CHAIN, args.chain) if reader == "chain" else (WORST, args.threads)
    script_in, report_in, report, inside = place(script, root, tmp)
    argv = [script_in, report_in, str(size)] if reader == "chain" else [script_in, report_in, reader, str(size)]
    proc = subprocess.Popen(cmd + ["-I"] + argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    d, quiet = Daemon(args), neighbour(args)
    try:
        deadline = time.time() + 300
        while not os.path.exists(report) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)
        if not os.path.exists(report):
            print("%-22s %-10s (the target did not start)" % (label, reader), flush=True)
            return
        pid = json.load(open(report))["pid"] if not root else proc.pid
        how = {"chain": ["--async-mode", "all"], "exceptions": ["--mode", "exception"], "threads": []}[reader]
        if not (d.attach(quiet.pid) and d.attach(pid, *how)):
            print("%-22s %-10s (attach failed)" % (label, reader), flush=True)
            return
        time.sleep(args.seconds)
        st, near = d.ctl("stats", str(pid)), d.ctl("stats", str(quiet.pid))
        if not st or not near:
            print("%-22s %-10s (stats failed)" % (label, reader), flush=True)
            return
        walks = max(1, st["total_samples"] - st.get("process_still", 0))
        print("%-22s %-10s %7d %10.0f %10.0f %9.1f %8.1f %% %12.2f" % (
            label, reader, size, st["sample_us_p50"], st["sample_us_p99"], st["achieved_rate_hz"],
            100.0 * (st.get("walks_cut", 0) + st.get("tasks_cut", 0)) / walks, near["jitter_us_p99"] / 1000),
            flush=True)
    finally:
        proc.kill()
        proc.wait()
        quiet.kill()
        quiet.wait()
        d.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        if inside:
            shutil.rmtree(inside, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pyprofd", default=os.path.join(HERE, "..", "build", "pyprofd"))
    ap.add_argument("--ctl", default=os.path.join(HERE, "..", "build", "pyprofd-ctl"))
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--chain", type=int, default=10000)
    ap.add_argument("--threads", type=int, default=100)
    ap.add_argument("--readers", default="chain,exceptions,threads")
    ap.add_argument("--root", default=os.environ.get("PYPROFD_PYTHONS_ROOT", ""))
    ap.add_argument("--only", default="", help="interpreters whose label starts with one of these, comma-separated")
    args = ap.parse_args()
    pys = [(label, [path], minor) for label, path, minor in interpreters() if minor <= 15]
    if args.root and os.path.isdir(args.root):
        pys += root_interpreters(args.root)
    if args.only:
        pys = [p for p in pys if any(p[0].startswith(o) for o in args.only.split(","))]
    alone = lateness_alone(args)
    print("the neighbour's timer lateness alone, p99: %s ms" % ("%.2f" % (alone / 1000) if alone else "-"))
    print("%-22s %-10s %7s %10s %10s %9s %10s %12s" % (
        "python", "reader", "size", "p50 us", "p99 us", "Hz", "cut", "nbr late ms"))
    for label, cmd, minor in pys:
        root = args.root if cmd[0] == "chroot" else None
        for reader in args.readers.split(","):
            if reader == "chain" and minor < 11:
                continue
            row(args, label, cmd, root, reader)


if __name__ == "__main__":
    main()
