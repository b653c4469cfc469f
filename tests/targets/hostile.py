"""A process that makes its own runtime hostile to readers from outside.

    python hostile.py SHAPE [REPORT_PATH]

It corrupts, through ctypes, structures a remote unwinder walks, so that
every link still points at something sound and only the whole is wrong:

  thread-cycle   two threads; the older one's `next` points back at the
                 newer, so the thread list never ends
  frame-cycle    the running frame's caller's caller is the running frame
                 again (leaf -> mid -> leaf -> ...)
  many-threads   the main thread sits in a deep recursion, and 4000 copies of
                 its thread state are chained after the real ones: a thread
                 list of sound-looking threads, each with the whole deep stack
  many-threads-undumpable
                 the same, once it made itself not dumpable (prctl), as a
                 user's process does to pass for root's alone
  unlinked       3.11+: the main thread's innermost frame has no caller, and
                 it is no frame entered from C: as a frame looks when read
                 before its caller's link is written into it
  being-called   3.11-3.12: the main thread's innermost frame has not run
                 its first instruction, and its caller is a frame of another
                 thread: as a frame looks when read in the instructions
                 between the pointer to it and its link back, the link still
                 what the data stack held there

Then it idles in the corrupted state forever (a reader from outside sees it
unchanged) and writes {"pid": ..., "shape": ...} to REPORT_PATH when ready.
The corruption is never undone: the process must be killed (SIGKILL), for
its own interpreter would loop on the lists at exit.

Runs on CPython 3.8 through 3.15 (the last two shapes from 3.11).
"""

import ctypes
import gc
import json
import os
import sys
import sysconfig
import threading
import time

# What every PyThreadState of 3.8-3.14 starts with: prev, next, interp.
TSTATE_NEXT = 8
# The fake thread states copy this much of the real one (every field a reader uses).
TSTATE_COPY = 2048
FAKE_THREADS = 4000
DEPTH = 60

pythonapi = ctypes.pythonapi
pythonapi.PyThreadState_Get.restype = ctypes.c_void_p
pythonapi.Py_IncRef.argtypes = [ctypes.py_object]


def u64(addr):
    return ctypes.c_uint64.from_address(addr)


def report(path, shape):
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"pid": os.getpid(), "shape": shape}, f)
    os.rename(tmp, path)


def idle():
    while True:
        time.sleep(0.01)


def thread_cycle(path):
    ready = threading.Event()
    other = {}

    def run():
        other["tstate"] = pythonapi.PyThreadState_Get()
        ready.set()
        idle()

    threading.Thread(target=run, daemon=True).start()
    ready.wait()
    main = pythonapi.PyThreadState_Get()
    # The newer thread is the list's head and links to the main thread, the last.
    newer = other["tstate"]
    if u64(newer + TSTATE_NEXT).value != main or u64(main + TSTATE_NEXT).value != 0:
        sys.exit("hostile.py: the thread list is not [newer, main]")
    u64(main + TSTATE_NEXT).value = newer
    report(path, "thread-cycle")
    idle()


# _PyInterpreterFrame (3.11, 3.12+): its caller, and the instruction before the next.
FRAME_PREVIOUS = 48 if sys.version_info[:2] == (3, 11) else 8
FRAME_PREV_INSTR = 56
# PyCodeObject.co_code_adaptive, where the bytecode starts (3.11, 3.12).
CODE_ADAPTIVE = {(3, 11): 184, (3, 12): 192}


# PyObject_HEAD: 16 bytes, 32 in free-threaded builds (thread id, locks, shared count).
OBJECT_HEAD = 32 if sysconfig.get_config_var("Py_GIL_DISABLED") else 16


def interpreter_frame(frame):
    """3.11+: the _PyInterpreterFrame a frame object stands for (PyObject_HEAD, f_back, f_frame)."""
    return u64(id(frame) + OBJECT_HEAD + 8).value


def frame_cycle_leaf(path):
    leaf = sys._getframe()
    mid = leaf.f_back
    if sys.version_info < (3, 11):
        # PyFrameObject: PyObject_VAR_HEAD, then f_back; the leaf is owed the reference.
        pythonapi.Py_IncRef(leaf)
        u64(id(mid) + 24).value = id(leaf)
    else:
        u64(interpreter_frame(mid) + FRAME_PREVIOUS).value = interpreter_frame(leaf)
    report(path, "frame-cycle")
    idle()


def frame_cycle_mid(path):
    frame_cycle_leaf(path)


def linked_late(path, shape, bystander):
    frame = interpreter_frame(sys._getframe())

    def corrupt():
        # This thread's last instruction before it sleeps is written: then the frame is still.
        time.sleep(0.2)
        if shape == "being-called":
            code = id(linked_late.__code__)
            u64(frame + FRAME_PREV_INSTR).value = code + CODE_ADAPTIVE[sys.version_info[:2]] - 2
            u64(frame + FRAME_PREVIOUS).value = bystander
        else:
            u64(frame + FRAME_PREVIOUS).value = 0
        report(path, shape)

    threading.Thread(target=corrupt, daemon=True).start()
    # Called from here, C: no frame above this one, and nothing of it written while it sleeps.
    time.sleep(1e6)


def calls_late(path, shape, bystander):
    linked_late(path, shape, bystander)


def unlinked(path, shape):
    parked = threading.Event()
    frames = {}

    def bystander():
        frames["bystander"] = interpreter_frame(sys._getframe())
        parked.set()
        idle()

    threading.Thread(target=bystander, daemon=True).start()
    parked.wait()
    calls_late(path, shape, frames["bystander"])


def deep(n, then):
    if n:
        return deep(n - 1, then)
    return then()


def many_threads(path):
    def corrupt():
        main = pythonapi.PyThreadState_Get()
        # Hold the copies for as long as the process lives.
        many_threads.fakes = fakes = [ctypes.create_string_buffer(TSTATE_COPY) for _ in range(FAKE_THREADS)]
        image = ctypes.string_at(main, TSTATE_COPY)
        for i, buf in enumerate(fakes):
            ctypes.memmove(buf, image, TSTATE_COPY)
            u64(ctypes.addressof(buf) + TSTATE_NEXT).value = (
                ctypes.addressof(fakes[i + 1]) if i + 1 < FAKE_THREADS else 0)
        # The main thread is the list's last: the copies follow it.
        u64(main + TSTATE_NEXT).value = ctypes.addressof(fakes[0])
        report(path, "many-threads")
        idle()

    deep(DEPTH, corrupt)


def main():
    shape = sys.argv[1]
    path = sys.argv[2] if len(sys.argv) > 2 else None
    # The collector would walk what was corrupted; nothing here needs it.
    gc.disable()
    if shape == "thread-cycle":
        thread_cycle(path)
    elif shape == "frame-cycle":
        frame_cycle_mid(path)
    elif shape == "many-threads":
        many_threads(path)
    elif shape == "many-threads-undumpable":
        # PR_SET_DUMPABLE is 4: no longer readable by its own user.
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
        many_threads(path)
    elif shape in ("unlinked", "being-called"):
        unlinked(path, shape)
    else:
        sys.exit("hostile.py: unknown shape %r" % shape)


main()
