"""Benchmark workload for the daemon: 4 threads, each a loop of parsing, CPU work and 20 ms sleeps
(about a tenth of a core per process: ten of them leave the host room to breathe)."""
import json
import threading
import time


def parse(blob):
    return json.loads(blob)


def crunch(seed):
    total = 0
    for i in range(3000):
        total = (total * 31 + i + seed) % 1000003
    return total


def handle(seed, blob):
    data = parse(blob)
    return crunch(seed + len(data))


def worker(seed):
    blob = json.dumps({"k%d" % i: list(range(i % 7)) for i in range(50)})
    while True:
        handle(seed, blob)
        time.sleep(0.02)


if __name__ == "__main__":
    for seed in range(3):
        threading.Thread(target=worker, args=(seed,), daemon=True).start()
    worker(99)
