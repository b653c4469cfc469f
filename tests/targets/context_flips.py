"""Threads that enter and leave requests back to back, for the context tests.

    python context_flips.py REPORT

Each thread sets the ContextVar "route" to "/even", works in even_work,
resets it, sets it to "/odd", works in odd_work, resets it, without end: a
HAMT is freed and made again every few hundred microseconds, mostly at the
address the last one had.  A sample in even_work must say /even (or no
route), never /odd.  REPORT once they run: {"pid", "version"}.

Must run unchanged on CPython 3.8 through 3.15: no syntax newer than 3.8.
"""
import contextvars
import json
import os
import sys
import threading
import time

REPORT = sys.argv[1]
route = contextvars.ContextVar("route")


def even_work():
    return sum(range(2000))


def odd_work():
    return sum(range(2000))


def flip():
    while True:
        token = route.set("/even")
        even_work()
        route.reset(token)
        token = route.set("/odd")
        odd_work()
        route.reset(token)


for _ in range(2):
    threading.Thread(target=flip, daemon=True).start()
time.sleep(0.1)
tmp = REPORT + ".tmp"
with open(tmp, "w") as f:
    json.dump({"pid": os.getpid(), "version": "%d.%d" % sys.version_info[:2]}, f)
os.rename(tmp, REPORT)
while True:
    time.sleep(0.05)
