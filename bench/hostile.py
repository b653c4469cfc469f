#!/usr/bin/env python3
"""Measure what a hostile local user costs the daemon (run as root).

Three campaigns against a daemon in a temporary state directory:

  unread   a client asks for every stack of a large profile (tests/targets/
           wide.py, sampled at 1000 Hz) every 0.5 s and never reads: the
           daemon's RSS and the bytes it queues for clients, over --seconds
  lockout  the user nobody opens 64 connections and sends 2 bytes on each:
           how many it holds, whether root's `pyprofd-ctl status` and another
           user's get in, and how long the stalled ones are held
  emfile   the daemon's descriptors are used up (prlimit) with 100 clients
           waiting: its CPU % of one core and log bytes per second
  churn    --churn short-lived Python processes (1000 by default) attached
           and killed, 20 at a time, with --max-targets 4096: the daemon's
           descriptors, RSS and log lines before and after

Run it with --pyprofd of an older build for the figures before.  Prints
figures; never passes or fails on them.
"""
import argparse
import os
import resource
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from daemon import cpu_seconds  # noqa: E402
from pythons import interpreters  # noqa: E402

NOBODY = 65534


# --- the wire, by hand: a few fields of proto/pyprofd.proto are all this needs ---

def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, wire_type, payload):
    return varint(number << 3 | wire_type) + payload


def request(rid, body_field, body):
    msg = field(1, 0, varint(1)) + field(2, 0, varint(rid)) + field(body_field, 2, varint(len(body)) + body)
    return struct.pack(">I", len(msg)) + msg


def stacks_query(rid, pid, from_unix=None):
    body = field(1, 0, varint(pid))
    if from_unix is not None:
        body += field(4, 1, struct.pack("<d", from_unix))
    return request(rid, 20, body)


def attach_request(rid, pid, rate_hz):
    return request(rid, 10, field(1, 0, varint(pid)) + field(2, 0, varint(rate_hz)))


def read_frame(sock):
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            raise SystemExit("the daemon closed the connection")
        head += chunk
    (n,) = struct.unpack(">I", head)
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        if not chunk:
            raise SystemExit("the daemon closed the connection")
        body += chunk
    return body


def answered_with(body, number):
    """Whether a response carries field `number` (3: an error, 10: an attach result)."""
    at = 0
    while at < len(body):
        key, shift = 0, 0
        while True:
            b = body[at]
            at += 1
            key |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if key >> 3 == number:
            return True
        if key & 7 == 0:
            while body[at] & 0x80:
                at += 1
            at += 1
        elif key & 7 == 2:
            length, shift = 0, 0
            while True:
                b = body[at]
                at += 1
                length |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            at += length
        else:
            return False
    return False


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Daemon:
    def __init__(self, args, dir, extra=()):
        self.args, self.dir = args, dir
        self.state = os.path.join(dir, "state")
        self.sock = os.path.join(dir, "pyprofd.sock")
        self.log_path = os.path.join(dir, "daemon.log")
        os.chmod(dir, 0o755)
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([args.pyprofd, "--state-dir", self.state, "--socket", self.sock,
                                      *extra], stdout=self.log, stderr=self.log)
        for _ in range(200):
            if os.path.exists(self.sock):
                return
            time.sleep(0.05)
        raise SystemExit("the daemon did not start: see %s" % self.log_path)

    def ctl(self, *argv, user=None):
        cmd = [self.args.ctl, "--socket", self.sock, *argv]
        if user is not None:
            cmd = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True)

    def status(self):
        import json
        r = self.ctl("status", "--json")
        return json.loads(r.stdout) if r.returncode == 0 else {}

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


def campaign_unread(args, python):
    dir = tempfile.mkdtemp(prefix="pyprofd-hostile-")
    d = Daemon(args, dir)
    with open(os.path.join(HERE, "..", "tests", "targets", "wide.py")) as f:
        program = f.read()
    target = subprocess.Popen([python, "-I", "-c", program])
    try:
        for _ in range(100):
            if d.ctl("attach", str(target.pid), "--rate", "1000").returncode == 0:
                break
            time.sleep(0.1)
        time.sleep(6)
        d.ctl("detach", str(target.pid))
        base = rss_bytes(d.proc.pid)
        hog = connect(d.sock)
        hog.setblocking(False)
        most_rss, most_queued, sent = base, 0, 0
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            try:
                hog.send(stacks_query(sent + 1, target.pid))
                sent += 1
            except BlockingIOError:
                pass  # the daemon reads no more from it: backpressure
            except OSError:
                break  # it closed the connection
            most_rss = max(most_rss, rss_bytes(d.proc.pid))
            most_queued = max(most_queued, d.status().get("queued_bytes", 0))
            time.sleep(0.5)
        hog.close()
        print("unread   %d queries sent in %.0f s, none read: daemon RSS %.1f MiB before, %.1f MiB at most; "
              "at most %.1f MiB queued for clients (status)"
              % (sent, args.seconds, base / 2**20, most_rss / 2**20, most_queued / 2**20))
    finally:
        target.kill()
        target.wait()
        d.stop()
        shutil.rmtree(dir, ignore_errors=True)


