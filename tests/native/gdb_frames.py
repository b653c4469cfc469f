# The oracle of the native frame tests, run by gdb (-x) attached to a
# target after pyprofd read it: every thread's concrete frames, innermost
# first, each named by the symbol of the ELF file that holds its code (its
# minimal symbol: .symtab, .dynsym, MiniDebugInfo) and by that file.
# Frames gdb infers from DWARF and not from the stack (inlined calls, and
# tail calls, whose caller left no return address) are left out: pyprofd
# reads no DWARF but the CFI.  One line: "GDB-FRAMES " and JSON {tid: [frame]}.
import json

import gdb

MAX_FRAMES = 512


def symbol_at(pc):
    text = gdb.execute("info symbol 0x%x" % pc, to_string=True).strip()
    if text.startswith("No symbol"):
        return None
    return text.split(" in section ")[0].split(" + ")[0].strip()


def frames_of(thread):
    thread.switch()
    frames = []
    frame = gdb.newest_frame()
    exact = True
    while frame is not None and len(frames) < MAX_FRAMES:
        if frame.type() in (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME):
            frame = frame.older()
            continue
        # A caller's pc is its return address: the call is the byte before.
        pc = frame.pc() if exact else frame.pc() - 1
        exact = frame.type() == gdb.SIGTRAMP_FRAME
        frames.append({"name": symbol_at(pc), "module": gdb.solib_name(pc)})
        frame = frame.older()
    return frames


result = {}
for thread in gdb.selected_inferior().threads():
    result[str(thread.ptid[1])] = frames_of(thread)
print("GDB-FRAMES " + json.dumps(result))
