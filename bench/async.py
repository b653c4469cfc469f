#!/usr/bin/env python3
"""What async-aware sampling costs per sample (run as root).

For every interpreter from 3.11 (the host's, and those of the root named by
--root, run chrooted), tests/targets/tasks.py parks --tasks suspended tasks
(1,000 and 100,000 by default) while its main task spins on the loop (as a
service's loop runs while its tasks wait: no sample is proven from the last,
every one reads the tasks; --target-mode park parks it too); then `pyprofd
record --rate 1000` samples it
for --seconds without async, with --async-aware and with --async-mode all,
and `pyprofd dump --async-aware` reads the whole tree once.  Then the
daemon samples a chain of --chain tasks (10,000), each awaiting the next,
at 100 Hz with --async-mode all: its sample time against the 5 ms bound.  A sample reads
at most 4,096 tasks (more are counted as cut), so its cost is bounded.
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
CHAIN = os.path.join(HERE, "..", "tests", "targets", "task_chain.py")


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


def chain(args, label, cmd, root):
    """The daemon at 100 Hz, --async-mode all, on a chain of --chain tasks each awaiting the next: its
    sample time against the per-sample bound (max_sample_time, 5 ms by default)."""
    tmp = tempfile.mkdtemp(prefix="pyprofd-bench-chain-")
    script, report_in, report, inside = place(CHAIN, root, tmp)
    proc = subprocess.Popen(cmd + ["-I", script, report_in, str(args.chain)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    daemon = subprocess.Popen([args.pyprofd, "--state-dir", tmp, "--log-level", "warn"])
    sock = os.path.join(tmp, "pyprofd.sock")

    def ctl(*argv):
        return json.loads(subprocess.run([args.ctl, "--socket", sock, "--json"] + list(argv),
                                         capture_output=True, text=True, check=True).stdout)
    try:
        deadline = time.time() + 300
        while not (os.path.exists(report) and os.path.exists(sock)) and time.time() < deadline:
            time.sleep(0.1)
        pid = json.load(open(report))["pid"] if not root else proc.pid
        ctl("attach", str(pid), "--rate", "100", "--async-mode", "all")
        time.sleep(args.seconds * 4)
        st = ctl("stats", str(pid))
        n = max(1, st["total_samples"] - st.get("process_still", 0))
        print("%-22s %8d %-10s %10.1f %10.1f %10.1f Hz %8.0f tasks/s. %6.0f %% cut" % (
            label, args.chain, "chain", st["sample_us_p50"], st["sample_us_p99"], st["achieved_rate_hz"],
            st.get("tasks_read", 0) / n, 100.0 * st.get("tasks_cut", 0) / n), flush=True)
    finally:
        proc.kill()
        daemon.terminate()
        daemon.wait()
        shutil.rmtree(tmp, ignore_errors=True)
        if inside:
            shutil.rmtree(inside, ignore_errors=True)


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
    ap.add_argument("--chain", type=int, default=10000, help="tasks of the chain the daemon samples (0: none)")
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
                if cmd[0] == "chroot":
                    inside = tempfile.mkdtemp(dir=os.path.join(args.root, "tmp"))
                    shutil.copy(TARGET, inside)
                    script_in = "/tmp/" + os.path.basename(inside) + "/tasks.py"
                    report_in = "/tmp/" + os.path.basename(inside) + "/report"
                    report = os.path.join(inside, "report")
                else:
                    inside = None
                    script_in, report_in = TARGET, os.path.join(tmp, "report")
                    report = report_in
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
    if args.chain:
        print()
        print("%-22s %8s %-10s %10s %10s %13s (the daemon, 100 Hz, bound 5 ms)" % (
            "python", "tasks", "mode", "p50 us", "p99 us", "achieved"))
        for label, cmd, minor in pys:
            chain(args, label, cmd, args.root if cmd[0] == "chroot" else None)


if __name__ == "__main__":
    main()
