"""The worst a program can make of two readers, for the per-sample time bound.

    python bound.py REPORT exceptions N
    python bound.py REPORT threads N

exceptions: N threads, each handling an exception in its outermost frame and
running 300 generators each inside the next, none of them handling one, so
exception mode reads the longest chain of exception states there is before
it finds the exception (and the thread is sampled).
threads: N threads, each 100 frames deep, each spinning at its bottom.

Writes {"pid": ...} to REPORT once every thread is in place, then spins.
"""
import json
import os
import sys
import threading

REPORT, KIND, N = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.setrecursionlimit(5000)
ready = threading.Barrier(N + 1)


def spin():
    n = 0
    while True:
        n = (n + 1) % 1000003


def nest(depth):
    if depth:
        yield from nest(depth - 1)
    else:
        ready.wait()
        spin()
        yield


def handling():
    try:
        raise ValueError("handled")
    except ValueError:
        for _ in nest(300):
            pass


def deep(depth):
    if depth:
        return deep(depth - 1)
    ready.wait()
    spin()


work = handling if KIND == "exceptions" else (lambda: deep(100))
for _ in range(N):
    threading.Thread(target=work, daemon=True).start()
ready.wait()
tmp = REPORT + ".tmp"
with open(tmp, "w") as f:
    json.dump({"pid": os.getpid()}, f)
os.rename(tmp, REPORT)
spin()
