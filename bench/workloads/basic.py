"""Benchmark workload: a mixed loop that keeps the top of the stack moving."""
import math
import time


def fibonacci(n):
    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)


def trig_leaf():
    total = 0.0
    for i in range(1000):
        total += math.sqrt(i) * math.sin(i)
    return total


def trig_middle():
    return trig_leaf()


def trig_outer():
    return trig_middle()


def text_work():
    words = ("alpha beta gamma delta epsilon " * 20).split()
    return "-".join(reversed(words))


def small_sum():
    return sum(i * i for i in range(200))


def main():
    turn = 0
    while True:
        turn += 1
        if turn % 50 == 0:
            fibonacci(20)
        trig_outer()
        text_work()
        small_sum()
        time.sleep(0.001)


if __name__ == "__main__":
    main()
