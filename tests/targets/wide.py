"""A program whose profile is large: thousands of functions, each with a long
name in a file with a long name, visited in turn by threads that sleep in
them, so that a few seconds of sampling see thousands of distinct frames
(an answer of all its stacks takes more than ten megabytes).

    python wide.py                 (runs until killed)
    python -c "$(cat wide.py)"     (the same, for a user who cannot read the file)

Must run unchanged on CPython 3.8 through 3.15.
"""
import threading
import time

FUNCTIONS = 8000
THREADS = 16
NAME_PAD = 700
NAP_S = 0.004


def build():
    functions = []
    for i in range(FUNCTIONS):
        name = "visit_%05d_%s" % (i, "w" * NAME_PAD)
        path = "/wide/%05d/%s.py" % (i, "p" * NAME_PAD)
        namespace = {"time": time}
        source = "def %s():\n    time.sleep(%r)\n" % (name, NAP_S)
        exec(compile(source, path, "exec"), namespace)
        functions.append(namespace[name])
    return functions


def walk(functions):
    while True:
        for visit in functions:
            visit()


def main():
    functions = build()
    for t in range(THREADS):
        threading.Thread(target=walk, args=(functions[t::THREADS],), daemon=True).start()
    while True:
        time.sleep(3600)


main()
