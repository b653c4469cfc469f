"""bench/context.py's target: service4's four threads, each request inside
an OpenTelemetry span (the real SDK, no exporter) with a route ContextVar
set, when the SDK can be imported; else the same requests with the route
alone.  argv[1]: a report file written once the threads run.
"""
import contextvars
import json
import os
import sys
import threading
import time

route = contextvars.ContextVar("route")
try:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider())
    tracer = trace.get_tracer("bench")
except ImportError:
    tracer = None


def parse(n):
    return sum(int(x) for x in ("%d" % i for i in range(n)))


def work(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


def handle(i):
    token = route.set("/r%d" % (i % 8))
    try:
        parse(300)
        work(3000)
    finally:
        route.reset(token)


def serve():
    i = 0
    while True:
        if tracer is not None:
            with tracer.start_as_current_span("request"):
                handle(i)
        else:
            handle(i)
        time.sleep(0.02)
        i += 1


for _ in range(4):
    threading.Thread(target=serve, daemon=True).start()
if len(sys.argv) > 1:
    with open(sys.argv[1] + ".tmp", "w") as f:
        json.dump({"pid": os.getpid(), "otel": tracer is not None}, f)
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    time.sleep(1)
