"""A chain of asyncio tasks, each awaiting the next: as deep a task tree as a program can make.

    python task_chain.py REPORT [N]

Makes N (default 10000) tasks, task k awaiting task k-1 and the first
awaiting a future nothing sets, writes REPORT once they are all parked, then
spins on the loop so that every sample reads the tasks again.
"""
import asyncio
import json
import os
import sys

REPORT = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 10000


async def link(n, parked):
    if n == 0:
        await parked
    else:
        await asyncio.get_running_loop().create_task(link(n - 1, parked))


async def main():
    loop = asyncio.get_running_loop()
    parked = loop.create_future()
    loop.create_task(link(N, parked))
    while len(asyncio.all_tasks()) < N + 2:
        await asyncio.sleep(0.01)
    tmp = REPORT + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"pid": os.getpid(), "tasks": len(asyncio.all_tasks())}, f)
    os.rename(tmp, REPORT)
    while True:
        await asyncio.sleep(0)


asyncio.run(main())
