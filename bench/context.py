#!/usr/bin/env python3
"""What reading each sample's request costs (run as root for the test root's SDK).

For interpreters with and without the OpenTelemetry SDK (sid's 3.13 to 3.15
import it; pyenv's do not), bench/workloads/spans4.py runs four threads
whose every request is a span (where the SDK is) with a route ContextVar
set.  `pyprofd record` samples it at the daemon's rate, without context,
with `--context otel --context-label route`, and the same on
bench/workloads/service4.py (no span, no route): the second shows what the
option costs a process that has nothing to read; and on
bench/workloads/records4.py, whose requests are OpenTelemetry thread
records (OTEP 4947) published by tests/otel's library, read in place of
ContextVars.  Each run is repeated
(--rounds) and interleaved, and the medians of each are printed: µs per
sample, pages per sample, the contexts read and given up per sample.
Prints figures; never passes or fails on them.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pythons  # noqa: E402

CONTEXT = ["--context", "otel", "--context-label", "route"]


def record(pyprofd, pid, seconds, rate, extra):
    cmd = [pyprofd, "record", str(pid), "--rate", str(rate), "--duration", str(seconds),
           "--stats-json", "-o", os.devnull] + extra
    out = subprocess.run(cmd, capture_output=True, text=True)
    lines = [l for l in out.stderr.splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def start(py, workload, tmp, extra=()):
    report = os.path.join(tmp, "report-%d" % time.monotonic_ns())
    proc = py.popen(["-I", os.path.join(HERE, "workloads", workload), report] + list(extra), binds=(tmp,),
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if workload == "service4.py":
        # It writes no report: its threads run from its first moments.
        time.sleep(1)
        return (proc, {}) if proc.poll() is None else (None, None)
    deadline = time.time() + 60
    while not os.path.exists(report) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    if not os.path.exists(report):
        proc.kill()
        return None, None
    with open(report) as f:
        return proc, json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pyprofd", default=os.path.join(HERE, "..", "build", "pyprofd"))
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rate", type=int, default=100, help="the daemon's default, 100 Hz")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pythons", default="3.12,3.13,3.15", help="minor versions, comma-separated")
    ap.add_argument("--publisher", default=os.path.join(HERE, "..", "build", "tests", "otel", "libotelpub-desc.so"),
                    help="the thread records' publisher (make test-build builds it); records4.py runs when it exists")
    args = ap.parse_args()
    wanted = set(args.pythons.split(","))
    pys = [p for p in pythons.find() if p.version_tag() in wanted]
    print("%-22s %-9s %-8s %9s %9s %9s %9s %9s" % ("interpreter", "workload", "context", "us/sample",
                                                  "pages", "read/smp", "kept/smp", "torn/smp"))
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        for py in pys:
            # The SDK's workload where it can be imported; the plain service on every one; records where built.
            publisher = os.path.join(tmp, "libotelpub.so")
            if os.path.exists(args.publisher) and not os.path.exists(publisher):
                shutil.copy(args.publisher, publisher)
            workloads = ("spans4.py", "service4.py") + (("records4.py",) if os.path.exists(publisher) else ())
            for workload in workloads:
                proc, report = start(py, workload, tmp, [publisher] if workload == "records4.py" else [])
                if not proc:
                    print("%-22s %-9s could not start" % (py.label, workload))
                    continue
                if workload == "spans4.py" and not report.get("otel"):
                    label = "route"
                else:
                    label = {"spans4.py": "spans", "records4.py": "records"}.get(workload, "none")
                runs = {"off": [], "on": []}
                for _ in range(args.rounds):
                    for key, extra in (("off", []), ("on", CONTEXT)):
                        st = record(args.pyprofd, proc.pid, args.seconds, args.rate, extra)
                        if st and st.get("ok_samples"):
                            runs[key].append(st)
                proc.kill()
                proc.wait()
                for key in ("off", "on"):
                    if not runs[key]:
                        continue
                    us = statistics.median(s["us_per_sample_median"] for s in runs[key])
                    pages = statistics.median(s["pages_per_sample"] for s in runs[key])
                    ctx = statistics.median(s["context_reads"] / s["ok_samples"] for s in runs[key])
                    kept = statistics.median(s["context_kept"] / s["ok_samples"] for s in runs[key])
                    torn = statistics.median(s["context_torn"] / s["ok_samples"] for s in runs[key])
                    print("%-22s %-9s %-8s %9.1f %9.2f %9.2f %9.2f %9.2f" % (
                        py.label, label, key, us, pages, ctx, kept, torn))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
