"""An asyncio service whose concurrent requests each set a "route".

    python context_routes.py REPORT

Requests come in on one loop, a task each, and each sets the route
ContextVar as it starts: "/burn" requests compute in burn_handler (a CPU
burst, then a yield to the loop, without end), "/wait" requests wait in
wait_handler on a future that never resolves.  Many of each run at once,
so the loop's thread switches between the burning ones while the waiting
ones stay parked.  REPORT once all run: {"pid", "version"}.

Must run unchanged on CPython 3.8 through 3.15: no syntax newer than 3.8.
"""
import asyncio
import contextvars
import json
import os
import sys

REPORT = sys.argv[1]
route = contextvars.ContextVar("route")


def burn_step():
    total = 0
    for i in range(3000):
        total += i * i
    return total


async def burn_handler():
    route.set("/burn")
    while True:
        burn_step()
        await asyncio.sleep(0)


async def wait_handler(never):
    route.set("/wait")
    await never


async def main():
    never = asyncio.get_running_loop().create_future()
    for i in range(8):
        asyncio.ensure_future(wait_handler(never))
        asyncio.ensure_future(burn_handler())
    await asyncio.sleep(0.2)
    tmp = REPORT + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"pid": os.getpid(), "version": "%d.%d" % sys.version_info[:2]}, f)
    os.rename(tmp, REPORT)
    await never


asyncio.run(main())