def campaign_lockout(args):
    dir = tempfile.mkdtemp(prefix="pyprofd-hostile-")
    d = Daemon(args, dir)
    ready_r, ready_w = os.pipe()
    child = os.fork()
    if child == 0:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        held = []
        for _ in range(64):
            s = connect(d.sock)
            s.send(b"\0\0")
            held.append(s)
        time.sleep(1)
        taken = 0
        for s in held:
            s.settimeout(0.05)
            try:
                taken += not s.recv(4096)  # nothing yet: taken (a refusal says why at once)
            except socket.timeout:
                taken += 1
            except OSError:
                pass
        os.write(ready_w, struct.pack("i", taken))
        t0 = time.monotonic()
        open_ones = list(held)
        while open_ones and time.monotonic() - t0 < 60:
            still = []
            for s in open_ones:
                s.settimeout(0)
                try:
                    if s.recv(4096) == b"":
                        continue
                    still.append(s)
                except (BlockingIOError, socket.timeout):
                    still.append(s)
                except OSError:
                    pass
            open_ones = still
            time.sleep(0.2)
        os.write(ready_w, struct.pack("d", time.monotonic() - t0))
        os._exit(0)
    taken = struct.unpack("i", os.read(ready_r, 4))[0]
    root_ok = d.ctl("status").returncode == 0
    other_ok = d.ctl("status", user=1).returncode == 0
    print("lockout  nobody holds %d of 64 connections; root's status %s, another user's %s"
          % (taken, "answered" if root_ok else "REFUSED", "answered" if other_ok else "REFUSED"))
    held_s = struct.unpack("d", os.read(ready_r, 8))[0]
    os.waitpid(child, 0)
    print("lockout  the stalled connections were held %.1f s after the hog last looked%s"
          % (held_s, " (gave up waiting)" if held_s >= 60 else ""))
    d.stop()
    shutil.rmtree(dir, ignore_errors=True)


def campaign_emfile(args):
    dir = tempfile.mkdtemp(prefix="pyprofd-hostile-")
    d = Daemon(args, dir)
    open_now = len(os.listdir("/proc/%d/fd" % d.proc.pid))
    resource.prlimit(d.proc.pid, resource.RLIMIT_NOFILE, (open_now + 4, open_now + 4))
    clients = [connect(d.sock) for _ in range(100)]
    time.sleep(0.5)
    cpu0, log0, t0 = cpu_seconds(d.proc.pid), os.path.getsize(d.log_path), time.monotonic()
    time.sleep(5)
    cpu1, log1, t1 = cpu_seconds(d.proc.pid), os.path.getsize(d.log_path), time.monotonic()
    print("emfile   out of descriptors with 100 clients waiting: daemon CPU %.1f %% of a core, log %.0f bytes/s"
          % (100 * (cpu1 - cpu0) / (t1 - t0), (log1 - log0) / (t1 - t0)))
    for c in clients:
        c.close()
    d.stop()
    shutil.rmtree(dir, ignore_errors=True)


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def campaign_churn(args, python):
    dir = tempfile.mkdtemp(prefix="pyprofd-hostile-")
    d = Daemon(args, dir, ("--max-targets", "4096"))
    conn = connect(d.sock)
    rid = 0

    def attach(pid):
        nonlocal rid
        for _ in range(1000):
            rid += 1
            conn.sendall(attach_request(rid, pid, 100))
            if answered_with(read_frame(conn), 10):
                return
            time.sleep(0.01)  # its interpreter is not up yet
        raise SystemExit("pid %d never became attachable" % pid)

    fds0, rss0, log0 = fd_count(d.proc.pid), rss_bytes(d.proc.pid), os.path.getsize(d.log_path)
    done = 0
    while done < args.churn:
        batch = [subprocess.Popen([python, "-I", "-S", "-c", "import time\nwhile True: time.sleep(1)"])
                 for _ in range(min(20, args.churn - done))]
        for p in batch:
            attach(p.pid)
        for p in batch:
            p.kill()
            p.wait()
        done += len(batch)
    for _ in range(100):  # every exit noticed: the next sample of each fails
        st = d.status()
        if st.get("targets_sampling", 0) == 0:
            break
        time.sleep(0.1)
    fds1, rss1 = fd_count(d.proc.pid), rss_bytes(d.proc.pid)
    conn.close()
    d.stop()
    with open(d.log_path, "rb") as f:
        f.seek(log0)
        lines = f.read().count(b"\n")
    print("churn    %d short-lived targets attached and exited (%d listed exited, %d sampling): daemon "
          "descriptors %d before, %d after; RSS %.1f MiB before, %.1f MiB after; %d log lines"
          % (done, st.get("targets_exited", 0), st.get("targets_sampling", 0), fds0, fds1, rss0 / 2**20,
             rss1 / 2**20, lines))
    shutil.rmtree(dir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pyprofd", default="build/pyprofd")
    ap.add_argument("--ctl", default="build/pyprofd-ctl")
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--only", choices=["unread", "lockout", "emfile", "churn"])
    ap.add_argument("--churn", type=int, default=1000, help="short-lived targets of the churn campaign")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the campaigns act as other users and limit the daemon")
    args.pyprofd, args.ctl = os.path.abspath(args.pyprofd), os.path.abspath(args.ctl)
    pythons = sorted(interpreters(), key=lambda p: p[2])
    if not pythons:
        raise SystemExit("no CPython found")
    if args.only in (None, "unread"):
        campaign_unread(args, pythons[-1][1])
    if args.only in (None, "lockout"):
        campaign_lockout(args)
    if args.only in (None, "emfile"):
        campaign_emfile(args)
    if args.only in (None, "churn"):
        campaign_churn(args, pythons[0][1])


if __name__ == "__main__":
    main()
