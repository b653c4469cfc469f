"""A program that knows where its time goes: it runs three phases in turn,
each for a random while, and measures the CPU time of each (thread_time:
what it runs, which sets each phase's length) and its wall time (what a
sampler of wall time sees: on a loaded machine the phase it was left
waiting in, too).
phase_calls does its work through thousands of short calls per millisecond,
the code whose stack moves while it is read.

    python shares.py REPORT   (runs until killed; writes REPORT as JSON when it
                               starts and at each SIGUSR1, with the CPU seconds
                               spent so far in each phase and in all, and the
                               same in wall time)

The report is written only when asked: a file written every few cycles is a
wait (the file system's) that a sampler sees many times over, and the CPU
time that follows it would count for the report instead of the phase after.
"""
import json
import os
import random
import signal
import sys
import time


def tiny(x):
    return x + 1


def hop(x):
    return tiny(x) + 1


def phase_plain(until):
    x = 0
    while time.thread_time() < until:
        for _ in range(200):
            x += 1
    return x


def phase_calls(until):
    x = 0
    while time.thread_time() < until:
        for _ in range(50):
            x = hop(x)
    return x


def nested(depth, until):
    if depth:
        return nested(depth - 1, until)
    return phase_plain(until)


def phase_deep(until):
    return nested(30, until)


# Short phases: a sampler's samples a millisecond apart fall in phases drawn apart.
PHASES = [("phase_plain", phase_plain, 0.0006), ("phase_calls", phase_calls, 0.0008),
          ("phase_deep", phase_deep, 0.0006)]


def report_write(path, spent, wall):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"spent": spent, "total": time.thread_time(),
                   "spent_wall": wall, "total_wall": time.perf_counter()}, f)
    os.rename(tmp, path)


def below(depth, fn, length):
    """Every phase runs some way down a stack (a deeper stack takes longer to
    read); its time is measured inside, where a sample finds it."""
    if depth:
        return below(depth - 1, fn, length)
    t0, w0 = time.thread_time(), time.perf_counter()
    fn(t0 + length)
    return time.thread_time() - t0, time.perf_counter() - w0


def main(path):
    rng = random.Random(1)
    spent = {name: 0.0 for name, _, _ in PHASES}
    wall = dict(spent)
    # The phase under way when asked is left out of its account: a millisecond at most.
    signal.signal(signal.SIGUSR1, lambda *_: report_write(path, spent, wall))
    report_write(path, spent, wall)
    while True:
        for name, fn, mean in PHASES:
            # Random lengths: no period for a sampler's own to lock onto.
            cpu, elapsed = below(40, fn, rng.uniform(0.5, 1.5) * mean)
            spent[name] += cpu
            wall[name] += elapsed


if __name__ == "__main__":
    main(sys.argv[1])
