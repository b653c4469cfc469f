#!/usr/bin/env python3
"""Accuracy: each phase's share of the samples against the truth, as hosts run.

tests/targets/shares.py knows where its time goes: it runs three phases in
turn, about a millisecond each, and measures the CPU time of each itself
(phase_calls does its work through thousands of short calls per millisecond,
the code whose stack moves while it is read).  For every interpreter found
(3.8-3.15, debug and free-threaded builds and CPython's next version
included, when present) and every rate (19, 100 and 1,000 Hz, and max: back
to back), on a quiet host and with a CPU hog on every core, the target is
sampled by `pyprofd record` and then, where the interpreter has one, by
CPython's own sampler (`python -m profiling.sampling attach`, 3.15), one
after the other on the same target.

Columns, in points of the samples: each phase's share minus its share of the
target's wall time (what a sampler of wall time, the default mode, sees); `outside`, the samples in no phase minus the time spent in
none (the loop between phases); `worst`, the largest of the four; `lost`, the
samples a sampler took and could not use (pyprofd: lone <moving> frames and
failed samples; CPython's: its error rate); `noise`, one standard deviation
of a 40 % share over the samples counted (no more than the phases the
window held: samples within one phase are one draw), which a figure
within twice of is not told apart from the truth.

Prints figures; never passes or fails on them.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pythons  # noqa: E402

PHASES = ("phase_plain", "phase_calls", "phase_deep")
TARGET = os.path.realpath(os.path.join(HERE, "..", "tests", "targets", "shares.py"))
# Seconds a window lasts at each rate: about 2,000 samples at 19 and 100 Hz.
WINDOWS = {"19": 90.0, "100": 20.0, "1000": 8.0, "max": 4.0}
# A phase of tests/targets/shares.py lasts about this long.
PHASE_SECONDS = 0.0007
# CPython's sampler has no "back to back": its highest rate stands in.
REFERENCE_MAX_RATE = "100khz"


def truth(report, pid):
    """The target's own account, asked for now: CPU seconds per phase and in all."""
    before = os.stat(report).st_mtime_ns if os.path.exists(report) else 0
    os.kill(pid, signal.SIGUSR1)
    for _ in range(500):
        if os.path.exists(report) and os.stat(report).st_mtime_ns != before:
            break
        time.sleep(0.01)
    with open(report) as f:
        return json.load(f)


def stacks(path, cpython):
    """(function names outermost first, count) of a collapsed profile."""
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            frames = stack.split(";")
            if cpython:
                # tid:N;file:function:line;...
                names = [f.split(":")[1] if f.count(":") >= 2 else f for f in frames if not f.startswith("tid:")]
            else:
                names = [f.split(" (")[0] for f in frames]
            yield names, int(n)


def shares(path, cpython):
    """Each phase's share (the outermost phase function of a stack) and the lone placeholders'."""
    counts = dict.fromkeys(PHASES + ("outside",), 0)
    placeholders = total = 0
    for names, n in stacks(path, cpython):
        total += n
        counts[next((p for p in names if p in PHASES), "outside")] += n
        placeholders += n if names == ["<moving>"] else 0
    total = max(total, 1)
    return {k: 100.0 * v / total for k, v in counts.items()}, 100.0 * placeholders / total, total


def errors(seen, a, b):
    """Each share seen minus the truth between accounts a and b, outside every phase included.

    The truth in wall time: a sampler of wall time (the default mode) sees a
    phase as long as the target stays in it, waiting for a CPU included.
    Against CPU time a busy host adds noise of a few points over a few
    seconds: each wait of a few milliseconds falls to whichever phase the
    target was left in."""
    spent = b["total_wall"] - a["total_wall"]
    if spent <= 0:
        return None
    true = {p: 100.0 * (b["spent_wall"][p] - a["spent_wall"][p]) / spent for p in PHASES}
    true["outside"] = 100.0 - sum(true.values())
    return {k: seen[k] - true[k] for k in PHASES + ("outside",)}


def run_pyprofd(args, pid, rate, seconds, out):
    cmd = [args.pyprofd, "record", str(pid), "--rate", rate, "--duration", "%.1f" % seconds,
           "--stats-json", "-o", out]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError("record failed (%d): %s" % (proc.returncode, proc.stderr.strip()))
    s = json.loads(lines[-1])
    return 100.0 * s.get("failed_samples", 0) / max(1, s.get("total_samples", 0))


