"""Target workloads for the end-to-end tests of `pyprofd dump`.

    python stacks.py SCENARIO REPORT_PATH

Builds a known Python stack in one or more threads and parks every one of them
forever.  Once all of them sit still, the stacks as CPython itself sees them
(sys._current_frames, f_back, f_lineno) are written to REPORT_PATH as JSON, so
the tests compare pyprofd's view against the interpreter's own.

Must run unchanged on CPython 3.8 through 3.15: no syntax newer than 3.8.
"""

import asyncio
import functools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

# A blocked thread's innermost frame sits on a source line carrying this mark;
# the reporter waits for that rather than trusting a fixed delay.
BLOCK_MARK = "# BLOCK"

# Sources of code that was not read from a file (exec), by co_filename.
GENERATED_SOURCES = {}


def hold():
    while True:
        time.sleep(3600)  # BLOCK


# --- reporting ---------------------------------------------------------------


def frame_list(frame):
    frames = []
    while frame is not None:
        code = frame.f_code
        frames.append({
            "function": code.co_name,
            "qualname": getattr(code, "co_qualname", None),
            "file": code.co_filename,
            "first_line": code.co_firstlineno,
            # What traceback prints, i.e. CPython's own idea of the line.
            "line": frame.f_lineno,
        })
        frame = frame.f_back
    return frames


def source_line(filename, lineno):
    if lineno is None:
        return ""
    lines = GENERATED_SOURCES.get(filename)
    if lines is None:
        try:
            with open(filename, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (OSError, UnicodeDecodeError):
            return ""
    if 1 <= lineno <= len(lines):
        return lines[lineno - 1]
    return ""


def parked(frames):
    return bool(frames) and BLOCK_MARK in source_line(frames[0]["file"], frames[0]["line"])


def version_string():
    return "%d.%d.%d" % sys.version_info[:3]


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f)


def write_json_atomically(path, obj):
    tmp = path + ".tmp"
    write_json(tmp, obj)
    os.rename(tmp, path)


# Renames the report once the reporter thread is gone from the kernel's task
# list, which happens only after CPython has unlinked its thread state: a
# reader that sees the report never sees the reporter.
RENAME_WHEN_GONE = 'while [ -d "/proc/$1/task/$2" ]; do sleep 0.01; done; exec mv -f -- "$3" "$4"'


def start_reporter(report_path, idents, spinning=(), extra=None):
    """Report the stacks of `idents` once each is parked and stays unchanged.

    Threads in `spinning` never park: they only have to exist, and their
    frames are reported as seen but not waited on.
    """
    idents = list(idents)
    spinning = set(spinning)

    def snapshot():
        current = sys._current_frames()
        try:
            stacks = {}
            for ident in idents:
                frame = current.get(ident)
                if frame is None:
                    return None
                frames = frame_list(frame)
                if ident not in spinning and not parked(frames):
                    return None
                stacks[ident] = frames
            return stacks
        finally:
            del current

    def settled(a, b):
        return all(ident in spinning or a[ident] == b[ident] for ident in idents)

    def run():
        previous, still = None, 0
        # Three equal looks in a row: a thread caught between two statements
        # on a marked line would not stay there for 100 ms.
        while still < 2:
            time.sleep(0.05)
            stacks = snapshot()
            if stacks is not None and previous is not None and settled(stacks, previous):
                still += 1
            else:
                still = 0
            previous = stacks
        native_ids = dict((t.ident, t.native_id) for t in threading.enumerate())
        threads = []
        for ident in idents:
            threads.append({
                "thread_id": ident,
                "native_thread_id": native_ids.get(ident),
                "role": "spin" if ident in spinning else "blocked",
                "frames": previous[ident],
            })
        report = {"pid": os.getpid(), "version": version_string(), "threads": threads}
        report.update(extra or {})
        tmp = report_path + ".tmp"
        write_json(tmp, report)
        subprocess.Popen(
            ["/bin/sh", "-c", RENAME_WHEN_GONE, "sh", str(os.getpid()),
             str(threading.get_native_id()), tmp, report_path],
            stdin=subprocess.DEVNULL, close_fds=True)

    reporter = threading.Thread(target=run, name="reporter", daemon=True)
    reporter.start()


