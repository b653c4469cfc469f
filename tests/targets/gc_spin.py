"""Holds the garbage collector open: a gc callback spins, on the CPU and
holding the GIL, inside a collection that main() started.  Writes READY_PATH
once the collection is under way.

    python gc_spin.py READY_PATH
"""
import gc
import os
import sys


def spin_in_collector(ready_path):
    with open(ready_path + ".tmp", "w") as f:
        f.write("collecting\n")
    os.rename(ready_path + ".tmp", ready_path)
    while True:
        pass


def make_callback(ready_path):
    def on_gc(phase, info):
        if phase == "start":
            spin_in_collector(ready_path)
    return on_gc


def main(ready_path):
    gc.callbacks.append(make_callback(ready_path))
    gc.collect()


if __name__ == "__main__":
    main(sys.argv[1])
