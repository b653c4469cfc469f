"""Creates COUNT distinct code objects over time, each run once and freed, so
their addresses are reused by the next ones.  Writes DONE_PATH when finished,
then keeps running the last one.

    python churn_code.py COUNT DONE_PATH
"""
import os
import sys


def main(count, done_path):
    namespace = {}
    for i in range(count):
        source = "def f_%d(n):\n    total = 0\n    for k in range(n):\n        total += k * %d\n    return total\n" % (i, i)
        exec(compile(source, "<churn %d>" % i, "exec"), namespace)
        namespace.pop("f_%d" % i)(2000)
    with open(done_path + ".tmp", "w") as f:
        f.write("%d\n" % count)
    os.rename(done_path + ".tmp", done_path)
    while True:
        pass


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
