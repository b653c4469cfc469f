#!/usr/bin/env python3
"""Soak the daemon: run it as a host does, for a long while, and watch it.

Starts pyprofd in a temporary state directory with --targets Python targets
(bench/workloads/soak.py, spread over every interpreter found) sampled at
--rate Hz, whose code keeps being new (a function compiled per request in one
thread of each; --same-code runs a fixed set of stacks), and for --minutes
keeps up what a host sees:

  queries  one history query every --query-every seconds, in turn stacks,
           a function table, a diff of two ranges and the processes
  churn    every --churn-every seconds one target is detached and attached
           again, and a short-lived target is attached and killed
  hostile  a few connections that send half a request and stall, and a
           client that asks for the last minute's stacks every few seconds
           and never reads (a new one each --unread-for seconds, as the old
           one leaves)

Every minute it prints the daemon's RSS (as read, and the lowest of the
readings every 5 s in that minute: a leak raises that floor, a query in
flight does not), descriptors and threads, the
sampling rate achieved against the one asked, missed ticks, errors (the
targets', failed requests, warnings in the log), the bytes queued for
clients and what the structures that grow with new stacks hold (status:
the sampled targets' caches, the counts, the history writer's caches, each
beside its bound); at the end the RSS floor at the start, the middle and
the end, its slope over the second half and how far apart its highest and lowest there
are, against their mean.  Prints figures; never passes or fails on them.
"""
import argparse
import itertools
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
from hostile import Daemon, connect, rss_bytes, stacks_query  # noqa: E402
from pythons import interpreters  # noqa: E402

WORKLOAD = os.path.join(HERE, "workloads", "soak.py")