def start_worker(target, name, *args):
    thread = threading.Thread(target=target, name=name, args=args, daemon=True)
    thread.start()
    return thread.ident


# --- nested ------------------------------------------------------------------


def nested_outer():
    nested_middle()


def nested_middle():
    nested_inner()


def nested_inner():
    hold()


def scenario_nested(report_path):
    start_reporter(report_path, [threading.get_ident()],
                   extra={"code_id": id(nested_middle.__code__)})
    nested_outer()


# --- methods -----------------------------------------------------------------


class Widget(object):
    def run(self):
        return self.build()

    @classmethod
    def build(cls):
        return cls.helper()

    @staticmethod
    def helper():
        return Widget().value

    @property
    def value(self):
        while True:
            time.sleep(3600)  # BLOCK


def scenario_methods(report_path):
    start_reporter(report_path, [threading.get_ident()])
    Widget().run()


# --- generators --------------------------------------------------------------


def gen_values():
    yield 1
    yield 2
    while True:
        time.sleep(3600)  # BLOCK
    yield 3


async def gen_consume():
    total = 0
    for value in gen_values():
        total += value
    return total


async def gen_outer():
    await asyncio.sleep(0)
    return await gen_consume()


def scenario_generators(report_path):
    start_reporter(report_path, [threading.get_ident()])
    asyncio.run(gen_outer())


# --- coroutines --------------------------------------------------------------


async def co_leaf():
    while True:
        time.sleep(3600)  # BLOCK


async def co_middle():
    return await co_leaf()


async def co_top():
    await asyncio.sleep(0)
    return await co_middle()


def scenario_coroutines(report_path):
    start_reporter(report_path, [threading.get_ident()])
    asyncio.run(co_top())


# --- lambdas and comprehensions -----------------------------------------------


def lambdas_listcomp():
    call = lambda x: hold()  # noqa: E731
    return [call(x) for x in range(3)]


def lambdas_dictcomp():
    return {k: v for k, v in ((x, hold()) for x in range(2))}


def scenario_lambdas(report_path):
    worker = start_worker(lambdas_dictcomp, "dictcomp")
    start_reporter(report_path, [threading.get_ident(), worker])
    lambdas_listcomp()


# --- recursion ---------------------------------------------------------------

RECURSION_DEPTH = 1000


def recurse(n):
    if n == 0:
        hold()
    recurse(n - 1)


def scenario_recursion(report_path):
    sys.setrecursionlimit(RECURSION_DEPTH + 1000)
    start_reporter(report_path, [threading.get_ident()])
    recurse(RECURSION_DEPTH)


# --- a stack that goes deep, then comes back up -------------------------------

DIVE_DEPTH = 3000


def dive(n, surface):
    if n == 0:
        while not surface.is_set():
            time.sleep(0.01)  # BLOCK
        return
    dive(n - 1, surface)


def dive_and_surface(surface):
    dive(DIVE_DEPTH, surface)
    hold()


def scenario_dive(report_path):
    """One thread parks 3000 frames deep; SIGUSR1 brings it back up, to park shallow."""
    surface = threading.Event()
    signal.signal(signal.SIGUSR1, lambda signum, frame: surface.set())
    sys.setrecursionlimit(DIVE_DEPTH + 1000)
    threading.stack_size(64 << 20)  # up to 3.10 each Python call takes C stack too
    start_reporter(report_path, [start_worker(dive_and_surface, "diver", surface)])
    hold()


# --- a deep stack that sleeps, then moves ------------------------------------

MOVE_DEPTH = 600


def move_deep(n, wake, moved_path):
    if n == 0:
        os.read(wake, 1)  # BLOCK
        write_json_atomically(moved_path, {"moved": True})
        os.read(wake, 1)  # BLOCK again, one line down in the same frame
        return
    move_deep(n - 1, wake, moved_path)


def scenario_move(report_path):
    """One thread sleeps 600 frames deep, off every CPU (a pipe read); SIGUSR1
    wakes it to sleep again on the next line of the same frame, and
    REPORT_PATH.moved is written on the way, before it sleeps."""
    wake_read, wake_write = os.pipe()
    signal.signal(signal.SIGUSR1, lambda signum, frame: os.write(wake_write, b"x"))
    mover = start_worker(move_deep, "mover", MOVE_DEPTH, wake_read, report_path + ".moved")
    start_reporter(report_path, [mover])
    hold()


