"""bench/context.py's target: spans4's four threads and requests, each
request published as OpenTelemetry's thread record (OTEP 4947) by the test
publisher library (tests/otel, argv[2]) with its route as an attribute, as
an SDK with a native part would; no ContextVar.  argv[1]: a report file
written once the threads run.
"""
import ctypes
import json
import os
import sys
import threading
import time

lib = ctypes.CDLL(sys.argv[2])
lib.otel_attach.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32]
lib.otel_publish_process.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_uint32]
keys = (ctypes.c_char_p * 1)(b"route")
assert lib.otel_publish_process(b"records4", keys, 1) == 0


def parse(n):
    return sum(int(x) for x in ("%d" % i for i in range(n)))


def work(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


def serve(k):
    i = 0
    while True:
        route = b"/r%d" % (i % 8)
        attrs = bytes([0, len(route)]) + route
        trace = os.urandom(16)
        assert lib.otel_attach(trace, trace[:8], attrs, len(attrs)) == 0
        parse(300)
        work(3000)
        lib.otel_detach()
        time.sleep(0.02)
        i += 1


for k in range(4):
    threading.Thread(target=serve, args=(k,), daemon=True).start()
with open(sys.argv[1] + ".tmp", "w") as f:
    json.dump({"pid": os.getpid(), "otel": True}, f)
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    time.sleep(1)
