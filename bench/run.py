#!/usr/bin/env python3
"""Measure pyprofd's sampling engine against CPython's own, same targets, same run.

For CPython 3.15, 3.14 and 3.13 (the Debian root of `make pythons` when there,
chrooted; else what the host has) and each workload (basic, deep_static,
threads), the workload is started once and sampled back to back, first by
`pyprofd record --rate max` and then by CPython's own reader timed in a loop
inside the same interpreter: 3.15's and 3.14's `_remote_debugging.RemoteUnwinder
(pid, all_threads=True)` (3.15 with its frame cache on, `cache_frames=True`),
3.13's `_testexternalinspection.get_stack_trace(pid)`.  Then on 3.15, deep
stacks of 10, 100, 1,000 and 3,000 frames and 1, 10, 50 and 200 threads; on
every interpreter, call-heavy code against its own account of where its time
goes, quiet and busy, at 19, 100, 1,000 Hz and back to back, beside CPython's
sampler (bench/accuracy.py, shorter windows); each prover off in turn
(bench/ablation.py); a sample's cost with C frames (--native) against
without, quiet and busy (bench/native.py, shorter); and the daemon's own
cost (bench/daemon.py, shorter).

Figures: µs of CPU per whole-process sample (the sampler's user + system time
over its samples), the median of a sample's wall time, `process_vm_readv`
calls and bytes per sample (CPython's counted in a second, shorter run under
strace), and the ratio of CPython's µs of CPU over pyprofd's ("w": of the wall-time
medians, when CPython's reader hung and was killed before it told its CPU).  After each
table, every counter pyprofd's engine reports (`record --stats-json`) per
sample, so new ones show up unasked.

Prints figures; never passes or fails on them.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pythons  # noqa: E402

WORKLOADS = ["basic", "deep_static", "threads"]
DEPTHS = [10, 100, 1000, 3000]
THREADS = [1, 10, 50, 200]

# CPython's own reader in a loop inside the interpreter that has it: each call's
# wall time and whether it succeeded, in batches as it goes (a torn read can make
# 3.13's loop forever), and the loop's CPU time at the end.
REFERENCE_LOOP = r"""
import sys, time
pid, seconds, engine = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
if engine == "testexternalinspection":
    from _testexternalinspection import get_stack_trace
    sample = lambda: get_stack_trace(pid)
else:
    import _remote_debugging
    if engine == "cached":
        unwinder = _remote_debugging.RemoteUnwinder(pid, all_threads=True, cache_frames=True)
    else:
        unwinder = _remote_debugging.RemoteUnwinder(pid, all_threads=True)
    sample = unwinder.get_stack_trace
batch, end = [], time.perf_counter() + seconds
cpu0 = time.process_time()
while time.perf_counter() < end:
    t0 = time.perf_counter_ns()
    try:
        sample()
        ok = 1
    except Exception:
        ok = 0
    batch.append("%d:%d" % (time.perf_counter_ns() - t0, ok))
    if len(batch) == 100:
        print(" ".join(batch), flush=True)
        batch = []
print(" ".join(batch), flush=True)
print("cpu %f" % (time.process_time() - cpu0), flush=True)
"""

ENGINES = {15: ("cached", "3.15, frame cache"),
           14: ("plain", "3.14"),
           13: ("testexternalinspection", "3.13 reference")}


def start_workload(python, name, args=()):
    proc = python.popen([os.path.join(HERE, "workloads", name + ".py")] + [str(a) for a in args],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Imported and in its steady shape (200 threads take a while to start on a busy host).
    time.sleep(1.5 if not args or int(args[0]) < 100 else 3.0)
    return proc


def record(pyprofd, pid, seconds, cache=True, rate="max", output=os.devnull, extra=()):
    """pyprofd record (back to back unless told): its stats, plus its CPU per sample (from its rusage)."""
    cmd = [pyprofd, "record", str(pid), "--rate", rate, "--duration", str(seconds),
           "--stats-json", "-o", output] + list(extra)
    if not cache:
        cmd.append("--no-cache")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = [line for line in err.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError("record failed (%d): %s" % (proc.returncode, err.strip()))
    s = json.loads(lines[-1])
    s["cpu_us_per_sample"] = 1e6 * (usage.ru_utime + usage.ru_stime) / max(1, s["total_samples"])
    return s


def reference(python, pid, seconds, engine):
    """CPython's reader; killed if it stops reporting (3.13's walk has no bound)."""
    proc = python.popen(["-c", REFERENCE_LOOP, str(pid), str(seconds), engine],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    hung = False
    try:
        out, err = proc.communicate(timeout=seconds + 20)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        hung = True
    calls = [tuple(int(x) for x in item.split(":")) for item in out.split() if ":" in item]
    # Killed, it never said its CPU (which the hung call spun away anyway): the wall time serves.
    cpu = [float(line.split()[1]) for line in out.splitlines() if line.startswith("cpu ")]
    if not calls:
        return {"samples": 0, "fails": 0, "median_us": float("nan"), "cpu_us": float("nan"),
                "hung": hung, "error": (err.strip().splitlines() or ["no output"])[-1]}
    times = sorted(ns for ns, _ in calls)
    return {"samples": len(calls), "fails": sum(1 for _, ok in calls if not ok),
            "median_us": times[len(times) // 2] / 1000,
            "cpu_us": 1e6 * cpu[0] / len(calls) if cpu else float("nan"), "hung": hung}


def reference_syscalls(python, pid, engine, seconds=1.0):
    """The same loop under strace: its process_vm_readv calls and bytes per sample.  The
    unwinder's setup counts too, spread over the samples; strace slows the loop, not the count."""
    if not shutil.which("strace"):
        return None
    with tempfile.NamedTemporaryFile(prefix="pyprofd-bench-strace.") as trace:
        cmd = ["strace", "-f", "-qq", "-e", "trace=process_vm_readv", "-o", trace.name]
        cmd += python.argv(["-c", REFERENCE_LOOP, str(pid), str(seconds), engine])
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30).stdout
        except subprocess.TimeoutExpired:
            return None
        samples = sum(1 for item in out.split() if ":" in item)
        calls = nbytes = 0
        for line in open(trace.name, errors="replace"):
            if "process_vm_readv(" in line and "= " in line:
                calls += 1
                result = line.rsplit("= ", 1)[1].split()[0]
                nbytes += int(result) if result.isdigit() else 0
    if not samples:
        return None
    return calls / samples, nbytes / samples