def spin_deep(n, wake, ack):
    if n == 0:
        os.read(wake, 1)  # BLOCK
        os.write(ack, b"x")
        while True:
            pass
    spin_deep(n - 1, wake, ack)


def scenario_move_spin(report_path):
    """One thread sleeps 600 frames deep on a FIFO (REPORT_PATH.fifo), the
    rest of the process asleep too; a byte written into it from outside
    wakes that thread alone, which says so with a byte into another FIFO
    (REPORT_PATH.ack: a write that does not sleep) and runs on, never to
    leave its CPU again."""
    os.mkfifo(report_path + ".fifo")
    os.mkfifo(report_path + ".ack")
    # Read-write: neither open waits for the other end.
    wake = os.open(report_path + ".fifo", os.O_RDWR)
    ack = os.open(report_path + ".ack", os.O_RDWR)
    mover = start_worker(spin_deep, "mover", MOVE_DEPTH, wake, ack)
    start_reporter(report_path, [mover])
    hold()


def ticker():
    while True:
        time.sleep(0.002)


def scenario_move_busy(report_path):
    """As move, beside a thread that wakes every 2 ms: the process never
    stands still as a whole, so only the sleeping thread can be proven so."""
    start_worker(ticker, "ticker")
    scenario_move(report_path)


# --- a thread that wakes up to sleep deeper ----------------------------------

WAKE_DEPTH = 60


def wake_deep(n, wake, woke_path):
    if n == 0:
        write_json_atomically(woke_path, {"woke": True})
        os.read(wake, 1)  # BLOCK
        return
    wake_deep(n - 1, wake, woke_path)


def wake_up(wake, woke_path):
    os.read(wake, 1)  # BLOCK
    wake_deep(WAKE_DEPTH, wake, woke_path)


def scenario_wake(report_path):
    """One thread sleeps two frames deep on a pipe; SIGUSR1 wakes it to sleep
    again WAKE_DEPTH frames deeper (new frames in its data stack), and
    REPORT_PATH.woke is written just before it does."""
    wake_read, wake_write = os.pipe()
    signal.signal(signal.SIGUSR1, lambda signum, frame: os.write(wake_write, b"x"))
    sleeper = start_worker(wake_up, "sleeper", wake_read, report_path + ".woke")
    start_reporter(report_path, [sleeper])
    hold()


# --- a thread that sleeps at one depth, then another --------------------------

STEPS_DEPTHS = (3, 9)


def step_down(n, wake, woke_path, count):
    if n == 0:
        write_json_atomically(woke_path, {"woke": count})
        os.read(wake, 1)  # BLOCK
        return
    step_down(n - 1, wake, woke_path, count)


def stepper(wake, woke_path):
    count = 0
    while True:
        step_down(STEPS_DEPTHS[count % 2], wake, woke_path, count)
        count += 1


def spawned_sleeper(count, never, spawned_path):
    # Long after the thread that started it fell asleep: nothing else runs as this one moves on.
    time.sleep(0.05)
    write_json_atomically(spawned_path, {"spawned": count, "tid": threading.get_native_id()})
    os.read(never, 1)  # BLOCK


def scenario_steps(report_path):
    """One thread sleeps on a pipe STEPS_DEPTHS frames deep in turn: each
    SIGUSR1 moves it to the other depth, and REPORT_PATH.woke counts its moves
    just before it sleeps again (a service's burst of work between sleeps).
    Each SIGUSR2 starts one more thread that sleeps a moment, then on a pipe
    too, and REPORT_PATH.spawned counts them (with the newest one's id) just
    before it does."""
    wake_read, wake_write = os.pipe()
    never_read, _never_write = os.pipe()
    spawned = [0]

    def spawn(signum, frame):
        spawned[0] += 1
        start_worker(spawned_sleeper, "spawned", spawned[0], never_read, report_path + ".spawned")

    signal.signal(signal.SIGUSR1, lambda signum, frame: os.write(wake_write, b"x"))
    signal.signal(signal.SIGUSR2, spawn)
    sleeper = start_worker(stepper, "sleeper", wake_read, report_path + ".woke")
    start_reporter(report_path, [sleeper])
    hold()


# --- a thread moved on by one that ends -------------------------------------


