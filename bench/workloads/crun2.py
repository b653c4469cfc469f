"""Benchmark workload for native frames of running threads: two threads that run C and never wait,
one compressing with zlib (the GIL let go meanwhile), one matching a regular expression that
backtracks (the GIL held).  With a path as its argument it writes there, every half second, the
calls each thread has made: what the shots cost the target shows as fewer."""
import json
import os
import re
import sys
import threading
import time
import zlib

DATA = (b"pyprofd shows the C frames of running threads " * 2048 + os.urandom(1 << 15)) * 4
PATTERN = re.compile(r"(a|aa)*b")
TEXT = "a" * 20
done = {"zlib": 0, "re": 0}


def run_zlib():
    while True:
        zlib.compress(DATA, 9)
        done["zlib"] += 1


def run_re():
    while True:
        PATTERN.match(TEXT)
        done["re"] += 1


for f in (run_zlib, run_re):
    threading.Thread(target=f, daemon=True).start()
while True:
    time.sleep(0.5)
    if len(sys.argv) > 1:
        with open(sys.argv[1] + ".tmp", "w") as out:
            json.dump({"at": time.monotonic(), "done": done}, out)
        os.rename(sys.argv[1] + ".tmp", sys.argv[1])
