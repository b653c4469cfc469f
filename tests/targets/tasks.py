"""An asyncio program whose task tree is known, for async-aware dumps.

    python tasks.py REPORT [BULK] [MODE]

Builds nested tasks, a TaskGroup (3.11+), gather, a task awaiting a task,
wait_for and shield of a task, a task awaiting a future another thread holds,
cancelled and finished tasks (left out: they are done), and BULK (default 0)
tasks parked on one future.  Once every task is parked it writes REPORT:
each pending task with its coroutine chain as the program sees it (walking
cr_await from Task.get_coro(), innermost first, with Task.get_stack()'s
outermost frame), the task its construction says awaits it, and on 3.14+
what asyncio.capture_call_graph says awaits it.  Then the main task spins
on the loop's thread (MODE "spin", the default: it is the running task) or
parks too (MODE "park").
"""
import asyncio
import json
import os
import sys
import threading

REPORT = sys.argv[1]
BULK = int(sys.argv[2]) if len(sys.argv) > 2 else 0
MODE = sys.argv[3] if len(sys.argv) > 3 else "spin"

forever = None       # a future nothing sets
expected = {}        # task name -> name of the task its construction awaits it from
held = []            # done tasks kept alive: a sampler must still leave them out


async def leaf():
    await forever


async def inner():
    await leaf()


async def middle():
    await inner()


async def nest(level):
    if level == 2:
        await middle()
        return
    child = asyncio.get_running_loop().create_task(nest(level + 1), name=f"nest-{level + 1}")
    expected[f"nest-{level + 1}"] = f"nest-{level}"
    await child


async def tg_parent():
    async with asyncio.TaskGroup() as tg:
        for i in (1, 2):
            tg.create_task(middle(), name=f"tg-child-{i}")
            expected[f"tg-child-{i}"] = "tg-parent"


async def gather_parent():
    me = asyncio.current_task().get_name()
    children = [asyncio.ensure_future(leaf()), asyncio.ensure_future(inner())]
    for c in children:
        expected[c.get_name()] = me
    await asyncio.gather(*children)


async def awaiter():
    t = asyncio.get_running_loop().create_task(inner(), name="awaited")
    expected["awaited"] = "awaiter"
    await t


async def wait_for_parent():
    t = asyncio.get_running_loop().create_task(leaf(), name="waited-for")
    expected["waited-for"] = "wait-for-parent"
    await asyncio.wait_for(t, timeout=3600)


async def shield_parent():
    t = asyncio.get_running_loop().create_task(middle(), name="shielded")
    expected["shielded"] = "shield-parent"
    await asyncio.shield(t)


async def thread_waiter(fut):
    await fut


async def finishes():
    return 1


def chain(task):
    """The coroutine chain of a task, innermost first: (qualname, line)."""
    out = []
    coro = task.get_coro()
    while coro is not None and hasattr(coro, "cr_frame") and coro.cr_frame is not None:
        out.append([coro.cr_code.co_qualname, coro.cr_frame.f_lineno])
        coro = coro.cr_await
    out.reverse()
    return out


def call_graph_awaiters(task):
    capture = getattr(asyncio, "capture_call_graph", None)
    if capture is None:
        return None
    graph = capture(task)
    return sorted(a.future.get_name() for a in graph.awaited_by if isinstance(a.future, asyncio.Task))


def line_of(mark):
    """The line of this file that ends with mark."""
    with open(__file__) as f:
        for n, text in enumerate(f, 1):
            if text.rstrip().endswith(mark) and "line_of" not in text:
                return n
    raise LookupError(mark)


def spin():
    while True: pass  # noqa: E701 -- one line: the sample's line whatever it lands on


async def main():
    global forever
    loop = asyncio.get_running_loop()
    forever = loop.create_future()
    me = asyncio.current_task()
    me.set_name("main")
    spawn = loop.create_task
    for name, coro in (("nest-0", nest(0)), ("tg-parent", tg_parent()),
                       ("gather-parent", gather_parent()), ("awaiter", awaiter()),
                       ("wait-for-parent", wait_for_parent()), ("shield-parent", shield_parent())):
        spawn(coro, name=name)
        expected[name] = None
    # A future another thread holds (and would set much later).
    held_by_thread = loop.create_future()
    threading.Thread(target=lambda: threading.Event().wait(3600), daemon=True).start()
    spawn(thread_waiter(held_by_thread), name="thread-waiter")
    expected["thread-waiter"] = None
    # Its own wait: a task cancelled cancels the future it awaits.
    cancelled = spawn(asyncio.sleep(3600), name="cancelled")
    finished = spawn(finishes(), name="finished")
    held.extend([cancelled, finished, held_by_thread])
    for i in range(BULK):
        spawn(leaf(), name=f"bulk-{i}")
        expected[f"bulk-{i}"] = None
    for _ in range(5):
        await asyncio.sleep(0)
    cancelled.cancel()
    for _ in range(5):
        await asyncio.sleep(0)
    assert cancelled.cancelled() and finished.done()
    tasks = []
    for t in asyncio.all_tasks():
        entry = {"name": t.get_name(), "frames": chain(t), "expected_by": expected.get(t.get_name()),
                 "stack_outer": [[f.f_code.co_qualname, f.f_lineno] for f in t.get_stack()][-1:]}
        if t is me:
            # It spins: spin() on top of main() at the call below.
            entry["frames"] = ([["spin", spin.__code__.co_firstlineno + 1], ["main", line_of("# spin here")]]
                               if MODE == "spin" else [["main", line_of("# park here")]])
            entry["expected_by"] = None
        awaiters = call_graph_awaiters(t) if t is not me else []
        if awaiters is not None:
            entry["call_graph_awaited_by"] = awaiters
        tasks.append(entry)
    tmp = REPORT + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"pid": os.getpid(), "version": list(sys.version_info[:2]), "tasks": tasks}, f)
    os.rename(tmp, REPORT)
    if MODE == "spin":
        spin()  # spin here
    await forever  # park here


asyncio.run(main())
