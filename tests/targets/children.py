"""A parent that starts one Python child and idles with it.

    python children.py METHOD REPORT_PATH [MARKER...]

MARKER arguments are ignored: they name the process for the rules.

METHOD is how the child is made: `fork` (os.fork, as a pre-forking server
makes its workers), or a multiprocessing start method, `spawn` or
`forkserver` (with forkserver, the server process is the parent's child and
the worker the server's).  Once the child runs, {"parent": pid, "child":
pid, "method": METHOD} is written to REPORT_PATH.  Both idle until killed.

Runs on CPython 3.8 through 3.15.
"""

import json
import multiprocessing
import os
import sys
import time


def idle():
    while True:
        time.sleep(0.01)


def child(ready):
    ready.set()
    idle()


def report(path, parent, child_pid, method):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"parent": parent, "child": child_pid, "method": method}, f)
    os.rename(tmp, path)


def main():
    method, path = sys.argv[1], sys.argv[2]
    if method == "fork":
        pid = os.fork()
        if pid == 0:
            idle()
        report(path, os.getpid(), pid, method)
    else:
        ctx = multiprocessing.get_context(method)
        ready = ctx.Event()
        worker = ctx.Process(target=child, args=(ready,), daemon=True)
        worker.start()
        ready.wait()
        report(path, os.getpid(), worker.pid, method)
    idle()


if __name__ == "__main__":
    main()
