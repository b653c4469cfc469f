"""A service with a pool of worker processes, as a web service keeps one.

    python pool.py METHOD REPORT_PATH WORKERS [MARKER...]

MARKER arguments are ignored: they name the process for the rules.

METHOD is the multiprocessing start method of the pool: `fork`, `spawn` or
`forkserver` (with forkserver the workers are the server's children, and the
server the service's).  Once every worker runs, {"service": pid, "workers":
[pid, ...], "method": METHOD} is written to REPORT_PATH.  All idle until
killed.

Runs on CPython 3.8 through 3.15.
"""

import json
import multiprocessing
import os
import sys
import time


def announce(queue):
    queue.put(os.getpid())


def idle():
    while True:
        time.sleep(0.01)


def report(path, workers, method):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"service": os.getpid(), "workers": workers, "method": method}, f)
    os.rename(tmp, path)


def main():
    method, path, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ctx = multiprocessing.get_context(method)
    queue = ctx.Queue()
    pool = ctx.Pool(count, initializer=announce, initargs=(queue,))
    workers = sorted(queue.get(timeout=60) for _ in range(count))
    report(path, workers, method)
    idle()
    pool.terminate()


if __name__ == "__main__":
    main()
