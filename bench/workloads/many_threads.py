"""Benchmark workload: N threads (argv[1], default 10), the main one included, each 8 frames deep,
waking every 100 ms for a little work: a service with a thread pool, cheap enough for 200 of them."""
import sys
import threading
import time


def work():
    return sum(i * i for i in range(50))


def wait_for_work(depth):
    if depth:
        return wait_for_work(depth - 1)
    while True:
        work()
        time.sleep(0.1)


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    for _ in range(n - 1):
        threading.Thread(target=wait_for_work, args=(8,), daemon=True).start()
    wait_for_work(8)
