#!/usr/bin/env python3
"""Measure pyprofd's sampling engine on every installed CPython.

For each interpreter and workload (basic, deep_static, threads) the workload
is started, sampled back to back by `pyprofd record --rate max` with the
caches on and then off, and one table row is printed per run.  On 3.13 the
same workload is also sampled by CPython's own reader,
_testexternalinspection.get_stack_trace(pid), for comparison.

Prints figures; never passes or fails on them.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = ["basic", "deep_static", "threads"]

# CPython's own remote reader, timed in a loop inside the interpreter that has it.
REFERENCE_LOOP = r"""
import sys, time
from _testexternalinspection import get_stack_trace
pid, seconds = int(sys.argv[1]), float(sys.argv[2])
batch, end = [], time.perf_counter() + seconds
while time.perf_counter() < end:
    t0 = time.perf_counter_ns()
    try:
        get_stack_trace(pid)
        ok = 1
    except Exception:
        ok = 0
    batch.append("%d:%d" % (time.perf_counter_ns() - t0, ok))
    if len(batch) == 50:
        print(" ".join(batch), flush=True)
        batch = []
print(" ".join(batch), flush=True)
"""

def interpreters():
    """Every pyenv CPython 3.8+ and Debian's python3.N, plus PYPROFD_TEST_PYTHONS."""
    found, seen = [], set()
    root = os.environ.get("PYENV_ROOT")
    if not root:
        try:
            root = subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip()
        except OSError:
            root = ""
    root = root or os.path.expanduser("~/.pyenv")
    paths = sorted(glob.glob(os.path.join(root, "versions", "*", "bin", "python3.*[0-9]")))
    paths += sorted(glob.glob("/usr/bin/python3.*[0-9]"))
    paths += [p for p in os.environ.get("PYPROFD_TEST_PYTHONS", "").split(":") if p]
    for path in paths:
        real = os.path.realpath(path)
        if real in seen or not os.access(real, os.X_OK):
            continue
        seen.add(real)
        try:
            out = subprocess.run([real, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                                 capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            continue
        major, minor = (int(x) for x in out.split(".")[:2])
        if major == 3 and 8 <= minor <= 15:
            label = out + (" (debian)" if real.startswith("/usr/bin/") else "")
            found.append((label, real, minor))
    return found


def start_workload(python, name):
    proc = subprocess.Popen([python, os.path.join(HERE, "workloads", name + ".py")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # let it import and reach its steady shape
    return proc


def record(pyprofd, pid, seconds, cache):
    cmd = [pyprofd, "record", str(pid), "--rate", "max", "--duration", str(seconds),
           "--stats-json", "-o", os.devnull]
    if not cache:
        cmd.append("--no-cache")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    lines = [l for l in proc.stderr.splitlines() if l.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError("record failed (%d): %s" % (proc.returncode, proc.stderr.strip()))
    return json.loads(lines[-1])


def reference(python, pid, seconds):
    """CPython's reader has no bound on its frame walk: a torn read can make it
    loop forever, so it reports each call as it goes and is killed if it stops."""
    proc = subprocess.Popen([python, "-c", REFERENCE_LOOP, str(pid), str(seconds)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    hung = False
    try:
        out, _ = proc.communicate(timeout=seconds + 10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        hung = True
    calls = [tuple(int(x) for x in item.split(":")) for item in out.split() if ":" in item]
    if not calls:
        return {"samples": 0, "fails": 0, "median_us": float("nan"), "p99_us": float("nan"),
                "hung": hung}
    times = sorted(ns for ns, _ in calls)
    return {"samples": len(calls), "fails": sum(1 for _, ok in calls if not ok),
            "median_us": times[len(times) // 2] / 1000,
            "p99_us": times[int(0.99 * (len(times) - 1))] / 1000, "hung": hung}


ROW = "{:<20} {:<12} {:<6} {:>10} {:>10} {:>10} {:>9} {:>11} {:>8} {:>8} {:>8}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pyprofd", default=os.path.join(HERE, "..", "build", "pyprofd"))
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    args = ap.parse_args()

    pythons = interpreters()
    if not pythons:
        sys.exit("bench: no CPython 3.8-3.15 found")
    print(ROW.format("python", "workload", "cache", "us/sample", "p99 us", "samples/s",
                     "calls/s.", "bytes/s.", "frame$%", "code$%", "ok%"))
    comparisons = []
    for label, python, minor in pythons:
        for name in args.workloads.split(","):
            proc = start_workload(python, name)
            try:
                runs = {}
                for cache in (True, False):
                    s = record(args.pyprofd, proc.pid, args.seconds, cache)
                    runs[cache] = s
                    print(ROW.format(label, name, "on" if cache else "off",
                                     "%.2f" % s["us_per_sample_median"],
                                     "%.2f" % s["us_per_sample_p99"],
                                     "%.0f" % s["samples_per_s"],
                                     "%.2f" % s["readv_calls_per_sample"],
                                     "%.0f" % s["bytes_per_sample"],
                                     "%.1f" % (100 * s["frames_from_cache_rate"]),
                                     "%.1f" % (100 * s["code_object_cache_hit_rate"]),
                                     "%.2f" % (100 * s["success_rate"])), flush=True)
                on, off = runs[True], runs[False]
                print("    %s %s: cache on is %.1fx cheaper per sample than --no-cache"
                      % (label, name, off["us_per_sample_median"] / max(on["us_per_sample_median"], 1e-9)))
                if minor == 13:
                    ref = reference(python, proc.pid, args.seconds)
                    if ref:
                        comparisons.append((label, name, on, ref))
            finally:
                proc.kill()
                proc.wait()
    if comparisons:
        print("\nCPython 3.13's _testexternalinspection.get_stack_trace(pid), same workloads:")
        print("{:<20} {:<12} {:>14} {:>14} {:>10} {:>8}".format(
            "python", "workload", "reference us", "pyprofd us", "ratio", "ref ok%"))
        for label, name, on, ref in comparisons:
            ok = 100.0 * (ref["samples"] - ref["fails"]) / max(ref["samples"], 1)
            print("{:<20} {:<12} {:>14.2f} {:>14.2f} {:>9.1f}x {:>8.2f}{}".format(
                label, name, ref["median_us"], on["us_per_sample_median"],
                ref["median_us"] / max(on["us_per_sample_median"], 1e-9), ok,
                "  (the reference hung after %d calls and was killed)" % ref["samples"]
                if ref["hung"] else ""))
    else:
        print("\n(no CPython 3.13 with _testexternalinspection found: no reference comparison)")


if __name__ == "__main__":
    main()
