#!/usr/bin/env python3
"""What C frames cost a sample (--native), and the target (run as root: the kernel's copy).

`pyprofd record` samples each workload at the daemon's rate without and with
--native, interleaved, --rounds times, and prints the medians: µs per
sample, pages per sample, the threads copied and unwound per sample, those
that kept their C frames uncopied (they ran nothing since their last copy),
those that ran between the kernel's look and its copy, those shot as they
ran and those left with marks for want of a shot matching the walk
(unshot); the target's own CPU seconds per second meanwhile (its work is
fixed: what the copies cost it shows as a rise), and for crun2 the calls
its threads made per second (they never wait: the shots' cost shows as
fewer).  Workloads: parked4.py (four threads asleep for good: the C frames
are copied once), service4.py (four threads that work and sleep 20 ms in
turn: copied at most samples), cwait4.py (threads in a lock, a socket's
recv, a select and a sleep, woken every 50 ms) and crun2.py (zlib and a
regular expression, running).  --busy N runs N processes that spin beside
it: a busy host.  Prints figures; never passes or fails on them.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pythons  # noqa: E402
from context import record  # noqa: E402

WORKLOADS = ("parked4.py", "service4.py", "cwait4.py", "crun2.py")


def cpu_seconds(pid):
    """The process's user and system time so far (all its threads)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def work_done(progress):
    """crun2's calls so far (both threads) and when it counted them; None for the other workloads."""
    try:
        with open(progress) as f:
            p = json.load(f)
        return sum(p["done"].values()), p["at"]
    except (OSError, ValueError):
        return None


def measure(args, pid, extra, progress):
    before, t0, work0 = cpu_seconds(pid), time.monotonic(), work_done(progress)
    st = record(args.pyprofd, pid, args.seconds, args.rate, extra)
    spent = (cpu_seconds(pid) - before) / (time.monotonic() - t0)
    time.sleep(0.6)  # its next count falls after the run
    work1 = work_done(progress)
    rate = (work1[0] - work0[0]) / (work1[1] - work0[1]) if work0 and work1 and work1[1] > work0[1] else None
    return st, spent, rate


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pyprofd", default=os.path.join(HERE, "..", "build", "pyprofd"))
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rate", type=int, default=100, help="the daemon's default, 100 Hz")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--busy", type=int, default=0, help="spinning processes beside it: a busy host")
    ap.add_argument("--pythons", default="3.12,3.15", help="minor versions, comma-separated")
    ap.add_argument("--workloads", default=",".join(w.replace(".py", "") for w in WORKLOADS),
                    help="comma-separated, of: " + ", ".join(w.replace(".py", "") for w in WORKLOADS))
    args = ap.parse_args()
    wanted = set(args.pythons.split(","))
    pys = [p for p in pythons.find() if p.version_tag() in wanted]
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    print("host: %s, %d Hz, %d rounds of %.0f s" % ("busy (%d spinning)" % args.busy if args.busy else "quiet",
                                                 args.rate, args.rounds, args.seconds))
    print("%-22s %-12s %-7s %9s %9s %9s %9s %9s %9s %9s %11s %9s" % (
        "interpreter", "workload", "native", "us/sample", "pages", "copied", "kept", "ran", "shot", "unshot",
        "target cpu", "calls/s"))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            os.chmod(tmp, 0o755)
            for py in pys:
                for workload in [w + ".py" for w in args.workloads.split(",")]:
                    progress = os.path.join(tmp, "progress-%d" % time.monotonic_ns())
                    proc = py.popen(["-I", os.path.join(HERE, "workloads", workload), progress], binds=(tmp,),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(1.5)
                    if proc.poll() is not None:
                        print("%-22s %-12s could not start" % (py.label, workload))
                        continue
                    runs = {"off": [], "on": []}
                    for _ in range(args.rounds):
                        for key, extra in (("off", []), ("on", ["--native"])):
                            st, spent, rate = measure(args, proc.pid, extra, progress)
                            if st and st.get("ok_samples"):
                                runs[key].append((st, spent, rate))
                    proc.kill()
                    proc.wait()
                    for key in ("off", "on"):
                        if not runs[key]:
                            continue

                        def med(f):
                            return statistics.median(f(st, spent) for st, spent, _ in runs[key])

                        per = lambda name: med(lambda st, _: st.get(name, 0) / st["ok_samples"])  # noqa: E731
                        rates = [rate for _, _, rate in runs[key] if rate is not None]
                        print("%-22s %-12s %-7s %9.1f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %10.3fs %9s" % (
                            py.label, workload.replace(".py", ""), key, med(lambda st, _: st["us_per_sample_median"]),
                            med(lambda st, _: st["pages_per_sample"]), per("native_copied"), per("native_kept"),
                            per("native_ran"), per("native_shot"),
                            med(lambda st, _: (st.get("native_shot_late", 0) + st.get("native_shot_missed", 0))
                                / st["ok_samples"]),
                            med(lambda _, spent: spent),
                            "%.1f" % statistics.median(rates) if rates else "-"))
                    sys.stdout.flush()
    finally:
        for h in hogs:
            h.kill()


if __name__ == "__main__":
    main()
