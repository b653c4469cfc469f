"""The CPython interpreters the benchmarks run, and how to start one.

The host's own (pyenv's versions, Debian's /usr/bin/python3.N, PYPROFD_TEST_PYTHONS,
and builds of CPython's sources installed as PYPROFD_BUILT_PYTHONS/py3*/, by default
/var/cache/pyprofd/py3.14t and the like) and, as root, those of the Debian sid root `make pythons` builds (PYPROFD_PYTHONS_ROOT,
/var/cache/pyprofd/sid by default): CPython 3.13, 3.14, 3.15 and 3.15d.  Those run
chrooted into their root in a mount namespace of their own, with the bench
directory (and any other directory asked for) bound at the same path inside and
the host's /proc, as the test suite runs them (tests/pythons.h), and the root
itself at its own path.  They share the
host's pid namespace, so their pids are the ones the daemon is given.
"""
import glob
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ROOT = "/var/cache/pyprofd/sid"
DEFAULT_BUILT = "/var/cache/pyprofd"

# In a new mount namespace (private: nothing shows on the host, nothing to undo):
# ROOT BIND... -- ARGV: each BIND at its own path under ROOT, /proc too, then chroot.
ENTER_ROOT = r"""
root=$1; shift
while [ "$1" != -- ]; do
    mkdir -p "$root$1" && mount --bind "$1" "$root$1" || exit 126
    shift
done
shift
mount --bind /proc "$root/proc" || exit 126
exec chroot "$root" "$@"
"""


class Python:
    def __init__(self, path, root, major, minor, micro, debug, free_threaded=False):
        self.path = path    # as its own processes see it (inside root)
        self.root = root    # "" for the host's own
        self.major, self.minor, self.micro, self.debug = major, minor, micro, debug
        self.free_threaded = free_threaded
        self.label = "%d.%d.%d%s%s%s" % (major, minor, micro, "t" if free_threaded else "",
                                         "d" if debug else "",
                                         " (sid)" if root else
                                         " (debian)" if path.startswith("/usr/bin/") else "")

    def version_tag(self):
        """3.15, 3.15d, 3.14t: what --pythons options name."""
        return "%d.%d%s%s" % (self.major, self.minor, "t" if self.free_threaded else "",
                              "d" if self.debug else "")

    def argv(self, args, binds=()):
        """The command that runs this interpreter with args."""
        if not self.root:
            return [self.path] + list(args)
        # The root at its own path too: /proc/PID/maps of a chrooted process names
        # the host's paths, and a reader in the root (CPython's) opens them as named.
        dirs = [HERE, self.root] + [d for d in binds if d]
        return (["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", ENTER_ROOT,
                 "sh", self.root] + dirs + ["--", self.path] + list(args))

    def popen(self, args, binds=(), **kw):
        return subprocess.Popen(self.argv(args, binds), **kw)

    def run(self, args, binds=(), **kw):
        return subprocess.run(self.argv(args, binds), **kw)

    def __repr__(self):
        return self.label


def _pyenv_root():
    root = os.environ.get("PYENV_ROOT")
    if not root:
        try:
            root = subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip()
        except OSError:
            root = ""
    return root or os.path.expanduser("~/.pyenv")


def _ask(path, root):
    probe = Python(path, root, 0, 0, 0, False)
    try:
        out = probe.run(["-c", "import sys, sysconfig; print(*sys.version_info[:3], "
                               "int(hasattr(sys, 'gettotalrefcount')), "
                               "int(bool(sysconfig.get_config_var('Py_GIL_DISABLED'))))"],
                        capture_output=True, text=True, timeout=20).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    if len(out) != 5:
        return None
    major, minor, micro, debug, free_threaded = (int(x) for x in out)
    return Python(path, root, major, minor, micro, bool(debug), bool(free_threaded))


def find(roots=True):
    """Every CPython from 3.8 on (3.16: the next, to be refused or read), once each by real path."""
    found, seen = [], set()
    candidates = sorted(glob.glob(os.path.join(_pyenv_root(), "versions", "*", "bin", "python3.*[0-9]")))
    candidates += sorted(glob.glob("/usr/bin/python3.*[0-9]"))
    # Built by hand from CPython's sources (free-threaded, the next version), outside any clone.
    built = os.environ.get("PYPROFD_BUILT_PYTHONS", DEFAULT_BUILT)
    candidates += sorted(glob.glob(os.path.join(built, "py3*", "bin", "python3.*[0-9]")) +
                         glob.glob(os.path.join(built, "py3*", "bin", "python3.*[0-9]t")))
    candidates += [p for p in os.environ.get("PYPROFD_TEST_PYTHONS", "").split(":") if p]
    pairs = [(p, "") for p in candidates]
    root = os.environ.get("PYPROFD_PYTHONS_ROOT", DEFAULT_ROOT)
    if roots and root and os.geteuid() == 0 and os.path.isdir(root):
        root = os.path.realpath(root)
        for p in sorted(glob.glob(root + "/usr/bin/python3.*[0-9]") +
                        glob.glob(root + "/usr/bin/python3.*[0-9]d")):
            pairs.append((p, root))
    for path, root in pairs:
        real = os.path.realpath(path)
        if not os.access(real, os.X_OK):
            continue
        # Once each file: a build installs python3.N and python3.Nt as one, hard-linked.
        st = os.stat(real)
        if real in seen or (st.st_dev, st.st_ino) in seen:
            continue
        seen.update((real, (st.st_dev, st.st_ino)))
        py = _ask(real[len(root):] if root else real, root)
        if py and py.major == 3 and 8 <= py.minor <= 16:
            found.append(py)
    return found


def newest(pys, minor=None, debug=False):
    """The newest release build (of that minor version when given): Debian's before pyenv's."""
    pys = [p for p in pys if p.debug == debug and not p.free_threaded and p.minor <= 15 and
           (minor is None or p.minor == minor)]
    return max(pys, key=lambda p: (p.minor, p.micro, bool(p.root)), default=None)


def interpreters():
    """The host's own, as (label, path, minor): for the benchmarks that start targets directly."""
    return [(p.label, p.path, p.minor) for p in find(roots=False)]
