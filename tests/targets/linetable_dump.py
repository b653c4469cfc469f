"""Dump code objects' raw line tables with the interpreter's own answer.

Used by tests/test_linetable.c: the C decoder must give, for every bytecode
offset, the line this interpreter itself gives.  Output, one record per code
object:

    C <firstlineno> <bytecode length> <table hex, or -> <name>
    L <start> <end> <line> ...      3.10+: co_lines(), no line as -1
    S <offset> <line> ...           3.8-3.9: dis.findlinestarts()

framed by "V <major> <minor>" first and "END <records>" last, so a reader can
tell a complete dump from one cut short by a crash.
"""
import dis
import importlib.util
import sys
import types

# Mixed stdlib code: decorators, nested classes, closures, async, long
# functions, string-heavy tables.
MODULES = [
    "json",
    "json.decoder",
    "json.encoder",
    "json.scanner",
    "asyncio.base_events",
    "dataclasses",
    "argparse",
    "typing",
]

# 300 blank lines give line deltas past one lnotab/PEP 626 byte (127) and
# past 255; 200 000 push location-table varints to four 6-bit chunks.
GAP_SMALL = "\n" * 300
GAP_LARGE = "\n" * 200_000

SYNTH = (
    """
import os

def gaps(a):
    x = a
""" + GAP_SMALL + """
    y = x + 1
""" + GAP_LARGE + """
    return y

def loop_back(n):
    # the jump back to the loop head carries a large negative line delta
    total = 0
    for i in range(n):
        total += i
""" + GAP_LARGE + """
        total -= 1
    while total > 0:
        total -= 3
""" + GAP_SMALL + """
        total += 1
    return total

def wide(a):
    # one line, thousands of bytes of bytecode
    t = [""" + ", ".join("a + %d" % i for i in range(400)) + """]
    return t

def wide_cleanup(a):
    # artificial cleanup code has no line on 3.10+
    try:
        return [""" + ", ".join("a * %d" % i for i in range(200)) + """]
    finally:
        a = None

def many_lines():
""" + "".join("    v%d = %d\n" % (i, i) for i in range(3000)) + """
    return v0

def far_args(a):
    # after an argument far below, the call returns to the first line: a
    # large negative delta in every format
    return max(a,
""" + GAP_LARGE + """
               a + 1) + min(a,
""" + GAP_SMALL + """
                            a - 1)

def multi_line(a, b):
    return max(
        a,
        b,


        a +
            b,
    ) + min(a,
            b)

def comprehensions(xs):
    a = [x for x in xs if x]
    b = {x: y for x, y in zip(xs, xs)}
    c = {x for x in xs}
    d = list(x * 2 for x in xs)
    e = [[y for y in range(x)] for x in xs]
    return a, b, c, d, e

f = lambda x: (x +
               1)
g = [lambda y, i=i: y * i for i in range(3)]

class K:
    attr = 1

    def method(self):
        with open(os.devnull) as fh:
            pass
        try:
            raise ValueError
        except ValueError as exc:
            del exc
        else:
            pass
        finally:
            self.attr = 2
        return 1

    @property
    def prop(self):
        return self.attr

async def coro(xs):
    async with xs as y:
        async for z in y:
            await z
    return [w async for w in xs]

def gen():
    yield 1
    yield from range(2)
"""
)

if sys.version_info >= (3, 10):
    SYNTH += """
def matcher(v):
    match v:
        case [a, b, *rest]:
            return a
        case {"k": x}:
            return x
        case int() | float() if v > 0:
            return v
        case _:
            return None
"""

if sys.version_info >= (3, 11):
    SYNTH += """
def groups():
    try:
        raise ExceptionGroup("g", [ValueError()])
    except* ValueError:
        pass
    except* TypeError:
        pass
"""

if sys.version_info >= (3, 12):
    SYNTH += """
def first[T](xs: list[T]) -> T:
    return xs[0]

class Box[T]:
    def get(self) -> T:
        return self.item

type Alias = list[int]
"""


def walk(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from walk(const)


def module_code(name):
    spec = importlib.util.find_spec(name)
    with open(spec.origin, "rb") as fh:
        return compile(fh.read(), spec.origin, "exec", dont_inherit=True)


def emit(code, out):
    if sys.version_info >= (3, 10):
        table = code.co_linetable
        tag = "L"
        mapping = []
        for start, end, line in code.co_lines():
            mapping += (start, end, -1 if line is None else line)
    else:
        table = code.co_lnotab
        tag = "S"
        mapping = []
        for offset, line in dis.findlinestarts(code):
            mapping += (offset, line)
    name = code.co_name.replace(" ", "_") or "?"
    out.write("C %d %d %s %s\n" % (code.co_firstlineno, len(code.co_code),
                                    table.hex() or "-", name))
    out.write(tag + "".join(" %d" % v for v in mapping) + "\n")


def main():
    out = sys.stdout
    out.write("V %d %d\n" % sys.version_info[:2])
    roots = [module_code(name) for name in MODULES]
    roots.append(compile(SYNTH, "<synth>", "exec", dont_inherit=True))
    records = 0
    for root in roots:
        for code in walk(root):
            emit(code, out)
            records += 1
    out.write("END %d\n" % records)


if __name__ == "__main__":
    main()
