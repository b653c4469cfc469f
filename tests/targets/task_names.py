"""An asyncio service whose task names a profile must keep few.

    python task_names.py REPORT MODE [N]

MODE churn: a service that makes a task per request.  Once the loop runs it
writes REPORT, then waits for the file REPORT.go; then it makes unnamed
tasks without end, a few at a time, each short-lived (handle_request sleeps
a moment), beside one long-lived task it names ("checkout").  Once it has
made N (default 10000) it writes REPORT again, and goes on.  Unnamed tasks
keep asyncio's own names: never asked for (get_name), they stay numbers on
3.12 and newer.

MODE many: N (default 400) tasks parked, each with a name of its own
("job-K"), then REPORT.
"""
import asyncio
import json
import os
import sys

REPORT = sys.argv[1]
MODE = sys.argv[2]
N = int(sys.argv[3]) if len(sys.argv) > 3 else (10000 if MODE == "churn" else 400)


def report(**fields):
    tmp = REPORT + ".tmp"
    with open(tmp, "w") as f:
        json.dump(dict(pid=os.getpid(), **fields), f)
    os.rename(tmp, REPORT)


async def handle_request():
    await asyncio.sleep(0.002)


async def checkout():
    while True:
        await asyncio.sleep(0.01)


async def churn():
    asyncio.create_task(checkout(), name="checkout")
    report(state="ready")
    while not os.path.exists(REPORT + ".go"):
        await asyncio.sleep(0.01)
    made = 0
    while True:
        for _ in range(20):
            asyncio.create_task(handle_request())
        made += 20
        if made == N:
            report(state="made", tasks=made)
        await asyncio.sleep(0.005)


async def job(parked):
    await parked


async def many():
    parked = asyncio.get_running_loop().create_future()
    for k in range(N):
        asyncio.create_task(job(parked), name=f"job-{k}")
    await asyncio.sleep(0)
    report(state="parked", tasks=N)
    await parked


asyncio.run(churn() if MODE == "churn" else many())
