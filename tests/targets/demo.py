"""A small service-like workload for `make demo`; runs until killed.

Every thread does recognizable work in well-named functions, so a dump of it
reads like a dump of a real program: a request loop on the main thread, CPU
work, parsing, sorting with a key function and waiting on I/O in workers.
Runs on CPython 3.8 and newer.
"""

import json
import random
import select
import socket
import threading
import time


def sieve_primes(limit):
    is_prime = bytearray([1]) * (limit + 1)
    is_prime[0:2] = b"\x00\x00"
    for n in range(2, int(limit ** 0.5) + 1):
        if is_prime[n]:
            for multiple in range(n * n, limit + 1, n):
                is_prime[multiple] = 0
    return [n for n in range(limit + 1) if is_prime[n]]


def compute_daily_report():
    while True:
        primes = sieve_primes(200000)
        checksum = sum(p % 97 for p in primes)
        time.sleep(0.01 + checksum % 3 * 0.001)


def parse_batch(raw):
    return [json.loads(line) for line in raw.splitlines()]


def summarize_events(events):
    totals = {}
    for event in events:
        totals[event["kind"]] = totals.get(event["kind"], 0) + event["amount"]
    return totals


def ingest_events():
    kinds = ["click", "view", "purchase", "refund"]
    while True:
        raw = "\n".join(
            json.dumps({"kind": random.choice(kinds), "amount": random.randint(1, 100)})
            for _ in range(2000))
        summarize_events(parse_batch(raw))


def score_entry(entry):
    key, hits, age = entry
    return hits / (1.0 + age) + (len(key) % 7) * 0.01


def refresh_cache():
    entries = [("key-%d" % i, random.randint(0, 1000), random.random() * 60)
               for i in range(20000)]
    while True:
        ranked = sorted(entries, key=score_entry)
        entries = ranked[len(ranked) // 10:] + ranked[:len(ranked) // 10]
        time.sleep(0.05)


def wait_for_upstream(sock):
    readable, _, _ = select.select([sock], [], [], 0.5)
    return bool(readable)


def poll_upstream():
    # A socket nobody writes to: the thread spends its life blocked in select.
    left, right = socket.socketpair()
    try:
        while True:
            wait_for_upstream(left)
    finally:
        left.close()
        right.close()


def handle_request(n):
    time.sleep(0.2)
    return {"request": n, "status": 200}


def serve_forever():
    n = 0
    while True:
        handle_request(n)
        n += 1


def main():
    for target in (compute_daily_report, ingest_events, refresh_cache, poll_upstream):
        threading.Thread(target=target, name=target.__name__, daemon=True).start()
    serve_forever()


if __name__ == "__main__":
    main()
