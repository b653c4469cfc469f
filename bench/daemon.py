#!/usr/bin/env python3
"""Measure the daemon: many targets sampled at once, as a fleet host runs it.

Starts pyprofd in a temporary state directory, attaches it to N targets of
4 threads each (bench/workloads/service4.py, or --workload, on CPython 3.15 from the Debian
root of `make pythons` when there, chrooted, else the newest interpreter found)
at R Hz for S seconds, and prints: the daemon's CPU % of one core, its wakeups
per second, µs per sample, achieved rates against the one asked, the lateness
of the sampling schedule p50/p99, the engine's counters per sample, and the
daemon's RSS.  Then, on 3.15, the same targets sampled by as many copies of
CPython's own sampler (`python3.15 -m profiling.sampling attach`), one per
target, at the same rate: their CPU % and RSS.  With --collector BIN (the
collector of make collector) or --otlp URL the daemon also exports to it every
--interval ([export.otlp]), and the bytes it sent per target-minute are printed.

Before the daemon samples them, a process that only wakes at the same rate
beside the same targets (bench/wake_cost.c, built by make bench) shows the
floor under the daemon's wakeups on this host.

The kernel's copies of the targets as they fall quiet (kcopy.bpf.c, [sampling]
kernel_copy = true) are paid for in the targets: with them, their cost, as the
kernel counts it (bpftool, with kernel.bpf_stats_enabled on meanwhile), is
printed beside the daemon's CPU.

A host others use moves a figure like this by a third from one minute to the
next, in both directions: --rounds N (3) measures the daemon as installed,
the daemon with the kernel's copies and CPython's sampler N times,
alternating, prints every round's figures, and their medians.  The first
round's are printed in full.

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
import pythons  # noqa: E402


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


# A collector that takes OTLP profiles over HTTP and logs them (verbosity: basic or detailed).
COLLECTOR_CONFIG = """receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%(port)d
exporters:
  debug:
    verbosity: %(verbosity)s
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


