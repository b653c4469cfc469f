#!/usr/bin/env python3
"""Measure the daemon: many targets sampled at once, as a fleet host runs it.

Starts pyprofd in a temporary state directory, attaches it to N targets of
4 threads each (bench/workloads/service4.py, on the newest interpreter found)
at R Hz for S seconds, and prints: daemon CPU % of one core, µs per sample,
achieved rate against requested, sampling-timer lateness (jitter) p50/p99,
and the daemon's RSS.  With --collector BIN (the collector of make
collector) or --otlp URL the daemon also exports to it every --interval
([export.otlp]), and the bytes it sent per target-minute are printed.
Prints figures; never passes or fails on them.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run import interpreters  # noqa: E402


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


COLLECTOR_CONFIG = """receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
exporters:
  debug:
    verbosity: basic
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [otlp]
      exporters: [debug]
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def thread_cpu_seconds(pid, name):
    """CPU seconds of the daemon's threads called name."""
    total = 0.0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                if f.read().strip() != name:
                    continue
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pyprofd", default="build/pyprofd")
    ap.add_argument("--ctl", default="build/pyprofd-ctl")
    ap.add_argument("--targets", type=int, default=10)
    ap.add_argument("--rate", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--collector", help="an OpenTelemetry Collector binary to run and export to")
    ap.add_argument("--otlp", help="export to this OTLP/HTTP endpoint")
    ap.add_argument("--interval", default="15s", help="the export interval")
    args = ap.parse_args()

    pys = interpreters()
    if not pys:
        sys.exit("no CPython found")
    python = max(pys, key=lambda p: (p[2], "debian" not in p[0]))[1]
    state = tempfile.mkdtemp(prefix="pyprofd-bench.")
    sock = os.path.join(state, "pyprofd.sock")
    workload = os.path.join(HERE, "workloads", "service4.py")
    collector = None
    extra = []
    if args.collector:
        port = free_port()
        conf = os.path.join(state, "collector.yaml")
        with open(conf, "w") as f:
            f.write(COLLECTOR_CONFIG % port)
        collector = subprocess.Popen([args.collector, "--config=file:" + conf,
                                      "--feature-gates=service.profilesSupport"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        args.otlp = "http://127.0.0.1:%d" % port
        for _ in range(600):
            if port_open(port):
                break
            time.sleep(0.1)
    if args.otlp:
        conf = os.path.join(state, "pyprofd.conf")
        with open(conf, "w") as f:
            f.write("[export.otlp]\nendpoint = %s\ninterval = %s\n" % (args.otlp, args.interval))
        extra = ["--config", conf]
    daemon = subprocess.Popen([args.pyprofd, "--state-dir", state, "--log-level", "warn"] + extra)
    targets = []

    def ctl(*argv):
        out = subprocess.run([args.ctl, "--socket", sock, "--json"] + list(argv),
                             capture_output=True, text=True, check=True).stdout
        return json.loads(out)

    try:
        for _ in range(200):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        targets = [subprocess.Popen([python, "-I", workload]) for _ in range(args.targets)]
        time.sleep(1.5)
        for t in targets:
            ctl("attach", str(t.pid), "--rate", str(args.rate))
        time.sleep(1.0)  # the first samples decode everything: measure steady state
        cpu0, wall0 = cpu_seconds(daemon.pid), time.monotonic()
        export_cpu0 = thread_cpu_seconds(daemon.pid, "otlp-export")
        samples0 = {e["pid"]: e["samples"] for e in ctl("list")}
        export0 = ctl("status").get("export", {})
        time.sleep(args.seconds)
        cpu1, wall1 = cpu_seconds(daemon.pid), time.monotonic()
        export_cpu1 = thread_cpu_seconds(daemon.pid, "otlp-export")
        entries = {e["pid"]: e for e in ctl("list")}
        stats = [ctl("stats", str(t.pid)) for t in targets]
        status = ctl("status")
    finally:
        for t in targets:
            t.kill()
        daemon.terminate()
        daemon.wait(timeout=10)
        if collector:
            collector.terminate()
            collector.wait(timeout=30)
        shutil.rmtree(state, ignore_errors=True)

    elapsed = wall1 - wall0
    rates = [(entries[t.pid]["samples"] - samples0[t.pid]) / elapsed for t in targets]
    threads = sum(s["thread_samples"] for s in stats) / max(1, sum(s["total_samples"] for s in stats))
    print("pyprofd daemon: %d targets x 4 threads at %d Hz for %.0f s (%s, Python %s)"
          % (args.targets, args.rate, elapsed, os.path.basename(python),
             entries[targets[0].pid]["python_version"]))
    print("  daemon CPU                %6.2f %% of one core" % (100 * (cpu1 - cpu0) / elapsed))
    print("  per sample                %6.1f us median, %.1f us p99 (median over targets)"
          % (statistics.median(s["sample_us_p50"] for s in stats),
             statistics.median(s["sample_us_p99"] for s in stats)))
    print("  threads per sample        %6.2f" % threads)
    print("  achieved rate             %6.1f Hz mean, %.1f Hz min (asked %d)"
          % (statistics.mean(rates), min(rates), args.rate))
    print("  timer lateness (jitter)   %6.1f us p50, %.1f us p99 (worst target)"
          % (statistics.median(s["jitter_us_p50"] for s in stats),
             max(s["jitter_us_p99"] for s in stats)))
    print("  readv calls per sample    %6.2f" % statistics.median(
        s["readv_calls"] / max(1, s["total_samples"]) for s in stats))
    print("  torn threads              %6.3f %% of thread samples" % (100 * sum(
        s["torn_threads"] for s in stats) / max(1, sum(s["thread_samples"] for s in stats))))
    print("  daemon RSS                %6.1f MiB" % (status["rss_bytes"] / 2**20))
    if args.otlp:
        e = status["export"]
        sent = e["bytes_sent"] - export0.get("bytes_sent", 0)
        samples = e["samples_sent"] - export0.get("samples_sent", 0)
        print("  OTLP export to %s every %s: %d samples, %d bytes sent, %d failed requests"
              % (e["endpoint"], args.interval, samples, sent, e["requests_failed"]))
        print("  exporter thread CPU       %6.3f %% of one core (of the daemon's above)"
              % (100 * (export_cpu1 - export_cpu0) / elapsed))
        print("  bytes per target-minute   %6.0f (gzip'd request bodies)"
              % (sent / args.targets / (elapsed / 60)))


if __name__ == "__main__":
    main()
