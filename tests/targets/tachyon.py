"""CPython's own sampler (3.15's _remote_debugging, the engine of
`python -m profiling.sampling`, frame cache on) sampling a callgraph.py
process back to back, as a second profiler of the same process would, and
counting the stacks it reads that the call graph does not allow.

    python3.15 tachyon.py PID CALLGRAPH SECONDS REPORT

REPORT gets {"samples", "errors", "pairs", "impossible": [up to 10 pairs]}.
"""
import json
import os
import sys
import time

import _remote_debugging


def main(pid, callgraph, seconds, report):
    sys.path.insert(0, os.path.dirname(callgraph))
    sys.dont_write_bytecode = True  # the tests' directory stays as it is
    import callgraph as cg
    edges = cg.EDGES
    unwinder = _remote_debugging.RemoteUnwinder(pid, all_threads=True, cache_frames=True)
    samples = errors = pairs = 0
    impossible = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            interps = unwinder.get_stack_trace()
        except (RuntimeError, OSError, UnicodeDecodeError):
            errors += 1  # a read the stack moved under: CPython's sampler reports it so
            continue
        samples += 1
        for interp in interps:
            for thread in interp.threads:
                callee = None
                for frame in thread.frame_info:  # innermost first
                    name = None
                    if frame.filename.endswith("callgraph.py"):
                        name = frame.funcname.rsplit(".", 1)[-1]
                    if name in edges and callee in edges:
                        pairs += 1
                        if callee not in edges[name] and len(impossible) < 10:
                            impossible.append([name, callee])
                    callee = name
    tmp = report + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"samples": samples, "errors": errors, "pairs": pairs,
                   "impossible": impossible}, f)
    os.rename(tmp, report)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4])