def run_cpython(python, pid, rate, seconds, out, tmp):
    r = REFERENCE_MAX_RATE if rate == "max" else rate
    proc = python.run(["-m", "profiling.sampling", "attach", "-a", "-r", r, "-d", "%d" % max(1, round(seconds)),
                       "--collapsed", "-o", out, str(pid)], binds=(tmp,), capture_output=True, text=True)
    if proc.returncode != 0 or not os.path.exists(out):
        raise RuntimeError("CPython's sampler failed (%d): %s" % (proc.returncode, proc.stderr.strip()[-300:]))
    lost = [line.split(":")[1] for line in proc.stdout.splitlines() if line.startswith("Error rate:")]
    return float(lost[0]) if lost else float("nan")


def has_sampler(python):
    return python.run(["-c", "import profiling.sampling"], capture_output=True).returncode == 0


class Hogs:
    """A busy loop on every core, as a host others use runs."""

    def __init__(self, n):
        self.procs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(n)]

    def stop(self):
        for p in self.procs:
            p.kill()
            p.wait()


ROW = "{:<20} {:<5} {:>5} {:<8} {:>7} {:>7} {:>7} {:>8} {:>6} {:>6} {:>6} {:>7}"


def measure(args, python, sampler, host):
    if python.minor > 15:
        # pyprofd refuses a CPython it does not know by its version (see the tests); nothing to measure.
        print("  %s: not read by pyprofd (it refuses a CPython newer than 3.15 by its version)"
              % python.label, flush=True)
        return
    tmp = tempfile.mkdtemp(prefix="pyprofd-accuracy-")
    report, out = os.path.join(tmp, "report.json"), os.path.join(tmp, "profile.txt")
    proc = python.popen([TARGET, report], binds=(os.path.dirname(TARGET), tmp),
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        for rate in args.rates.split(","):
            seconds = WINDOWS.get(rate, 20.0) * args.scale
            for who in ("pyprofd", "cpython") if sampler else ("pyprofd",):
                a = truth(report, proc.pid)
                try:
                    if who == "pyprofd":
                        lost = run_pyprofd(args, proc.pid, rate, seconds, out)
                    else:
                        lost = run_cpython(python, proc.pid, rate, seconds, out, tmp)
                except RuntimeError as e:
                    print("  %s %s %s: %s" % (python.label, rate, who, e), flush=True)
                    continue
                b = truth(report, proc.pid)
                seen, placeholders, n = shares(out, who == "cpython")
                err = errors(seen, a, b)
                if err is None:
                    continue
                # Samples a phase apart are about independent; closer ones are not.
                phases = (b["total_wall"] - a["total_wall"]) / PHASE_SECONDS
                noise = 100.0 * (0.4 * 0.6 / max(1.0, min(n, phases))) ** 0.5
                print(ROW.format(python.label[:20], host, rate, who,
                                 *("%+.2f" % err[k] for k in PHASES + ("outside",)),
                                 "%.2f" % max(abs(e) for e in err.values()),
                                 "%.2f" % (placeholders + lost), "%.2f" % noise, n), flush=True)
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pyprofd", default=os.path.join(HERE, "..", "build", "pyprofd"))
    ap.add_argument("--rates", default="19,100,1000,max")
    ap.add_argument("--hosts", default="quiet,busy", help="quiet, busy (a CPU hog on every core), or both")
    ap.add_argument("--pythons", default="all",
                    help="all, or versions to run (3.15,3.12; a d or t suffix: debug, free-threaded)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every window's length")
    args = ap.parse_args()

    found = pythons.find()
    if args.pythons != "all":
        wanted = args.pythons.split(",")
        found = [p for p in found if p.version_tag() in wanted]
    if not found:
        sys.exit("accuracy: no CPython found")
    print("Call-heavy code against its own account (tests/targets/shares.py), in points; "
          "windows %s s:" % ", ".join("%s Hz %.0f" % (r, WINDOWS.get(r, 20.0) * args.scale)
                                        for r in args.rates.split(",")))
    print(ROW.format("python", "host", "rate", "sampler", "plain", "calls", "deep", "outside", "worst",
                     "lost", "noise", "samples"))
    for host in args.hosts.split(","):
        hogs = Hogs(os.cpu_count() or 1) if host == "busy" else None
        try:
            for python in found:
                measure(args, python, has_sampler(python), host)
        finally:
            if hogs:
                hogs.stop()
    print()


if __name__ == "__main__":
    main()
