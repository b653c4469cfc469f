"""Benchmark workload: a recursion DEPTH deep (argv[1], default 900) that sleeps at the bottom."""
import sys
import time


def factorial(n):
    if n <= 1:
        while True:
            time.sleep(1)
    return n * factorial(n - 1)


if __name__ == "__main__":
    depth = int(sys.argv[1]) if len(sys.argv) > 1 else 900
    sys.setrecursionlimit(depth + 100)
    factorial(depth)