def handoff_sleeper(wake, moved_path):
    moved = 0
    while True:
        write_json_atomically(moved_path, {"moved": moved})
        os.read(wake, 1)  # BLOCK
        moved += 1
        write_json_atomically(moved_path, {"moved": moved})
        os.read(wake, 1)  # BLOCK
        moved += 1


def handoff_waker(wake_write):
    os.write(wake_write, b"x")
    # Busy while the sleeper moves on and sleeps again, then gone: no thread
    # of the process is switched away from its CPU after the move.
    end = time.monotonic() + 0.03
    while time.monotonic() < end:
        pass


def scenario_handoff(report_path):
    """One thread sleeps on a pipe at one line of a frame, then another, in
    turn.  Each SIGUSR1 starts a thread that moves it on to the other line
    and spins on a CPU meanwhile, then ends; REPORT_PATH.moved counts the
    sleeper's moves just before it sleeps again."""
    wake_read, wake_write = os.pipe()
    signal.signal(signal.SIGUSR1, lambda signum, frame: start_worker(handoff_waker, "waker", wake_write))
    sleeper = start_worker(handoff_sleeper, "sleeper", wake_read, report_path + ".moved")
    start_reporter(report_path, [sleeper])
    hold()


# --- a deep stack that calls deeper from where it slept ----------------------

DEEPEN_BASE = 600


def deepen_base(n, wake, woke_path):
    if n == 0:
        wake_up(wake, woke_path)
        return
    deepen_base(n - 1, wake, woke_path)


def scenario_deepen(report_path):
    """As wake, but the thread sleeps under DEEPEN_BASE frames that stay
    where they are when it wakes to sleep deeper; beside a ticker, so the
    process as a whole never stands still."""
    start_worker(ticker, "ticker")
    wake_read, wake_write = os.pipe()
    signal.signal(signal.SIGUSR1, lambda signum, frame: os.write(wake_write, b"x"))
    sleeper = start_worker(deepen_base, "sleeper", DEEPEN_BASE, wake_read, report_path + ".woke")
    start_reporter(report_path, [sleeper])
    hold()


# --- a generator resumed by another caller ----------------------------------


def two_callers_helper(wake):
    os.read(wake, 1)  # BLOCK


def two_callers_gen(wake):
    while True:
        two_callers_helper(wake)
        yield


def two_callers_a(gen):
    for _ in gen:
        return


def two_callers_b(gen):
    for _ in gen:
        return


def two_callers_loop(wake, woke_path):
    gen = two_callers_gen(wake)
    two_callers_a(gen)
    write_json_atomically(woke_path, {"woke": True})
    two_callers_b(gen)


def scenario_two_callers(report_path):
    """A generator sleeps in a helper, resumed by two_callers_a; SIGUSR1 wakes
    it to yield, and two_callers_b, whose frame lies where a's did, resumes
    it to sleep again (REPORT_PATH.woke written between): the generator's
    frame and the helper's stay at their addresses while their caller
    changes.  Beside a ticker, so the process as a whole never stands still."""
    start_worker(ticker, "ticker")
    wake_read, wake_write = os.pipe()
    signal.signal(signal.SIGUSR1, lambda signum, frame: os.write(wake_write, b"x"))
    resumer = start_worker(two_callers_loop, "resumer", wake_read, report_path + ".woke")
    start_reporter(report_path, [resumer])
    hold()


# --- callbacks from C ----------------------------------------------------------


def callbacks_key(item):
    while True:
        time.sleep(3600)  # BLOCK


def callbacks_sort():
    return sorted([3, 1, 2], key=callbacks_key)


def callbacks_reducer(acc, item):
    while True:
        time.sleep(3600)  # BLOCK


def callbacks_reduce():
    return functools.reduce(callbacks_reducer, [1, 2, 3])


def scenario_callbacks(report_path):
    worker = start_worker(callbacks_reduce, "reduce")
    start_reporter(report_path, [threading.get_ident(), worker])
    callbacks_sort()


# --- non-ASCII names -----------------------------------------------------------

