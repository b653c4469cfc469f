"""A program whose call graph is known: only the caller -> callee pairs in
EDGES exist.  Stacks unwind and rewind constantly (recursion up and down,
short calls), and worker threads start and end, so a sampler that mixes two
moments of a stack would show a pair that cannot exist.

    python callgraph.py REPORT    (runs until killed; writes EDGES to REPORT as JSON once warm)
    python callgraph.py --naps REPORT  (the same, every thread napping between calls: the
                                  process falls quiet many times a second, its stacks elsewhere each time)
    python callgraph.py --edges   (prints EDGES as JSON)
"""
import json
import os
import sys
import threading
import time

# Iterations of busy work in every function: calls come every few microseconds.
WORK = 100
# Seconds each thread sleeps between two rounds of calls (--naps): few enough switches away between
# samples that the kernel's copies of the process pay (view.c), and go on.
NAP = 0.0

EDGES = {
    "<module>": ["main"],
    "main": ["spawn", "driver", "<listcomp>"],
    "<listcomp>": [],
    "spawn": [],
    "worker": ["alpha", "beta"],
    "driver": ["alpha", "beta", "climb", "ticker"],
    "ticker": [],
    "alpha": ["gamma"],
    "beta": ["delta"],
    "gamma": ["leaf_g"],
    "delta": ["leaf_d"],
    "leaf_g": [],
    "leaf_d": ["<genexpr>"],
    "<genexpr>": [],
    "climb": ["climb", "summit"],
    "summit": [],
}


def leaf_g(x):
    for _ in range(WORK):
        x += 1
    return sum(range(x % 50))


def leaf_d(x):
    for _ in range(WORK):
        x += 1
    return "".join(str(i) for i in range(x % 7))


def gamma(x):
    for _ in range(WORK):
        x += 1
    return leaf_g(x) + leaf_g(x + 1)


def delta(x):
    for _ in range(WORK):
        x += 1
    return len(leaf_d(x))


def alpha(x):
    for _ in range(WORK):
        x += 1
    return gamma(x)


def beta(x):
    for _ in range(WORK):
        x += 1
    return delta(x)


def summit(x):
    for _ in range(WORK):
        x += 1
    return x * 2


def climb(depth, x):
    for _ in range(WORK):
        x += 1
    if depth == 0:
        return summit(x)
    return climb(depth - 1, x + 1)


def ticker(n):
    for k in range(n):
        yield k


def driver(i):
    alpha(i)
    beta(i)
    climb(i % 40, i)
    # A generator yields to its caller: its frame, read as it yields, has no caller.
    for _ in ticker(WORK):
        pass


def worker(n):
    for i in range(n):
        alpha(i)
        beta(i)
        if NAP:
            time.sleep(NAP)


def spawn(i):
    t = threading.Thread(target=worker, args=(200 + i % 300,))
    t.start()
    return t


def main(report):
    threads = []
    i = 0
    while True:
        i += 1
        driver(i)
        if NAP:
            time.sleep(NAP)
        if i % 500 == 0:
            threads = [t for t in threads if t.is_alive()]
            if len(threads) < 4:
                threads.append(spawn(i))
        if i == 1000 and report:
            with open(report + ".tmp", "w") as f:
                json.dump({"edges": EDGES}, f)
            os.rename(report + ".tmp", report)
        if i % 2000 == 0:
            time.sleep(0.001)


if __name__ == "__main__":
    if sys.argv[1:] == ["--edges"]:
        print(json.dumps(EDGES))
    elif sys.argv[1:2] == ["--naps"]:
        NAP = 0.002
        main(sys.argv[2] if len(sys.argv) > 2 else None)
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else None)
