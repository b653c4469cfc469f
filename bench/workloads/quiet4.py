"""Benchmark workload for the fleet: 4 threads, each a few frames deep, sleeping most of the time
(sampling it costs what a 4-thread service does; twenty of them leave a small host its cores)."""
import threading
import time


def wait_for_work(n):
    if n:
        return wait_for_work(n - 1)
    while True:
        time.sleep(0.01)


def worker(depth):
    wait_for_work(depth)


for i in range(3):
    threading.Thread(target=worker, args=(5 + i,), daemon=True).start()
worker(4)
