"""
A service whose native library publishes OpenTelemetry's process context
(OTEP 4719) and a thread record per thread (OTEP 4947), as an SDK with a
native component would: pyprofd reads them from outside.

    python otel_records.py REPORT LIBRARY [dynamic]

Thread k attaches its own trace, span, route and tenant, runs inside_k,
detaches and runs outside_work, over and over.  With "dynamic" the program
runs again with no static TLS to spare, so the library's variable lives in
the thread's DTV.  The report lists each thread's native id and what it
published.
"""
import ctypes
import json
import os
import sys
import threading
import time

REPORT, LIBRARY = sys.argv[1], sys.argv[2]
DYNAMIC = len(sys.argv) > 3 and sys.argv[3] == "dynamic"
TUNABLE = "glibc.rtld.optional_static_tls=0"
if DYNAMIC and os.environ.get("GLIBC_TUNABLES") != TUNABLE:
    os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, GLIBC_TUNABLES=TUNABLE))

lib = ctypes.CDLL(LIBRARY)
lib.otel_attach.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32]
lib.otel_publish_process.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_uint32]
KEYS = [b"route", b"tenant"]
keys = (ctypes.c_char_p * len(KEYS))(*KEYS)
assert lib.otel_publish_process(b"records-service", keys, len(KEYS)) == 0


def attrs(route, tenant):
    out = b""
    for key, value in ((0, route.encode()), (1, tenant.encode())):
        out += bytes([key, len(value)]) + value
    return out


# Each its own innermost frame: a sample's proof tells them apart by their code.
def inside_0():
    return sum(range(40000))


def inside_1():
    return sum(range(40000))


def inside_2():
    return sum(range(40000))


def outside_work():
    return sum(range(10000))


INSIDE = [inside_0, inside_1, inside_2]
published = {}
lock = threading.Lock()


def serve(k):
    trace = bytes.fromhex("%032x" % (0x0ABC0000000000000000000000000000 + k))
    span = bytes.fromhex("%016x" % (0x5000 + k))
    a = attrs("/r%d" % k, str(40 + k))
    with lock:
        published[str(threading.get_native_id())] = {
            "trace_id": trace.hex(), "span_id": span.hex(), "route": "/r%d" % k, "tenant": str(40 + k),
            "function": INSIDE[k].__name__}
    while True:
        assert lib.otel_attach(trace, span, a, len(a)) == 0
        for _ in range(5):
            INSIDE[k]()
        lib.otel_detach()
        outside_work()


for k in range(3):
    threading.Thread(target=serve, args=(k,), name="rec-%d" % k, daemon=True).start()
while len(published) < 3:
    time.sleep(0.01)
tmp = REPORT + ".tmp"
with open(tmp, "w") as f:
    json.dump({"pid": os.getpid(), "version": "%d.%d" % sys.version_info[:2], "threads": published}, f)
os.rename(tmp, REPORT)
while True:
    time.sleep(0.05)
