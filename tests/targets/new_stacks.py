"""Meets new stacks all the time: COUNT generated pairs of functions,
caller_N calling callee_N (both from a source named <pair N>), each pair run
in turn for about 2 ms, round and round.  A profiler that bounds its caches
forgets them again and again; every stack it keeps must still pair caller_N
with callee_N.  Writes {"count": COUNT} to REPORT_PATH once it runs.

    python new_stacks.py COUNT REPORT_PATH

Must run unchanged on CPython 3.8 through 3.15.
"""
import json
import os
import sys
import time

SOURCE = """
def callee_{n}(until):
    while time.perf_counter() < until:
        pass


def caller_{n}(until):
    callee_{n}(until)
"""


def main(count, report_path):
    namespace = {"time": time}
    callers = []
    for n in range(count):
        exec(compile(SOURCE.format(n=n), "<pair %d>" % n, "exec"), namespace)
        callers.append(namespace["caller_%d" % n])
    with open(report_path + ".tmp", "w") as f:
        json.dump({"count": count}, f)
    os.rename(report_path + ".tmp", report_path)
    while True:
        for caller in callers:
            caller(time.perf_counter() + 0.002)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
