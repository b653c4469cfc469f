"""Soak workload: a quiet service of 3 threads whose requests take a few hundred
stacks in turn (handlers at recursion depths 1 to 12), with 50 ms sleeps (about
2 % of a core per process: ten of them for half an hour leave the host alone).

With --new-code, one thread's every request runs a function compiled for it
alone (a new name, file and code object each time, as a templating engine or
a plugin host makes them, each about a millisecond of work), so the stacks,
frames and strings the daemon sees never stop being new."""
import itertools
import json
import sys
import threading
import time


def parse(blob):
    return json.loads(blob)


def render(data):
    return ",".join("%s=%d" % (k, len(v)) for k, v in sorted(data.items()))


def checksum(n):
    total = 0
    for i in range(n):
        total = (total * 31 + i) % 1000003
    return total


def descend(depth, step):
    if depth > 0:
        return descend(depth - 1, step)
    return step(40)


def handle_get(depth, blob):
    return descend(depth, lambda n: len(render(parse(blob))))


def handle_post(depth, blob):
    return descend(depth, checksum)


def handle_list(depth, blob):
    return descend(depth, lambda n: sum(len(v) for v in parse(blob).values()))


HANDLERS = (handle_get, handle_post, handle_list)


def worker(seed):
    blob = json.dumps({"k%d" % i: list(range(i % 7)) for i in range(20)})
    n = seed
    while True:
        HANDLERS[n % len(HANDLERS)](1 + n % 12, blob)
        n += 7
        time.sleep(0.05)


def new_code_worker():
    for n in itertools.count():
        source = "def render_%d(k):\n    return sum(i * k for i in range(20000))\n" % n
        scope = {}
        exec(compile(source, "<template %d>" % n, "exec"), scope)
        descend(n % 12, scope["render_%d" % n])
        time.sleep(0.05)


if __name__ == "__main__":
    for seed in range(2):
        threading.Thread(target=worker, args=(seed,), daemon=True).start()
    if "--new-code" in sys.argv[1:]:
        new_code_worker()
    worker(2)
