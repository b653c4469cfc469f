#!/usr/bin/env python3
"""Measure what a long collector outage costs the daemon.

Starts pyprofd exporting OTLP profiles to a port where nothing listens,
attaches N targets of 4 threads (bench/workloads/service4.py) at R Hz, and
every 30 s of the outage prints the daemon's RSS, the export backlog and the
history's size.  Retention is squeezed (buckets older than --merge-after
seconds merge into minutes, where the default waits an hour), so a short
outage goes through what an hour does by default: buckets the collector has
still to get must not merge.  Then the collector (make collector's) comes
up, and the script prints how long the backlog took to go and whether the
samples the collector logged equal those in the history, per process.
Prints figures; never passes or fails on them.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from daemon import COLLECTOR_CONFIG, free_port, port_open  # noqa: E402
from pythons import interpreters  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pyprofd", default="build/pyprofd")
    ap.add_argument("--ctl", default="build/pyprofd-ctl")
    ap.add_argument("--collector", required=True, help="the collector of make collector")
    ap.add_argument("--targets", type=int, default=10)
    ap.add_argument("--rate", type=int, default=100)
    ap.add_argument("--down", type=float, default=300, help="seconds the collector is down")
    ap.add_argument("--merge-after", type=int, default=120)
    args = ap.parse_args()

    pys = interpreters()
    python = max(pys, key=lambda p: (p[2], "debian" not in p[0]))[1]
    state = tempfile.mkdtemp(prefix="pyprofd-outage.")
    sock = os.path.join(state, "pyprofd.sock")
    port = free_port()
    conf = os.path.join(state, "pyprofd.conf")
    with open(conf, "w") as f:
        f.write("[storage]\nretention = %d:60\n\n[export.otlp]\nendpoint = http://127.0.0.1:%d\n"
                "interval = 15s\n" % (args.merge_after, port))
    daemon = subprocess.Popen([args.pyprofd, "--state-dir", state, "--config", conf,
                               "--log-level", "warn"])
    targets, collector = [], None

    def ctl(*argv):
        out = subprocess.run([args.ctl, "--socket", sock, "--json"] + list(argv),
                             capture_output=True, text=True, check=True).stdout
        return json.loads(out)

    def show(t0, what):
        st = ctl("status")
        e = st["export"]
        print("  %6.0f s  %-22s RSS %6.1f MiB  backlog %8d samples  history %6.1f MiB  "
              "failed requests %d" % (time.monotonic() - t0, what, st["rss_bytes"] / 2**20,
                                      e["backlog_samples"], st["history"]["bytes"] / 2**20,
                                      e["requests_failed"]))
        return st

    try:
        for _ in range(200):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        # The OTLP sender sends from where it starts: the targets come after that.
        while not ctl("status")["export"]["sent_until"]:
            time.sleep(0.2)
        workload = os.path.join(HERE, "workloads", "service4.py")
        targets = [subprocess.Popen([python, "-I", workload]) for _ in range(args.targets)]
        time.sleep(1.5)
        for t in targets:
            ctl("attach", str(t.pid), "--rate", str(args.rate))
        print("collector down for %.0f s: %d targets x 4 threads at %d Hz, buckets older than "
              "%d s merge" % (args.down, args.targets, args.rate, args.merge_after))
        t0 = time.monotonic()
        while time.monotonic() - t0 < args.down:
            time.sleep(min(30, args.down - (time.monotonic() - t0)))
            show(t0, "collector down")
        log = open(os.path.join(state, "collector.log"), "w")
        cconf = os.path.join(state, "collector.yaml")
        with open(cconf, "w") as f:
            f.write(COLLECTOR_CONFIG % {"port": port, "verbosity": "detailed"})
        collector = subprocess.Popen([args.collector, "--config=file:" + cconf,
                                      "--feature-gates=service.profilesSupport"],
                                     stdout=log, stderr=log)
        while not port_open(port):
            time.sleep(0.1)
        up = time.monotonic()
        # The targets stop a moment later, so the totals compared are final.
        time.sleep(5)
        for t in targets:
            t.kill()
            t.wait()
        end = time.time() + 12
        while True:
            st = ctl("status")
            e = st["export"]
            if e["backlog_samples"] == 0 and e["sent_until"] >= end:
                break
            time.sleep(1)
        print("  caught up %.0f s after the collector came up (%d samples, %d bytes sent)"
              % (time.monotonic() - up, e["samples_sent"], e["bytes_sent"]))
        show(t0, "after catching up")
        merged = subprocess.run(["sqlite3", os.path.join(state, "pyprofd.db"),
                                 "SELECT count(*) FROM samples WHERE bucket_seconds = 60"],
                                capture_output=True, text=True).stdout.strip()
        print("  merged rows in the history: %s" % (merged or "(sqlite3 not installed)"))
        collector.terminate()
        collector.wait(timeout=30)
        collector = None
        log.close()
        got = {}
        pid = None
        value = re.compile(r"Values: \[(\d+)\]")
        with open(os.path.join(state, "collector.log")) as f:
            for line in f:
                if "ResourceProfiles #" in line:
                    pid = None
                m = re.search(r"-> process\.pid: Int\((\d+)\)", line)
                if m:
                    pid = int(m.group(1))
                m = value.search(line)
                if m:
                    got[pid] = got.get(pid, 0) + int(m.group(1))
        same = 0
        for t in targets:
            q = ctl("query", "--pid", str(t.pid), "--format", "json")
            stored = sum(s["count"] for s in q["stacks"])
            same += stored == got.get(t.pid, 0)
            if stored != got.get(t.pid, 0):
                print("  pid %d: history %d, collector %d" % (t.pid, stored, got.get(t.pid, 0)))
        print("  processes whose totals match exactly: %d of %d" % (same, len(targets)))
    finally:
        for t in targets:
            t.kill()
        if collector:
            collector.kill()
        daemon.terminate()
        daemon.wait(timeout=10)
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
