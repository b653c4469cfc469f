"""Threads that wait in C, for the native frame tests.

    python waiters.py REPORT

Three threads block for good below a Python call: one in time.sleep, one
in threading.Lock.acquire (a lock held by the main thread), one in a
socket's recv (its peer never writes).  The main thread sleeps too.  REPORT,
once all three wait: {"pid", "version", "threads": {"sleep": TID, "lock":
TID, "recv": TID}}, TID the kernel's id of each.

Must run unchanged on CPython 3.8 through 3.15: no syntax newer than 3.8.
"""
import json
import os
import socket
import sys
import threading
import time

REPORT = sys.argv[1]
ids = {}
started = threading.Barrier(4)
held = threading.Lock()
held.acquire()
quiet, _peer = socket.socketpair()


def in_sleep():
    ids["sleep"] = threading.get_native_id()
    started.wait()
    time.sleep(100000)


def in_lock():
    ids["lock"] = threading.get_native_id()
    started.wait()
    held.acquire()


def in_recv():
    ids["recv"] = threading.get_native_id()
    started.wait()
    quiet.recv(16)


for f in (in_sleep, in_lock, in_recv):
    threading.Thread(target=f, name=f.__name__, daemon=True).start()
started.wait()
# Long enough for each thread to go from the barrier into its wait.
time.sleep(0.3)
tmp = REPORT + ".tmp"
with open(tmp, "w") as f:
    json.dump({"pid": os.getpid(), "version": "%d.%d" % sys.version_info[:2], "threads": ids}, f)
os.rename(tmp, REPORT)
while True:
    time.sleep(100000)
