"""Threads that spin inside and outside exception handlers, for exception mode.

    python exceptions.py REPORT

spin_in_except spins in an except block, spin_in_finally in a finally block
an exception entered, spin_in_generator_except in an except block of a
generator it iterates; spin_outside never raises, spin_after_handled spins
after its handler ended, spin_in_plain_finally in a finally block entered
without an exception.  Only the first three handle an exception
(sys.exc_info() says so, and REPORT records what each thread's says).
"""
import json
import os
import sys
import threading

REPORT = sys.argv[1]
ready = threading.Barrier(7)
seen = {}


def note(name):
    seen[name] = sys.exc_info()[0] is not None


def spin_in_except():
    try:
        raise ValueError("handled")
    except ValueError:
        note("spin_in_except")
        ready.wait()
        while True: pass  # noqa: E701


def spin_in_finally():
    try:
        try:
            raise KeyError("raised")
        finally:
            note("spin_in_finally")
            ready.wait()
            while True: pass  # noqa: E701
    except KeyError:
        pass


def generator_handler():
    try:
        raise OSError("in a generator")
    except OSError:
        note("spin_in_generator_except")
        ready.wait()
        while True:
            yield 1


def spin_in_generator_except():
    for _ in generator_handler():
        pass


def spin_outside():
    note("spin_outside")
    ready.wait()
    while True: pass  # noqa: E701


def spin_after_handled():
    try:
        raise RuntimeError("over")
    except RuntimeError:
        pass
    note("spin_after_handled")
    ready.wait()
    while True: pass  # noqa: E701


def spin_in_plain_finally():
    try:
        pass
    finally:
        note("spin_in_plain_finally")
        ready.wait()
        while True: pass  # noqa: E701


for f in (spin_in_except, spin_in_finally, spin_in_generator_except, spin_outside,
          spin_after_handled, spin_in_plain_finally):
    threading.Thread(target=f, daemon=True).start()
ready.wait()
tmp = REPORT + ".tmp"
with open(tmp, "w") as f:
    json.dump({"pid": os.getpid(), "handling": seen}, f)
os.rename(tmp, REPORT)
threading.Event().wait()
