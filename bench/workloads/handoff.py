"""Benchmark workload for the kernel's copies: two threads handing a token back and forth as fast as
they can, each waiting on its own semaphore (every handoff a switch away of each, tens of thousands a
second), while the main thread sleeps.  What a process whose threads hand work to each other costs
the sampler, and what the sampler would cost it at each of its switches."""
import threading
import time


def ping(mine, theirs):
    while True:
        mine.acquire()
        theirs.release()


first, second = threading.Semaphore(0), threading.Semaphore(0)
threading.Thread(target=ping, args=(first, second), daemon=True).start()
threading.Thread(target=ping, args=(second, first), daemon=True).start()
first.release()
while True:
    time.sleep(3600)
