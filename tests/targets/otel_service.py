"""A service traced by the real OpenTelemetry SDK, for the context tests.

    python otel_service.py REPORT ENDPOINT

Handles requests one after another on two threads: each request is a
span ("checkout") in which checkout_compute burns the CPU for about 30 ms;
between requests, outside any span, outside_work burns as long.  Spans go
to ENDPOINT (an OTLP/HTTP collector) through the SDK's batch processor.
REPORT once the first spans ran: {"pid", "version"}; every request's
trace and span ids are appended to REPORT.spans as "TRACE SPAN" lines
(lowercase hex), once the span ended.

Must run unchanged on CPython 3.8 through 3.15: no syntax newer than 3.8.
"""
import json
import os
import sys
import threading
import time

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

REPORT = sys.argv[1]
ENDPOINT = sys.argv[2].rstrip("/")

provider = TracerProvider(resource=Resource.create({"service.name": "pyprofd-otel-test"}))
provider.add_span_processor(
    BatchSpanProcessor(OTLPSpanExporter(endpoint=ENDPOINT + "/v1/traces"), schedule_delay_millis=500)
)
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("pyprofd.tests")
spans_lock = threading.Lock()


def burn(seconds):
    end = time.monotonic() + seconds
    total = 0
    while time.monotonic() < end:
        for i in range(500):
            total += i * i
    return total


def checkout_compute():
    return burn(0.03)


def outside_work():
    return burn(0.03)


def serve():
    while True:
        with tracer.start_as_current_span("checkout") as span:
            checkout_compute()
            ctx = span.get_span_context()
        with spans_lock, open(REPORT + ".spans", "a") as f:
            f.write("%032x %016x\n" % (ctx.trace_id, ctx.span_id))
        outside_work()


for _ in range(2):
    threading.Thread(target=serve, daemon=True).start()
time.sleep(0.2)
tmp = REPORT + ".tmp"
with open(tmp, "w") as f:
    json.dump({"pid": os.getpid(), "version": "%d.%d" % sys.version_info[:2]}, f)
os.rename(tmp, REPORT)
while True:
    time.sleep(1)
