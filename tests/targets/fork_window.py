"""A fork's child met before its interpreter cleared its parent's threads.

    python fork_window.py REPORT WINDOW_S SPIN_S

Two threads spin in parent_worker_spin.  The main thread forks the way
os.fork does, but the child holds open, for WINDOW_S seconds, the window
between fork() and PyOS_AfterFork_Child in which its memory still holds the
parent's thread states.  In that window it writes REPORT ({"pid"}); then it
clears them as os.fork's child would, and spins in child_spin for SPIN_S
seconds.  The parent waits for it and sleeps till killed.

Must run unchanged on CPython 3.8 through 3.15: no syntax newer than 3.8.
"""
import ctypes
import json
import os
import sys
import threading
import time

REPORT, WINDOW_S, SPIN_S = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])


def parent_worker_spin(stop):
    while not stop.is_set():
        sum(range(100))


def child_spin(until):
    while time.time() < until:
        sum(range(100))


stop = threading.Event()
workers = [threading.Thread(target=parent_worker_spin, args=(stop,), daemon=True) for _ in range(2)]
for w in workers:
    w.start()
time.sleep(0.2)

api = ctypes.pythonapi
# Calls that hold the GIL.  Before its after-fork the child must never let
# go of it: the GIL's own lock may have been held by a parent's thread at
# the fork, and would never be free again.  os.open and the like let go.
libc = ctypes.PyDLL(None)
report = json.dumps({"pid": os.getpid()}).encode()
tmp, final = (REPORT + ".tmp").encode(), REPORT.encode()
flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
api.PyOS_BeforeFork()
pid = libc.fork()
if pid == 0:
    fd = libc.open(tmp, flags, 0o644)
    libc.write(fd, report, len(report))
    libc.close(fd)
    libc.rename(tmp, final)
    libc.usleep(int(WINDOW_S * 1e6))
    api.PyOS_AfterFork_Child()
    child_spin(time.time() + SPIN_S)
    os._exit(0)
api.PyOS_AfterFork_Parent()
os.waitpid(pid, 0)
stop.set()
while True:
    time.sleep(0.05)