def descriptors(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def threads(pid):
    return len(os.listdir("/proc/%d/task" % pid))


class Soak:
    def __init__(self, args, daemon, pythons):
        self.args, self.d = args, daemon
        self.pythons = itertools.cycle(pythons)
        self.targets = []            # (process, interpreter)
        self.short = []              # short-lived targets: (process, kill at)
        self.failed = 0              # requests that did not succeed
        self.requests = 0
        self.stalled = []            # connections holding half a request
        self.unread = None           # the client that never reads
        self.unread_since = 0
        self.unread_sent = 0
        self.queries = itertools.cycle(["stacks", "table", "diff", "processes"])

    def ctl(self, *argv):
        self.requests += 1
        r = self.d.ctl("--json", *argv)
        if r.returncode != 0:
            self.failed += 1
            return None
        return json.loads(r.stdout) if r.stdout.strip() else {}

    def start_target(self):
        python = next(self.pythons)
        argv = [python, "-I", WORKLOAD] + ([] if self.args.same_code else ["--new-code"])
        return subprocess.Popen(argv), python

    def attach(self, pid, *labels):
        # A new interpreter needs a moment before its runtime can be read.
        for _ in range(50):
            self.requests += 1
            r = self.d.ctl("attach", str(pid), "--rate", str(self.args.rate), "--label", "service=soak",
                           *labels)
            if r.returncode == 0:
                return True
            time.sleep(0.1)
        self.failed += 1
        return False

    def setup(self):
        self.targets = [self.start_target() for _ in range(self.args.targets)]
        for i, (t, _) in enumerate(self.targets):
            self.attach(t.pid, "--label", "slot=%d" % i)

    def query(self):
        kind = next(self.queries)
        if kind == "stacks":
            self.ctl("query", "--label", "service=soak", "--since", "5m", "-o", os.devnull)
        elif kind == "table":
            self.ctl("query", "--since", "1h", "--format", "table", "--limit", "20")
        elif kind == "diff":
            self.ctl("diff", "--label", "service=soak", "--base", "-2m..-1m", "--compare", "-1m..now",
                     "--limit", "20")
        else:
            self.ctl("query", "--format", "processes")

    def churn(self, n):
        t, _ = self.targets[n % len(self.targets)]
        self.ctl("detach", str(t.pid))
        self.attach(t.pid, "--label", "slot=%d" % (n % len(self.targets)))
        p, _ = self.start_target()
        if self.attach(p.pid, "--label", "short=1"):
            self.short.append((p, time.monotonic() + self.args.churn_every / 2))
        else:
            p.kill()
            p.wait()

    def reap_short(self):
        now = time.monotonic()
        for p, when in [s for s in self.short if s[1] <= now]:
            p.kill()
            p.wait()
        self.short = [s for s in self.short if s[1] > now]

    def hostile(self):
        # Half a request, then nothing: the daemon must close them after its request timeout.
        alive = []
        for s in self.stalled:
            try:
                s.send(b"")
                alive.append(s)
            except OSError:
                s.close()
        self.stalled = alive
        while len(self.stalled) < self.args.stalled:
            try:
                s = connect(self.d.sock)
                s.send(b"\x00\x00")
                self.stalled.append(s)
            except OSError:
                break
        # Stacks asked for and never read: the daemon must stop reading it, and hold a bounded
        # amount.  It leaves after a while with its answers unread, and another comes.
        if self.unread is not None and time.monotonic() - self.unread_since >= self.args.unread_for:
            self.unread.close()
            self.unread = None
        if self.unread is None and self.args.unread_for > 0:
            try:
                self.unread = connect(self.d.sock)
                self.unread.setblocking(False)
                self.unread_since = time.monotonic()
            except OSError:
                return
        if self.unread is None:
            return
        try:
            # The last minute's stacks: answers of one size all run long.  Over all
            # the history they would grow with it, and the queue held for this
            # client with them, which would read as the daemon's own growth.
            self.unread.send(stacks_query(self.unread_sent + 1, self.targets[0][0].pid, time.time() - 60))
            self.unread_sent += 1
        except BlockingIOError:
            pass
        except OSError:
            self.unread.close()
            self.unread = None

    def sample_counts(self):
        entries = self.ctl("list") or []
        return {e["pid"]: e for e in entries}

    def missed_ticks(self):
        total = 0
        for t, _ in self.targets:
            s = self.ctl("stats", str(t.pid))
            total += s.get("missed_ticks", 0) if s else 0
        return total

    def warnings(self):
        with open(self.d.log_path, "rb") as f:
            return sum(1 for line in f if b"warn" in line.lower() or b"error" in line.lower())

    def stop(self):
        for s in self.stalled:
            s.close()
        if self.unread:
            self.unread.close()
        for p, _ in self.targets + [(s[0], None) for s in self.short]:
            p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pyprofd", default="build/pyprofd")
    ap.add_argument("--ctl", default="build/pyprofd-ctl")
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--targets", type=int, default=10)
    ap.add_argument("--rate", type=int, default=100)
    ap.add_argument("--query-every", type=float, default=5)
    ap.add_argument("--churn-every", type=float, default=30, help="0: no churn")
    ap.add_argument("--stalled", type=int, default=4, help="connections that stall mid-request")
    ap.add_argument("--unread-for", type=float, default=60,
                    help="seconds a client that never reads stays before another replaces it "
                         "(0: none)")
    ap.add_argument("--same-code", action="store_true",
                    help="the targets run a fixed set of stacks, no new code")
    ap.add_argument("--report-every", type=float, default=60, help="seconds between report lines")
    ap.add_argument("--daemon-arg", action="append", default=[], help="an extra argument for pyprofd")
    args = ap.parse_args()

    # 3.16, when built, is the next version: the daemon refuses it, by design.
    pys = [p[1] for p in interpreters() if p[2] <= 15]
    if not pys:
        sys.exit("no CPython found")
    dir = tempfile.mkdtemp(prefix="pyprofd-soak-")
    d = Daemon(args, dir, args.daemon_arg)
    soak = Soak(args, d, pys)
    rss_at = []  # (minute, the lowest RSS read in that minute, every 5 s)
    seen_rss = []
    bounds = (0, 0)
    highest = {}  # each structure's highest reading
    try:
        soak.setup()
        names = ", ".join(sorted({os.path.basename(p) for _, p in soak.targets}))
        print("pyprofd soak: %d targets at %d Hz on %s, %s; a query every %g s, churn every %g s, "
              "%d stalled connections, %s; %g minutes"
              % (args.targets, args.rate, names,
                 "a fixed set of stacks" if args.same_code else "new code every request of one thread",
                 args.query_every, args.churn_every, args.stalled,
                 "a client that never reads" if args.unread_for > 0 else "no unread client",
                 args.minutes), flush=True)
        print("%6s %9s %9s %5s %4s %13s %7s %7s %7s %6s %8s %7s %9s %9s %9s" % (
            "minute", "rss_kib", "floor_kib", "fds", "thr", "rate_hz", "missed", "t_errs", "failed", "warns",
            "queued", "timeout", "cache_kib", "count_kib", "hcache_kib"), flush=True)
        start = time.monotonic()
        last_report = None
        last = {}
        next_query = next_churn = start
        churns = 0
        while True:
            now = time.monotonic()
            if last_report is None or now - last_report >= args.report_every - 0.01:
                entries = soak.sample_counts()
                status = soak.ctl("status") or {}
                missed = soak.missed_ticks()
                # Per process: an exited target leaving the list takes its errors with it.
                errors = {pid: e.get("errors", 0) for pid, e in entries.items()}
                before = last.get("errors")
                new_errors = sum(n - before.get(pid, 0) for pid, n in errors.items()) if before else 0
                samples = {p.pid: entries.get(p.pid, {}).get("samples", 0) for p, _ in soak.targets}
                if last_report is None:
                    rates = "-"
                else:
                    per = [(samples[p] - last["samples"].get(p, 0)) / (now - last_report)
                           for p in samples]
                    rates = "%.1f/%.1f" % (statistics.mean(per), min(per))
                rss = rss_bytes(d.proc.pid)
                # The floor of the minute: a query answered at the moment of a reading is a
                # passing peak, memory kept for good raises the floor.
                floor = min(seen_rss + [rss])
                seen_rss = []
                minute = (now - start) / 60
                rss_at.append((minute, floor))
                print("%6.1f %9d %9d %5d %4d %13s %7d %7d %7d %6d %8d %7d %9d %9d %9d" % (
                    minute, rss // 1024, floor // 1024, descriptors(d.proc.pid), threads(d.proc.pid), rates,
                    missed - last.get("missed", missed), new_errors,
                    soak.failed, soak.warnings(), status.get("queued_bytes", 0),
                    status.get("connections_timed_out", 0),
                    status.get("cache_bytes", 0) // 1024, status.get("count_bytes", 0) // 1024,
                    status.get("history", {}).get("cache_bytes", 0) // 1024), flush=True)
                bounds = (status.get("cache_budget_bytes", 0),
                          status.get("history", {}).get("cache_budget_bytes", 0))
                for key, value in (("cache", status.get("cache_bytes", 0)),
                                   ("hcache", status.get("history", {}).get("cache_bytes", 0)),
                                   ("count", status.get("count_bytes", 0)),
                                   ("queued", status.get("queued_bytes", 0))):
                    highest[key] = max(highest.get(key, 0), value)
                last = {"samples": samples, "missed": missed, "errors": errors}
                last_report = now
                if minute >= args.minutes - 0.01:
                    break
            if d.proc.poll() is not None:
                sys.exit("the daemon exited (status %s): see %s" % (d.proc.returncode, d.log_path))
            if now >= next_query:
                soak.query()
                soak.hostile()
                next_query += args.query_every
            if args.churn_every > 0 and now >= next_churn and now > start:
                soak.churn(churns)
                churns += 1
                next_churn += args.churn_every
            soak.reap_short()
            wake = min(next_query, last_report + args.report_every)
            if args.churn_every > 0:
                wake = min(wake, next_churn)
            wake = min(wake, time.monotonic() + 5)
            time.sleep(max(0.05, wake - time.monotonic()))
            seen_rss.append(rss_bytes(d.proc.pid))
    finally:
        soak.stop()
        d.stop()
        shutil.rmtree(dir, ignore_errors=True)

    def rss_near(minute):
        return min(rss_at, key=lambda r: abs(r[0] - minute))
    first, mid, end = rss_at[0], rss_near(args.minutes / 2), rss_at[-1]
    half = [r for r in rss_at if r[0] >= args.minutes / 2]
    slope = 0.0
    if len(half) >= 2:
        mx = statistics.mean(m for m, _ in half)
        my = statistics.mean(b for _, b in half)
        den = sum((m - mx) ** 2 for m, _ in half)
        slope = sum((m - mx) * (b - my) for m, b in half) / den if den else 0.0
    level = statistics.mean(b for _, b in half) if half else 0
    spread = (max(b for _, b in half) - min(b for _, b in half)) / level * 100 if level else 0.0
    print("RSS (the floor of each minute) %.1f MiB at minute %.0f, %.1f MiB at minute %.0f, %.1f MiB at minute %.0f; "
          "%.1f KiB per minute over the second half, highest and lowest there %.1f %% apart; "
          "%d requests, %d failed"
          % (first[1] / 2**20, first[0], mid[1] / 2**20, mid[0], end[1] / 2**20, end[0], slope / 1024,
             spread, soak.requests, soak.failed))
    print("bounds: the targets' caches %d KiB (cache_kib), the history writer's %d KiB (hcache_kib)"
          % (bounds[0] // 1024, bounds[1] // 1024))
    print("highest readings: cache_kib %d, hcache_kib %d, count_kib %d, queued %d KiB"
          % (highest.get("cache", 0) // 1024, highest.get("hcache", 0) // 1024, highest.get("count", 0) // 1024,
             highest.get("queued", 0) // 1024))


if __name__ == "__main__":
    main()
