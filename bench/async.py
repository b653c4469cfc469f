#!/usr/bin/env python3
"""What async-aware sampling costs per sample (run as root).

For every interpreter from 3.11 (the host's, and those of the root named by
--root, run chrooted), tests/targets/tasks.py parks --tasks suspended tasks
(1,000 and 100,000 by default) while its main task spins on the loop (as a
service's loop runs while its tasks wait: no sample is proven from the last,
every one reads the tasks; --target-mode park parks it too); then `pyprofd
record --rate 1000` samples it
for --seconds without async, with --async-aware and with --async-mode all,
and `pyprofd dump --async-aware` reads the whole tree once.  The daemon's
sample time on a deep chain of tasks, against its bound, is bench/bound.py's.
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
from pythons import interpreters  # noqa: E402

TARGET = os.path.join(HERE, "..", "tests", "targets", "tasks.py")


def root_interpreters(root):
    found = []
    for minor in range(11, 16):
        for name in ("python3.%d" % minor, "python3.%dd" % minor):
            if os.path.exists(os.path.join(root, "usr", "bin", name)):
                found.append(("3.%d%s (root)" % (minor, "d" if name.endswith("d") else ""),
                              ["chroot", root, "/usr/bin/" + name], minor))
    return found


def start(cmd, script, report, tasks, mode):
    proc = subprocess.Popen(cmd + ["-I", script, report, str(tasks), mode],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not os.path.exists(report) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    return proc


def record(pyprofd, pid, seconds, extra, rate):
    cmd = [pyprofd, "record", str(pid), "--rate", rate, "--duration", str(seconds),
           "--stats-json", "-o", os.devnull] + extra
    out = subprocess.run(cmd, capture_output=True, text=True)
    lines = [l for l in out.stderr.splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def place(script, root, tmp):
    """The script and its report as the target sees them (inside a root) and as we do."""
    if not root:
        return script, os.path.join(tmp, "report"), os.path.join(tmp, "report"), None
    inside = tempfile.mkdtemp(dir=os.path.join(root, "tmp"))
    shutil.copy(script, inside)
    base = "/tmp/" + os.path.basename(inside) + "/"
    return base + os.path.basename(script), base + "report", os.path.join(inside, "report"), inside


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pyprofd", default=os.path.join(HERE, "..", "build", "pyprofd"))
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--tasks", default="1000,100000")
    ap.add_argument("--root", default=os.environ.get("PYPROFD_PYTHONS_ROOT", ""))
    ap.add_argument("--target-mode", default="spin", choices=("spin", "park"))
    # At max a sampler that shares the spinning target's CPU finds it still (it waits for that CPU).
    ap.add_argument("--rate", default="1000", help="record's --rate (default 1000; max)")
    ap.add_argument("--ctl", default=os.path.join(HERE, "..", "build", "pyprofd-ctl"))
    ap.add_argument("--only", default="", help="interpreters whose label starts with one of these, comma-separated")
    args = ap.parse_args()
    pys = [(label, [path], minor) for label, path, minor in interpreters() if minor >= 11]
    if args.root and os.path.isdir(args.root):
        pys += root_interpreters(args.root)
    if args.only:
        pys = [p for p in pys if any(p[0].startswith(o) for o in args.only.split(","))]
    counts = [int(x) for x in args.tasks.split(",") if x]
    print("%-22s %8s %-10s %10s %10s %10s %12s %10s" % (
        "python", "tasks", "mode", "us/sample", "p99 us", "readv/s.", "tasks/s.", "cut"))
    for label, cmd, minor in pys:
        for n in counts:
            tmp = tempfile.mkdtemp(prefix="pyprofd-bench-async-")
            try:
                script_in, report_in, report, inside = place(
                    TARGET, args.root if cmd[0] == "chroot" else None, tmp)
                proc = start(cmd, script_in, report_in, n, args.target_mode)
                if not os.path.exists(report):
                    print("%-22s %8d  (the target did not start)" % (label, n))
                    proc.kill()
                    continue
                pid = json.load(open(report))["pid"] if cmd[0] != "chroot" else proc.pid
                for mode, extra in (("off", []), ("running", ["--async-aware"]),
                                    ("all", ["--async-mode", "all"])):
                    st = record(args.pyprofd, pid, args.seconds, extra, args.rate)
                    if not st:
                        print("%-22s %8d %-10s (record failed)" % (label, n, mode))
                        continue
                    samples = max(st["total_samples"], 1)
                    print("%-22s %8d %-10s %10.1f %10.1f %10.1f %12.1f %10d" % (
                        label, n, mode, st["us_per_sample_median"], st["us_per_sample_p99"],
                        st["readv_calls_per_sample"], st.get("tasks_read", 0) / samples,
                        st.get("tasks_cut", 0)))
                t0 = time.monotonic()
                out = subprocess.run([args.pyprofd, "dump", str(pid), "--async-aware", "--json"],
                                     capture_output=True, text=True)
                took = time.monotonic() - t0
                got = len(json.loads(out.stdout)["tasks"]) if out.returncode == 0 else -1
                print("%-22s %8d %-10s %10.1f ms for the whole tree (%d tasks)" % (
                    label, n, "dump", took * 1000, got))
                proc.kill()
                proc.wait()
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
                if inside:
                    shutil.rmtree(inside, ignore_errors=True)

if __name__ == "__main__":
    main()
