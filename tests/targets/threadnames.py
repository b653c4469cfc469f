"""Threads with names of their own, for the thread name tests.

    python threadnames.py REPORT

Two workers named past the kernel's 15 bytes, one named past pyprofd's 63
bytes in characters of two bytes, and a thread started below threading
(no Python name), each busy now and then.  SIGUSR1 renames the second
worker.  REPORT, once all run: {"pid", "version"}.

Must run unchanged on CPython 3.8 through 3.15: no syntax newer than 3.8.
"""
import _thread
import json
import os
import signal
import sys
import threading
import time

REPORT = sys.argv[1]


def work():
    while True:
        sum(range(2000))
        time.sleep(0.002)


workers = [
    threading.Thread(target=work, name="worker-payments-1", daemon=True),
    threading.Thread(target=work, name="worker-payments-2", daemon=True),
    threading.Thread(target=work, name="long-" + "\u00e9" * 40, daemon=True),
]
for t in workers:
    t.start()
_thread.start_new_thread(work, ())


def rename(signum, frame):
    workers[1].name = "renamed-worker-payments-2"


signal.signal(signal.SIGUSR1, rename)
tmp = REPORT + ".tmp"
with open(tmp, "w") as f:
    json.dump({"pid": os.getpid(), "version": "%d.%d" % sys.version_info[:2]}, f)
os.rename(tmp, REPORT)
while True:
    time.sleep(0.05)