def proc_status(pid, key):
    """A field of /proc/PID/status as an int (kB for sizes)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def switches(pid):
    """Context switches of every thread: each wait the loop blocks in is one."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def bpf_program_runs(name):
    """(runs, ns) of the kernel's programs called name so far; None when the kernel does not count them."""
    try:
        out = subprocess.run(["bpftool", "prog", "show", "--json"], capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    runs = ns = 0
    for prog in json.loads(out):
        if prog.get("name") == name:
            runs += prog.get("run_cnt", 0)
            ns += prog.get("run_time_ns", 0)
    return runs, ns


class BpfStats:
    """The kernel's counts of BPF programs' runs and time (kernel.bpf_stats_enabled) while in use."""
    PATH = "/proc/sys/kernel/bpf_stats_enabled"

    def __enter__(self):
        try:
            with open(self.PATH) as f:
                self.was = f.read().strip()
            with open(self.PATH, "w") as f:
                f.write("1")
        except OSError:
            self.was = None
        return self

    def __exit__(self, *exc):
        if self.was is not None:
            with open(self.PATH, "w") as f:
                f.write(self.was)


def start_targets(python, n, binds=(), name="service4.py"):
    workload = os.path.join(HERE, "workloads", name)
    procs = [python.popen(["-I", workload], binds) for _ in range(n)]
    time.sleep(2.0)  # imported, threads started
    return procs


def stop(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()


def bench_pyprofd(args, python, verbose, copy=False, provers_off=None):
    """The daemon's CPU % of one core over the window, and the targets' for the kernel's copies
    (None when the kernel did not count them); everything else printed when verbose.
    provers_off: [sampling] provers_off, for the ablation bench."""
    state = tempfile.mkdtemp(prefix="pyprofd-bench.")
    sock = os.path.join(state, "pyprofd.sock")
    collector, extra = start_export(args, state)
    if copy or provers_off:
        config = os.path.join(state, "pyprofd.conf")
        with open(config, "w") as f:
            f.write("[sampling]\n")
            f.write("kernel_copy = true\n" if copy else "")
            f.write("provers_off = %s\n" % provers_off if provers_off else "")
        extra = extra + ["--config", config]
    # The priority the installed unit gives it (Nice=-10) is --nice -10.
    daemon = subprocess.Popen([args.pyprofd, "--state-dir", state, "--log-level", "warn"] + extra,
                              preexec_fn=lambda: os.setpriority(os.PRIO_PROCESS, 0, args.nice))
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
        targets = start_targets(python, args.targets, name=args.workload)
        woke = None
        if verbose and not copy and args.waker:
            # The floor under the daemon's wakeups, met beside the same targets before it samples them.
            r = subprocess.run([args.waker, str(args.rate), "5"], capture_output=True, text=True)
            woke = r.stdout.strip() if r.returncode == 0 else "failed: %s" % (r.stderr.strip() or r.returncode)
        for t in targets:
            ctl("attach", str(t.pid), "--rate", str(args.rate), *args.attach_extra)
        time.sleep(1.0)  # the first samples decode everything: measure steady state
        status0 = ctl("status")
        cpu0, sw0, wall0 = cpu_seconds(daemon.pid), switches(daemon.pid), time.monotonic()
        export_cpu0 = thread_cpu_seconds(daemon.pid, "otlp-export")
        samples0 = {e["pid"]: e["samples"] for e in ctl("list")}
        stats0 = {t.pid: ctl("stats", str(t.pid)) for t in targets}
        targets_cpu0, copies0 = sum(cpu_seconds(t.pid) for t in targets), bpf_program_runs("kcopy_switch")
        time.sleep(args.seconds)
        cpu1, sw1, wall1 = cpu_seconds(daemon.pid), switches(daemon.pid), time.monotonic()
        targets_cpu1, copies1 = sum(cpu_seconds(t.pid) for t in targets), bpf_program_runs("kcopy_switch")
        export_cpu1 = thread_cpu_seconds(daemon.pid, "otlp-export")
        entries = {e["pid"]: e for e in ctl("list")}
        stats = [ctl("stats", str(t.pid)) for t in targets]
        status = ctl("status")
    finally:
        stop(targets)
        daemon.terminate()
        daemon.wait(timeout=10)
        if collector:
            collector.terminate()
            collector.wait(timeout=30)
        shutil.rmtree(state, ignore_errors=True)

    elapsed = wall1 - wall0
    cpu_percent = 100 * (cpu1 - cpu0) / elapsed
    copy_percent = None
    if copies0 and copies1:
        copy_percent = 100 * (copies1[1] - copies0[1]) / 1e9 / elapsed
    if not verbose:
        return cpu_percent, copy_percent
    rates = [(entries[t.pid]["samples"] - samples0[t.pid]) / elapsed for t in targets]
    print("pyprofd daemon%s: %d targets of %s at %d Hz for %.0f s (%s, Python %s)"
          % (" with the kernel's copies" if copy else "", args.targets, args.workload, args.rate, elapsed,
             python.path + (" in " + python.root if python.root else ""),
             entries[targets[0].pid]["python_version"]))
    taken = sum(entries[t.pid]["samples"] - samples0[t.pid] for t in targets)
    print("  daemon CPU                %6.2f %% of one core, %.1f us per sample taken"
          % (cpu_percent, 1e6 * (cpu1 - cpu0) / max(1, taken)))
    print("  daemon wakeups            %6.0f /s (voluntary context switches)" % ((sw1 - sw0) / elapsed))
    if woke:
        print("  only waking, beside them  %s (bench/wake_cost.c)" % woke)
    print("  targets' CPU              %6.2f %% of one core, all %d" % (100 * (targets_cpu1 - targets_cpu0) / elapsed,
                                                                   args.targets))
    if copies0 and copies1 and copies1[0] > copies0[0]:
        runs, ns = copies1[0] - copies0[0], copies1[1] - copies0[1]
        print("  in the targets: copies    %6.3f %% of one core, %.0f switches away /s, %.0f ns each "
              "(the kernel's count)" % (copy_percent, runs / elapsed, ns / runs))
    elif copy and copies0 and copies1:
        paused = sum(s.get("kernel_copy_pauses", 0) for s in stats)
        print("  in the targets: copies     none ran (the kernel's count; kernel_copy_pauses %d)" % paused)
    sched0, sched = status0.get("schedule"), status.get("schedule")
    if sched:
        wakeups = sched["wakeups"] - sched0["wakeups"]
        print("  schedule wakeups          %6.0f /s, %.2f samples each, %d ticks missed"
              % (wakeups / elapsed, (sched["ticks"] - sched0["ticks"]) / max(1, wakeups),
                 sched["missed_ticks"] - sched0["missed_ticks"]))
    print("  per sample                %6.1f us median, %.1f us p99 (median over targets)"
          % (statistics.median(s["sample_us_p50"] for s in stats),
             statistics.median(s["sample_us_p99"] for s in stats)))
    print("  achieved rate             %6.1f Hz mean, %.1f Hz min, %.1f Hz max (asked %d)"
          % (statistics.mean(rates), min(rates), max(rates), args.rate))
    print("  lateness                  %6.1f us p50, %.1f us p99 (median target), %.1f us p99 (worst)"
          % (statistics.median(s["jitter_us_p50"] for s in stats),
             statistics.median(s["jitter_us_p99"] for s in stats),
             max(s["jitter_us_p99"] for s in stats)))
    if sched:
        print("  lateness, every tick      %6.1f us p50, %.1f us p99 (the daemon's last 4096)"
              % (sched["lateness_us_p50"], sched["lateness_us_p99"]))
    print("  missed ticks              %6d" % sum(s["missed_ticks"] for s in stats))
    if sched:
        # What an operator is told: status flags the daemon behind its grid, and the log says when.
        print("  status says behind        %6s (%d episodes; %.1f %% of the ticks due in the last 10 s missed)"
              % ("yes" if sched.get("behind") else "no", sched.get("behind_episodes", 0) -
                 sched0.get("behind_episodes", 0), sched.get("missed_percent", 0.0)))
    # Every counter the engine reports, per sample over the window: new ones show up unasked.
    def counters(s):
        return {k: v for k, v in s.items() if isinstance(v, int) and not isinstance(v, bool)
                and k not in ("pid", "missed_ticks", "cache_bytes", "scratch_bytes")}
    before = {t.pid: counters(stats0[t.pid]) for t in targets}
    after = {t.pid: counters(s) for s, t in zip(stats, targets)}
    total = sum(after[t.pid]["total_samples"] - before[t.pid]["total_samples"] for t in targets)
    print("  engine counters per sample (over the window, all targets):")
    for name in after[targets[0].pid]:
        if name == "total_samples":
            continue
        delta = sum(after[t.pid][name] - before[t.pid].get(name, 0) for t in targets)
        if delta:
            print("    %-28s %10.3f" % (name, delta / max(1, total)))
    print("  daemon RSS                %6.1f MiB" % (status["rss_bytes"] / 2**20))
    if args.otlp:
        e, e0 = status.get("export", {}), status0.get("export", {})
        sent = e.get("bytes_sent", 0) - e0.get("bytes_sent", 0)
        print("  OTLP export to %s every %s: %d samples, %d bytes sent, %d failed requests"
              % (args.otlp, args.interval, e.get("samples_sent", 0) - e0.get("samples_sent", 0), sent,
                 e.get("requests_failed", 0) - e0.get("requests_failed", 0)))
        print("  OTLP sender thread CPU    %6.3f %% of one core (of the daemon's above)"
              % (100 * (export_cpu1 - export_cpu0) / elapsed))
        print("  bytes per target-minute   %6.0f (gzip'd request bodies)"
              % (sent / args.targets / (elapsed / 60)))
    return cpu_percent, copy_percent


def start_export(args, state):
    """The collector asked for, and the daemon's options to export to it."""
    collector = None
    if args.collector:
        port = free_port()
        conf = os.path.join(state, "collector.yaml")
        with open(conf, "w") as f:
            f.write(COLLECTOR_CONFIG % {"port": port, "verbosity": "basic"})
        collector = subprocess.Popen([args.collector, "--config=file:" + conf,
                                      "--feature-gates=service.profilesSupport"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        args.otlp = "http://127.0.0.1:%d" % port
        for _ in range(600):
            if port_open(port):
                break
            time.sleep(0.1)
    if not args.otlp:
        return collector, []
    conf = os.path.join(state, "pyprofd.conf")
    with open(conf, "w") as f:
        f.write("[export.otlp]\nendpoint = %s\ninterval = %s\n" % (args.otlp, args.interval))
    return collector, ["--config", conf]


def bench_tachyon(args, python, verbose):
    """CPython's own sampler, one CLI per target, as a host would run it without a daemon:
    the CPU % of one core of all copies, None when they did not start."""
    out = tempfile.mkdtemp(prefix="pyprofd-bench-tachyon.")
    targets, samplers = [], []
    try:
        targets = start_targets(python, args.targets, name=args.workload)
        for i, t in enumerate(targets):
            samplers.append(python.popen(
                ["-m", "profiling.sampling", "attach", "-a", "-r", str(args.rate),
                 "-d", str(int(args.seconds) + 6), "--collapsed", "-o", os.path.join(out, "%d.txt" % i),
                 str(t.pid)], binds=[out], stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL))
        time.sleep(3.0)  # imported, attached, steady
        live = [s for s in samplers if s.poll() is None]
        if len(live) < len(samplers):
            print("CPython's sampler: %d of %d copies did not start; no comparison"
                  % (len(samplers) - len(live), len(samplers)))
            return None
        cpu0 = sum(cpu_seconds(s.pid) for s in samplers)
        targets_cpu0 = sum(cpu_seconds(t.pid) for t in targets)
        wall0 = time.monotonic()
        time.sleep(args.seconds)
        cpu1 = sum(cpu_seconds(s.pid) for s in samplers)
        targets_cpu1 = sum(cpu_seconds(t.pid) for t in targets)
        wall1 = time.monotonic()
        rss = sum(proc_status(s.pid, "VmRSS") for s in samplers)
    finally:
        stop(samplers)
        stop(targets)
        shutil.rmtree(out, ignore_errors=True)
    elapsed = wall1 - wall0
    cpu_percent = 100 * (cpu1 - cpu0) / elapsed
    if not verbose:
        return cpu_percent
    print("CPython %s's own sampler: %d copies of `python3.%d -m profiling.sampling attach -a -r %d`"
          % ("%d.%d.%d" % (python.major, python.minor, python.micro), args.targets, python.minor,
             args.rate))
    print("  CPU of all copies         %6.2f %% of one core" % cpu_percent)
    print("  targets' CPU              %6.2f %% of one core, all %d" % (100 * (targets_cpu1 - targets_cpu0) / elapsed,
                                                                   args.targets))
    print("  RSS of all copies         %6.1f MiB" % (rss / 1024))
    return cpu_percent


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pyprofd", default="build/pyprofd")
    ap.add_argument("--ctl", default="build/pyprofd-ctl")
    ap.add_argument("--targets", type=int, default=10)
    ap.add_argument("--rate", type=int, default=100)
    ap.add_argument("--nice", type=int, default=0,
                    help="the daemon's nice value (the installed unit's is -10)")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--no-tachyon", action="store_true", help="leave CPython's sampler out")
    ap.add_argument("--workload", default="service4.py",
                    help="the targets' script, of bench/workloads/ (handoff.py: what the kernel's copies "
                         "would cost a process that switches tens of thousands of times a second)")
    ap.add_argument("--collector", help="an OpenTelemetry Collector binary to run and export to")
    ap.add_argument("--otlp", help="export to this OTLP/HTTP endpoint")
    ap.add_argument("--interval", default="15s", help="the export interval")
    ap.add_argument("--waker", help="bench/wake_cost.c built (default: beside --pyprofd, when there): "
                    "what only waking at the same rate costs beside the same targets")
    ap.add_argument("--context", choices=("off", "on", "both"), default="off",
                    help="attach with --context otel --context-label route (with --workload spans4.py: "
                         "every request a span with a route); both: rounds without and with, in turn")
    ap.add_argument("--native", choices=("off", "on", "both"), default="off",
                    help="attach with --native (the C frames of waiting threads); both: rounds without and "
                         "with, in turn")
    ap.add_argument("--no-copies", action="store_true", help="leave out the rounds with the kernel's copies")
    ap.add_argument("--rounds", type=int, default=3,
                    help="measure the daemon and CPython's sampler this many times, alternating")
    args = ap.parse_args()
    # What attach is given besides the rate; with "both", the one compared round by round.
    options = {"context": ["--context", "otel", "--context-label", "route"], "native": ["--native"]}
    always = [a for name, extra in options.items() if getattr(args, name) == "on" for a in extra]
    compared = [name for name in options if getattr(args, name) == "both"]
    if len(compared) > 1:
        sys.exit("daemon.py: compare one of --context and --native at a time")
    args.attach_extra = always
    if args.waker is None:
        beside = os.path.join(os.path.dirname(args.pyprofd), "bench", "wake_cost")
        args.waker = beside if os.access(beside, os.X_OK) else None

    pys = pythons.find()
    python = pythons.newest(pys, 15) or pythons.newest(pys)
    if not python:
        sys.exit("no CPython found")
    tachyon = python.minor >= 15 and not args.no_tachyon
    ours, copied, copies, theirs = [], [], [], []
    with_option = []
    for round_ in range(max(1, args.rounds)):
        verbose = round_ == 0
        ours.append(bench_pyprofd(args, python, verbose)[0])
        if compared:
            # The same targets sampled with the option, beside the round without.
            args.attach_extra = always + options[compared[0]]
            with_option.append(bench_pyprofd(args, python, verbose)[0])
            args.attach_extra = always
            print("  round %d: %s off %5.2f %%, on %5.2f %% (%+.1f %%)"
                  % (round_ + 1, compared[0], ours[-1], with_option[-1], 100 * (with_option[-1] / ours[-1] - 1)),
                  flush=True)
        if args.rounds > 1 and not args.no_copies:
            # The same with the kernel's copies: what the daemon no longer reads, and what the targets pay.
            with BpfStats():
                cpu, copy = bench_pyprofd(args, python, verbose, copy=True)
            copied.append(cpu)
            copies.append(copy or 0.0)
        theirs.append(bench_tachyon(args, python, verbose) if tachyon else None)
        if args.rounds > 1 and args.no_copies:
            print("  round %d: pyprofd %5.2f %%" % (round_ + 1, ours[-1]), flush=True)
        elif args.rounds > 1:
            print("  round %d: pyprofd %5.2f %% (with the kernel's copies %.2f %%, and %.2f %% in the targets "
                  "for them)%s" % (round_ + 1, ours[-1], copied[-1], copies[-1],
                                   "" if theirs[-1] is None else
                  ", CPython's sampler %5.2f %% (%.2f of it)" % (theirs[-1], ours[-1] / theirs[-1])),
                  flush=True)
    if with_option:
        off, on = statistics.median(ours), statistics.median(with_option)
        print("daemon CPU over %d rounds: without %s median %.2f %% (%.2f-%.2f), with it %.2f %% "
              "(%.2f-%.2f): %+.1f %%" % (len(ours), compared[0], off, min(ours), max(ours), on, min(with_option),
                                        max(with_option), 100 * (on / off - 1)))
    if args.rounds > 1:
        measured = [t for t in theirs if t is not None]
        totals = [a + b for a, b in zip(copied, copies)]
        print("daemon CPU over %d rounds: pyprofd median %.2f %% (%.2f-%.2f)%s"
              % (len(ours), statistics.median(ours), min(ours), max(ours), "" if not measured else
                 ", CPython's sampler median %.2f %% (%.2f-%.2f)"
                 % (statistics.median(measured), min(measured), max(measured))))
        if copied:
            print("with the kernel's copies: the daemon median %.2f %% (%.2f-%.2f), and with what they cost the "
                  "targets %.2f %% (%.2f-%.2f)"
                  % (statistics.median(copied), min(copied), max(copied), statistics.median(totals),
                     min(totals), max(totals)))


if __name__ == "__main__":
    main()
