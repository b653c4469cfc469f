#!/usr/bin/env python3
"""What each way of proving a stack buys: each prover off in turn.

The provers (daemon/unwind/prove.h): look (the kernel says a thread ran
nothing since its stack was read), marker (3.15's frame-cache marker),
same_bytes (the walk's reads hold the bytes they held), kernel_reader
(3.11-3.14 as root: the kernel's copy of a thread whose reads tear) and
process (the kernel says no thread of the process ran since the sample
kept).  For each seed workload (bench/workloads: basic, deep_static,
threads) on 3.15 and 3.13, `pyprofd record --rate max` with all of them
on and then each off (`--provers-off NAME`): µs of CPU per sample and
pages read per sample (and a deep stack, 1,000 frames, and 50 threads).
Then call-heavy code at 1 kHz against its own account (bench/accuracy.py)
on 3.15 and 3.12, each off in turn: the largest error.  Then the daemon bench (bench/daemon.py, 10 targets
at 100 Hz) with each setting (`[sampling] provers_off`), in paired
rounds (every setting once a round, so a host's drift falls on all of
them alike): the daemon's CPU, the median of the rounds.  A prover that serves no interpreter of
a row changes nothing there (its cells read as the row's "all on").

Prints figures; never passes or fails on them.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import daemon  # noqa: E402
import pythons  # noqa: E402
import run  # noqa: E402

PROVERS = ["look", "marker", "same_bytes", "kernel_reader", "process"]
THREAD_PROVERS = PROVERS[:-1]
# None is all on; then each off alone; then each thread prover off beside the process proof.
SETTINGS = [None] + PROVERS + ["process," + p for p in THREAD_PROVERS]
# The seed workloads, and the shapes where a proof saves most: a deep stack, many threads.
WORKLOADS = [("basic", ()), ("deep_static", ()), ("threads", ()), ("deep_static", (999,)),
             ("many_threads", (50,))]


def setting_name(off):
    return "all on" if off is None else off.replace(",", "+") + " off"


def engine(args, python, name, wargs):
    """{setting: (µs per sample, pages per sample)}, the cheapest of args.repeat runs, the settings
    taken in turn within each repeat so that a host's drift falls on all of them alike."""
    proc = run.start_workload(python, name, wargs)
    best = {}
    try:
        for _ in range(args.repeat):
            for off in SETTINGS:
                extra = ("--provers-off", off) if off else ()
                s = run.record(args.pyprofd, proc.pid, args.seconds, extra=extra)
                n = max(1, s["total_samples"])
                cell = (s["cpu_us_per_sample"], s.get("pages_read", 0) / n)
                if off not in best or cell[0] < best[off][0]:
                    best[off] = cell
    finally:
        proc.kill()
        proc.wait()
    return best


def accuracy(args, pys):
    """What each prover does for the truth: call-heavy code at 1 kHz, each off in turn."""
    import accuracy as acc
    import subprocess
    import tempfile
    import time
    print("Each prover off in turn: call-heavy code at 1 kHz (bench/accuracy.py), the largest error "
          "of a phase's share against the truth, in points")
    table = {}
    for minor in (15, 12):
        python = pythons.newest(pys, minor)
        if not python:
            continue
        tmp = tempfile.mkdtemp(prefix="pyprofd-ablation-")
        report, out = os.path.join(tmp, "report.json"), os.path.join(tmp, "profile.txt")
        proc = python.popen([acc.TARGET, report], binds=(os.path.dirname(acc.TARGET), tmp),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cells = []
        try:
            time.sleep(1.5)
            for off in SETTINGS:
                a = acc.truth(report, proc.pid)
                cmd = [args.pyprofd, "record", str(proc.pid), "--rate", "1000", "--duration",
                       str(args.accuracy_seconds), "-o", out] + (["--provers-off", off] if off else [])
                subprocess.run(cmd, capture_output=True, check=True)
                b = acc.truth(report, proc.pid)
                seen, lost, _ = acc.shares(out, False)
                err = acc.errors(seen, a, b)
                cells.append("%.2f" % max(abs(e) for e in err.values()) if err else "-")
        finally:
            proc.kill()
            proc.wait()
        table[python.label[:20]] = cells
    head = "{:<26}" + "{:>22}" * len(table)
    print(head.format("", *table))
    for i, off in enumerate(SETTINGS):
        print(head.format(setting_name(off), *(cells[i] for cells in table.values())))
    print(flush=True)


def daemon_rounds(args, python):
    dargs = argparse.Namespace(pyprofd=args.pyprofd, ctl=args.ctl, targets=10, rate=100,
                               seconds=args.daemon_seconds, workload="service4.py", collector=None,
                               otlp=None, interval="15s", waker=None)
    print("The daemon, 10 targets x 4 threads at 100 Hz on %s, %.0f s a round, %d paired rounds: "
          "its CPU %% of one core, the median (and the range)"
          % (python.label, args.daemon_seconds, args.daemon_rounds))
    runs = {off: [] for off in SETTINGS}
    for _ in range(args.daemon_rounds):
        for off in SETTINGS:
            cpu, _ = daemon.bench_pyprofd(dargs, python, False, provers_off=off)
            runs[off].append(cpu)
    for off in SETTINGS:
        r = sorted(runs[off])
        print("  %-24s %6.2f %%   (%.2f - %.2f)" % (setting_name(off), r[len(r) // 2], r[0], r[-1]))
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pyprofd", default=os.path.join(HERE, "..", "build", "pyprofd"))
    ap.add_argument("--ctl", default=os.path.join(HERE, "..", "build", "pyprofd-ctl"))
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=3, help="runs per cell; the cheapest is kept")
    ap.add_argument("--daemon-seconds", type=float, default=12.0)
    ap.add_argument("--daemon-rounds", type=int, default=3)
    ap.add_argument("--accuracy-seconds", type=float, default=10.0)
    ap.add_argument("--no-daemon", action="store_true")
    ap.add_argument("--no-engine", action="store_true")
    args = ap.parse_args()

    pys = pythons.find()
    if not args.no_engine:
        print("Each setting: µs of CPU per sample / pages read per sample (record --rate max, the "
              "cheapest of %d runs of %.0f s)" % (args.repeat, args.seconds))
        for minor in (15, 13):
            python = pythons.newest(pys, minor)
            if not python:
                print("  (no CPython 3.%d found)" % minor)
                continue
            labels = [name + (" %s" % wargs[0] if wargs else "") for name, wargs in WORKLOADS]
            columns = [engine(args, python, name, wargs) for name, wargs in WORKLOADS]
            head = "{:<26}" + "{:>16}" * len(WORKLOADS)
            print(head.format(python.label[:26], *labels))
            for off in SETTINGS:
                print(head.format(setting_name(off), *("%.2f / %.1f" % c[off] for c in columns)))
            print(flush=True)
    accuracy(args, pys)
    if args.no_daemon:
        return
    daemon_rounds(args, pythons.newest(pys, 15) or pythons.newest(pys))


if __name__ == "__main__":
    main()
