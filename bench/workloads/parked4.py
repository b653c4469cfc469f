"""Benchmark workload for the daemon's floor: 4 threads parked a few frames deep that never wake,
so nothing of the process runs between samples and none is read: what a sample costs beyond its
reads (the wakeup, the kernel's look, the sample kept, its bookkeeping)."""
import threading
import time


def park(depth):
    if depth:
        return park(depth - 1)
    while True:
        time.sleep(3600)


for depth in range(5, 8):
    threading.Thread(target=park, args=(depth,), daemon=True).start()
park(4)
