"""Benchmark workload: 20 threads mixing CPU work and 100 ms sleeps."""
import threading
import time


def crunch(seed):
    total = 0
    for i in range(20000):
        total = (total * 31 + i + seed) % 1000003
    return total


def worker(seed):
    while True:
        crunch(seed)
        time.sleep(0.1)


if __name__ == "__main__":
    for seed in range(20):
        threading.Thread(target=worker, args=(seed,), daemon=True).start()
    while True:
        time.sleep(1)
