"""Threads each inside a request context of its own, for the context tests.

    python contexts.py REPORT

Each thread sets ContextVars named "route" and "tenant" (values a str, an
int, a str past pyprofd's 63 bytes, a list pyprofd takes no label from)
and then spins or sleeps inside them; one thread sets none.  Where the
OpenTelemetry SDK can be imported, one thread spins inside a span of its
own and another inside a child span of it.  Decoy variables of the same
kinds and many others fill each context, so a reader must find the right
ones in a HAMT of more than one level.  REPORT, once every thread is
inside its context: {"pid", "version", "otel", "threads": {native id:
{"route", "tenant", "trace_id", "span_id"}}} (absent keys: no value).

Must run unchanged on CPython 3.8 through 3.15: no syntax newer than 3.8.
"""
import contextvars
import json
import os
import sys
import threading
import time

REPORT = sys.argv[1]
route = contextvars.ContextVar("route")
tenant = contextvars.ContextVar("tenant")
# Other variables, some named like the wanted ones' prefixes: never labels.
decoys = [contextvars.ContextVar("decoy%d" % i) for i in range(40)]
route_prefix = contextvars.ContextVar("rout")

try:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider())
    tracer = trace.get_tracer("contexts")
except ImportError:
    tracer = None

lock = threading.Lock()
expected = {}
ready = threading.Barrier(1)  # replaced below once the count is known


def spin():
    while True:
        sum(range(1000))


def nap():
    while True:
        time.sleep(0.01)


def fill():
    for i, d in enumerate(decoys):
        d.set("decoy-%d" % i)
    route_prefix.set("/not-a-label")


def serve(name, route_value, tenant_value, body, spanned):
    fill()
    want = {}
    if route_value is not None:
        route.set(route_value)
        if isinstance(route_value, (str, int)):
            want["route"] = route_value if isinstance(route_value, str) else str(route_value)
            if isinstance(route_value, str):
                want["route"] = route_value.encode()[:63].decode("utf-8", "ignore")
    if tenant_value is not None:
        tenant.set(tenant_value)
        want["tenant"] = str(tenant_value)

    def run():
        with lock:
            expected[str(threading.get_native_id())] = want
        ready.wait()
        body()

    if spanned and tracer is not None:
        with tracer.start_as_current_span("outer-" + name) as outer:
            if spanned == "child":
                with tracer.start_as_current_span("inner-" + name) as inner:
                    ctx = inner.get_span_context()
                    want["trace_id"] = "%032x" % ctx.trace_id
                    want["span_id"] = "%016x" % ctx.span_id
                    run()
            else:
                ctx = outer.get_span_context()
                want["trace_id"] = "%032x" % ctx.trace_id
                want["span_id"] = "%016x" % ctx.span_id
                run()
    else:
        run()


plans = [
    ("checkout", "/checkout", 42, spin, "span"),
    ("search", "/search", None, nap, "child"),
    ("long", "/" + "\u00e9" * 40, 7, nap, None),
    ("listed", ["not", "a", "label"], 3, spin, None),
    ("bare", None, None, nap, None),
]
ready = threading.Barrier(len(plans) + 1)
for plan in plans:
    threading.Thread(target=serve, args=plan, daemon=True).start()
ready.wait()
tmp = REPORT + ".tmp"
with open(tmp, "w") as f:
    json.dump({"pid": os.getpid(), "version": "%d.%d" % sys.version_info[:2],
               "otel": tracer is not None, "threads": expected}, f)
os.rename(tmp, REPORT)
while True:
    time.sleep(0.05)