# Function names need UCS1 (e-acute), UCS2 (Cyrillic zhe, CJK) storage; the
# file name adds a character outside the BMP, which only UCS4 can hold.
NONASCII_SOURCE = (
    "import time\n"
    "\n"
    "\n"
    "def caf\u00e9():\n"
    "    return \u0436\u0443\u043a()\n"
    "\n"
    "\n"
    "def \u0436\u0443\u043a():\n"
    "    return \u6a21\u5757()\n"
    "\n"
    "\n"
    "def \u6a21\u5757():\n"
    "    while True:\n"
    "        time.sleep(3600)  # BLOCK\n"
)
NONASCII_FILE = "mod_\u00e9_\u0436_\u6a21_\U0001f600.py"


def scenario_nonascii(report_path):
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(report_path)), NONASCII_FILE)
    with open(path, "w", encoding="utf-8") as f:
        f.write(NONASCII_SOURCE)
    spec = importlib.util.spec_from_file_location("nonascii_target", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    start_reporter(report_path, [threading.get_ident()])
    getattr(module, "caf\u00e9")()


# --- twenty threads --------------------------------------------------------------

THREADS20_FILE = "<threads20>"


def scenario_threads20(report_path):
    # Each thread parks in its own function, at its own line, so a dump that
    # mixed up threads or frames would show it.
    parts = []
    for i in range(20):
        parts.append("def worker_%02d():\n" % i)
        parts.append("    level = %d\n" % i)
        parts.append("\n" * (i % 3))
        parts.append("    while True:\n        time.sleep(3600)  # BLOCK\n\n\n")
    source = "".join(parts)
    GENERATED_SOURCES[THREADS20_FILE] = source.splitlines()
    namespace = {"time": time}
    exec(compile(source, THREADS20_FILE, "exec"), namespace)
    idents = [threading.get_ident()]
    for i in range(20):
        idents.append(start_worker(namespace["worker_%02d" % i], "worker-%02d" % i))
    start_reporter(report_path, idents)
    hold()


# --- a pool of sleepers ------------------------------------------------------------

POOL_THREADS = 200


def pool_wait():
    while True:
        time.sleep(3600)  # BLOCK


def pool_worker():
    pool_wait()


def scenario_pool(report_path):
    """POOL_THREADS threads asleep in a pool beside a ticker that wakes every
    2 ms, so the process as a whole never stands still: a thread pool of a
    service between requests.  The report waits on the first sleeper."""
    start_worker(ticker, "ticker")
    idents = [start_worker(pool_worker, "pool-%03d" % i) for i in range(POOL_THREADS)]
    start_reporter(report_path, idents[:1], extra={"pool": len(idents)})
    hold()


# --- spin ------------------------------------------------------------------------


def spin_forever():
    n = 0
    while True:
        n += 1


def scenario_spin(report_path):
    spinner = start_worker(spin_forever, "spin")
    start_reporter(report_path, [threading.get_ident(), spinner], spinning=[spinner])
    hold()


# --- pingpong ----------------------------------------------------------------------


# Seconds each thread holds the token, asleep, before handing it on.
PINGPONG_HOLD = [0.0005]


def ping(mine, theirs):
    while True:
        mine.acquire()
        time.sleep(PINGPONG_HOLD[0])
        theirs.release()


def scenario_pingpong(report_path):
    """Two threads hand a token back and forth, each waiting on its own
    semaphore and holding the token half a millisecond, asleep: thousands
    of switches away a second, at little CPU, while the main thread sleeps.
    After SIGUSR1 each holds it 50 ms: a handoff every 50 ms."""
    signal.signal(signal.SIGUSR1, lambda signum, frame: PINGPONG_HOLD.__setitem__(0, 0.05))
    first, second = threading.Semaphore(0), threading.Semaphore(0)
    pinger = start_worker(ping, "ping", first, second)
    ponger = start_worker(ping, "pong", second, first)
    first.release()
    start_reporter(report_path, [threading.get_ident(), pinger, ponger], spinning=[pinger, ponger])
    hold()


def scenario_relay(report_path):
    """As pingpong once signalled: a handoff every 50 ms from the start."""
    PINGPONG_HOLD[0] = 0.05
    scenario_pingpong(report_path)


# --- exiting -----------------------------------------------------------------------

# Not one of the stack scenarios: many threads keep building and unwinding deep
# stacks and the process ends abruptly a short random time after it reports
# being ready, so that dumps race the exit.

EXITING_THREADS = 8
EXITING_DEPTH = 300


def churn(depth):
    if depth:
        churn(depth - 1)


def churn_forever():
    while True:
        churn(EXITING_DEPTH)


def scenario_exiting(report_path):
    sys.setrecursionlimit(EXITING_DEPTH + 1000)
    for i in range(EXITING_THREADS):
        start_worker(churn_forever, "churn-%d" % i)
    write_json_atomically(report_path, {"pid": os.getpid(), "version": version_string(),
                                        "threads": []})
    time.sleep(random.uniform(0.02, 0.6))
    os._exit(0)


# --- odd names ---------------------------------------------------------------------

# Names a text format must escape: a collapsed-stack line would split at ';'
# or at a newline, and a backslash is the escape character itself.
ODD_NAMES = ["odd;semi", "odd\nline", "odd\\back"]


def odd_leaf():
    hold()


def scenario_oddnames(report_path):
    # Each function calls the next; the names are swapped in afterwards
    # (code.replace, 3.8+), since no def can spell them.
    calls = [odd_leaf]
    for i, name in enumerate(reversed(ODD_NAMES)):
        callee = calls[-1]

        def caller(callee=callee):
            callee()

        # 3.11+ shows the qualified name: it gets the odd name too.
        names = {"co_name": name}
        if hasattr(caller.__code__, "co_qualname"):
            names["co_qualname"] = name
        caller.__code__ = caller.__code__.replace(**names)
        calls.append(caller)
    start_reporter(report_path, [threading.get_ident()])
    calls[-1]()


# --- main ----------------------------------------------------------------------------

# --- views: two functions of one short name, threads that wait ------------


def run():
    total = 0
    for i in range(3000):
        total += i
    return total


class Runner(object):
    def run(self):
        total = 0
        for i in range(3000):
            total += i
        return total


def nap():
    while True:
        time.sleep(3600)


def scenario_views(report_path):
    # The main thread runs a function and a method both called run; napper
    # sleeps (off CPU), waiter waits on an Event (a known wait).  3.14+
    # names the OS threads after Thread.name.
    event = threading.Event()
    threads = {"napper": start_worker(nap, "napper"),
               "waiter": start_worker(event.wait, "waiter")}
    time.sleep(0.2)
    natives = {t.name: t.native_id for t in threading.enumerate()
               if hasattr(t, "native_id")}
    write_json_atomically(report_path, {"pid": os.getpid(), "version": version_string(),
                                        "threads": threads, "native_ids": natives,
                                        "run_line": run.__code__.co_firstlineno,
                                        "method_line": Runner.run.__code__.co_firstlineno})
    runner = Runner()
    while True:
        run()
        runner.run()


SCENARIOS = {
    "views": scenario_views,
    "nested": scenario_nested,
    "methods": scenario_methods,
    "generators": scenario_generators,
    "coroutines": scenario_coroutines,
    "lambdas": scenario_lambdas,
    "recursion": scenario_recursion,
    "dive": scenario_dive,
    "move": scenario_move,
    "move_busy": scenario_move_busy,
    "move_spin": scenario_move_spin,
    "wake": scenario_wake,
    "steps": scenario_steps,
    "handoff": scenario_handoff,
    "deepen": scenario_deepen,
    "two_callers": scenario_two_callers,
    "callbacks": scenario_callbacks,
    "nonascii": scenario_nonascii,
    "threads20": scenario_threads20,
    "pool": scenario_pool,
    "spin": scenario_spin,
    "pingpong": scenario_pingpong,
    "relay": scenario_relay,
    "exiting": scenario_exiting,
    "oddnames": scenario_oddnames,
}


def allow_any_tracer():
    # Under Yama ptrace_scope 1 only ancestors may read this process; the
    # dump is a sibling of the target in the test runner.
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_ptracer, pr_set_ptracer_any = 0x59616D61, ctypes.c_ulong(-1)
        libc.prctl(pr_set_ptracer, pr_set_ptracer_any, 0, 0, 0)
    except Exception:
        pass


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in SCENARIOS:
        sys.stderr.write("usage: stacks.py {%s} REPORT_PATH\n" % ",".join(sorted(SCENARIOS)))
        sys.exit(2)
    sys.dont_write_bytecode = True
    allow_any_tracer()
    SCENARIOS[sys.argv[1]](sys.argv[2])


if __name__ == "__main__":
    main()
