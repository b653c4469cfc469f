"""Benchmark workload: a 900-deep recursion that sleeps at the bottom."""
import sys
import time


def factorial(n):
    if n <= 1:
        while True:
            time.sleep(1)
    return n * factorial(n - 1)


if __name__ == "__main__":
    sys.setrecursionlimit(5000)
    factorial(900)
