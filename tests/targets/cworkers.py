"""Threads that run C code without waiting, for the native frame tests.

    python cworkers.py REPORT WORK...

One thread for each WORK named, each calling into C on one line, over and
over: "zlib" compresses a buffer at level 9, "re" matches a pattern that
backtracks in the regular expression engine, "numpy" multiplies two
matrices (numpy's BLAS kept to one thread).  REPORT, once all run:
{"pid", "version", "threads": {WORK: TID}, "lines": {WORK: LINE}}, TID the
kernel's id of the thread, LINE the line of its call.

Must run unchanged on CPython 3.8 through 3.15: no syntax newer than 3.8.
"""
import json
import os
import sys
import threading
import time
import zlib
import re

REPORT = sys.argv[1]
WORKS = sys.argv[2:]
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ids = {}
started = threading.Barrier(len(WORKS) + 1)
DATA = (b"pyprofd shows the C frames of running threads " * 2048 + os.urandom(1 << 15)) * 4
# Each match tries every split of the a's into ones and twos (thousands), all in C.
PATTERN = re.compile(r"(a|aa)*b")
TEXT = "a" * 20


def run_zlib():
    ids["zlib"] = threading.get_native_id()
    started.wait()
    while True:
        zlib.compress(DATA, 9)  # call:zlib


def run_re():
    ids["re"] = threading.get_native_id()
    started.wait()
    while True:
        PATTERN.match(TEXT)  # call:re


def run_numpy():
    import numpy
    a = numpy.random.default_rng(1).random((300, 300))
    ids["numpy"] = threading.get_native_id()
    started.wait()
    while True:
        numpy.matmul(a, a)  # call:numpy


lines = {}
with open(__file__) as f:
    for number, text in enumerate(f, 1):
        if "# call:" in text and "text" not in text:
            lines[text.split("# call:")[1].strip()] = number
for work in WORKS:
    threading.Thread(target=globals()["run_" + work], name=work, daemon=True).start()
started.wait()
time.sleep(0.3)
tmp = REPORT + ".tmp"
with open(tmp, "w") as f:
    json.dump({"pid": os.getpid(), "version": "%d.%d" % sys.version_info[:2], "threads": ids,
               "lines": {w: lines[w] for w in WORKS}}, f)
os.rename(tmp, REPORT)
while True:
    time.sleep(100000)
