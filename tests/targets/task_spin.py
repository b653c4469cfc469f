"""Two asyncio tasks that take turns on the loop's thread, beside parked ones.

    python task_spin.py REPORT [PARKED]

Parks PARKED (default 200) tasks on one future, then starts two tasks,
"spin-a" and "spin-b", each running spin(): a burst of calls (spin ->
work -> leaf) then a yield to the loop, without end.  So the loop's thread
nearly always runs one of them, and switches between them thousands of
times a second: a dump reads the thread, then the tasks, while the running
task changes.  Writes REPORT once they run.
"""
import asyncio
import json
import os
import sys

REPORT = sys.argv[1]
PARKED = int(sys.argv[2]) if len(sys.argv) > 2 else 200


def leaf(n):
    total = 0
    for i in range(n):
        total += i
    return total


def work():
    return leaf(200)


async def spin():
    while True:
        for _ in range(5):
            work()
        await asyncio.sleep(0)


async def parked_task(fut):
    await fut


async def main():
    fut = asyncio.get_running_loop().create_future()
    for k in range(PARKED):
        asyncio.create_task(parked_task(fut), name=f"parked-{k}")
    asyncio.create_task(spin(), name="spin-a")
    asyncio.create_task(spin(), name="spin-b")
    await asyncio.sleep(0.1)
    tmp = REPORT + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"pid": os.getpid(), "tasks": len(asyncio.all_tasks())}, f)
    os.rename(tmp, REPORT)
    await fut


asyncio.run(main())