def ok_percent(ref):
    return 100.0 * (ref["samples"] - ref["fails"]) / max(ref["samples"], 1)


HEAD = "{:<16} {:<17} {:>8} {:>8} {:>7} {:>8} | {:>9} {:>8} {:>7} {:>8} {:>6} | {:>7}"


def print_head(what):
    print(HEAD.format(what, "CPython's engine", "pyprofd", "wall", "readv", "bytes", "CPython's",
                      "wall", "readv", "bytes", "ok%", "ratio"))
    print(HEAD.format("", "", "cpu us", "us p50", "/sample", "/sample", "cpu us", "us p50",
                      "/sample", "/sample", "", "cpu"))


def compare(args, python, label, workload, wargs=(), counters=None):
    """One workload sampled by pyprofd, then by the interpreter's own engine; one row."""
    engine, engine_name = ENGINES.get(python.minor, (None, None))
    proc = start_workload(python, workload, wargs)
    try:
        s = record(args.pyprofd, proc.pid, args.seconds)
        ref = reference(python, proc.pid, args.seconds, engine) if engine else None
        sys_ref = reference_syscalls(python, proc.pid, engine) if engine and args.syscalls else None
    finally:
        proc.kill()
        proc.wait()
    if ref and ref["samples"]:
        if ref["cpu_us"] == ref["cpu_us"]:
            ratio = "%.1fx" % (ref["cpu_us"] / max(s["cpu_us_per_sample"], 1e-9))
        else:  # no CPU figure: the medians of wall time
            ratio = "%.1fx w" % (ref["median_us"] / max(s["us_per_sample_median"], 1e-9))
        theirs = ("%.2f" % ref["cpu_us"], "%.2f" % ref["median_us"],
                  "%.2f" % sys_ref[0] if sys_ref else "-", "%.0f" % sys_ref[1] if sys_ref else "-",
                  "%.1f" % ok_percent(ref), ratio)
    else:
        theirs = ("-",) * 6
    print(HEAD.format(label, engine_name or "(none)", "%.2f" % s["cpu_us_per_sample"],
                      "%.2f" % s["us_per_sample_median"], "%.2f" % s["readv_calls_per_sample"],
                      "%.0f" % s["bytes_per_sample"], *theirs), flush=True)
    if ref and ref.get("error"):
        print("    (CPython's engine: %s)" % ref["error"])
    if ref and ref["hung"]:
        print("    (CPython's engine hung after %d calls and was killed)" % ref["samples"])
    if counters is not None:
        counters.append((label, s))
    return s, ref


def print_counters(args, rows):
    """Every integer counter of --stats-json, per sample: what the engine reports, new ones too."""
    if not args.counters or not rows:
        print()
        return
    skip = {"pid", "total_samples", "ok_samples", "failed_samples", "cache_bytes", "scratch_bytes",
            "readv_calls", "bytes_read"}
    names = []
    for _, s in rows:
        for k, v in s.items():
            if isinstance(v, int) and not isinstance(v, bool) and k not in skip and k not in names:
                names.append(k)
    print("  pyprofd's counters per sample (record --stats-json), the rows above:")
    print("  {:<26}".format("") + "".join("{:>13}".format(label[-12:]) for label, _ in rows))
    for k in names:
        print("  {:<26}".format(k) + "".join(
            "{:>13.3f}".format(s.get(k, 0) / max(1, s["total_samples"])) for _, s in rows))
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pyprofd", default=os.path.join(HERE, "..", "build", "pyprofd"))
    ap.add_argument("--ctl", default=os.path.join(HERE, "..", "build", "pyprofd-ctl"))
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--sections", default="engines,depths,threads,accuracy,ablation,native,daemon",
                    help="which of engines, depths, threads, accuracy, ablation, native, daemon, all-pythons "
                         "to run")
    ap.add_argument("--accuracy-scale", type=float, default=0.5,
                    help="accuracy: multiply its windows (make bench-accuracy runs them whole)")
    ap.add_argument("--daemon-seconds", type=float, default=10.0)
    ap.add_argument("--daemon-rounds", type=int, default=3)
    ap.add_argument("--no-counters", dest="counters", action="store_false",
                    help="leave out the engine's counters per sample after each table")
    ap.add_argument("--no-syscalls", dest="syscalls", action="store_false",
                    help="skip counting CPython's reads under strace")
    args = ap.parse_args()
    sections = args.sections.split(",")

    pys = pythons.find()
    if not pys:
        sys.exit("bench: no CPython 3.8-3.15 found")
    newest = {minor: pythons.newest(pys, minor) for minor in (15, 14, 13)}
    print("Figures from a machine others may be using: take the best of a few runs.\n")

    if "engines" in sections:
        print("pyprofd against CPython's own engine, same targets, same run (µs of CPU per "
              "whole-process sample, back to back):")
        print_head("python/workload")
        counters = []
        for minor in (15, 14, 13):
            python = newest[minor]
            if not python:
                print("  (no CPython 3.%d found)" % minor)
                continue
            for name in args.workloads.split(","):
                compare(args, python, "%d.%d %s" % (python.major, python.minor, name), name,
                        counters=counters)
        print_counters(args, counters)

    py15 = newest[15]
    if "depths" in sections and py15:
        print("Deep stacks on %s (deep_static: parked at the bottom of N frames):" % py15.label)
        print_head("frames")
        counters = []
        for frames in DEPTHS:
            compare(args, py15, "%d frames" % frames, "deep_static", (frames - 1,), counters)
        print_counters(args, counters)

    if "threads" in sections and py15:
        print("Threads on %s (many_threads: N threads 10 frames deep, waking every 100 ms):"
              % py15.label)
        print_head("threads")
        counters = []
        for n in THREADS:
            compare(args, py15, "%d threads" % n, "many_threads", (n,), counters)
        print_counters(args, counters)

    if "accuracy" in sections:
        print("Accuracy (bench/accuracy.py):", flush=True)
        subprocess.run([sys.executable, os.path.join(HERE, "accuracy.py"), "--pyprofd", args.pyprofd,
                        "--scale", str(args.accuracy_scale)])

    if "ablation" in sections:
        print("Ablation (bench/ablation.py):", flush=True)
        subprocess.run([sys.executable, os.path.join(HERE, "ablation.py"), "--pyprofd", args.pyprofd,
                        "--ctl", args.ctl, "--repeat", "1"])

    if "native" in sections:
        for busy in (0, 2):
            print("C frames (bench/native.py%s):" % (" --busy %d" % busy if busy else ""), flush=True)
            subprocess.run([sys.executable, os.path.join(HERE, "native.py"), "--pyprofd", args.pyprofd,
                            "--seconds", "2", "--rounds", "2", "--busy", str(busy)])
            print()

    if "all-pythons" in sections:
        print("pyprofd on every interpreter found (cache on and off):")
        row = "{:<22} {:<12} {:>10} {:>10} {:>10} {:>9} {:>9}"
        print(row.format("python", "workload", "cpu us on", "cpu us off", "off/on", "readv/s.",
                         "bytes/s."))
        for python in pys:
            for name in args.workloads.split(","):
                proc = start_workload(python, name)
                try:
                    on = record(args.pyprofd, proc.pid, args.seconds)
                    off = record(args.pyprofd, proc.pid, args.seconds, cache=False)
                finally:
                    proc.kill()
                    proc.wait()
                print(row.format(python.label, name, "%.2f" % on["cpu_us_per_sample"],
                                 "%.2f" % off["cpu_us_per_sample"],
                                 "%.1fx" % (off["cpu_us_per_sample"] / max(on["cpu_us_per_sample"], 1e-9)),
                                 "%.2f" % on["readv_calls_per_sample"],
                                 "%.0f" % on["bytes_per_sample"]), flush=True)
        print()

    if "daemon" in sections:
        print("The daemon (make bench-daemon, %.0f s, %d rounds):" % (args.daemon_seconds, args.daemon_rounds),
              flush=True)
        subprocess.run([sys.executable, os.path.join(HERE, "daemon.py"), "--pyprofd", args.pyprofd,
                        "--ctl", args.ctl, "--seconds", str(args.daemon_seconds),
                        "--rounds", str(args.daemon_rounds)])


if __name__ == "__main__":
    main()
