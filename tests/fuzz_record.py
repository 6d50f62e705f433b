"""One fuzz case of a shared SeqRecord under hostile buffer contents.

A *case* (a JSON-able dict) is a record layout, a list of word writes into
the record's buffer, and a set of roles.  ``run_case(case)`` plays it:

1. a file in /dev/shm holds the record in a slice of a larger mapping, with
   random canary bytes before it (a page) and after it (a page and the rest
   of the last one);
2. the record is created (``SeqRecord.create`` on the slice) and given
   values; the writes ``when="before"`` are applied;
3. each role runs in its own fresh interpreter (``subprocess``: a crash is
   observed, not suffered), attaches to the slice and says so;
4. the writes ``when="after"`` are applied to the attached record; writes
   ``when="during"`` are rewritten over and over by a scribbler process
   for as long as the roles run;
5. the roles run for ``duration`` seconds:

   - reader: ``read``, ``read_into``, ``read_versioned``, ``read_dict``,
     ``rec[name]``, ``get`` (a record's reader never waits: bound 0 s);
   - writer: ``write(timeout=T)`` sections (some rolled back by an
     exception) and ``update()``, which has no timeout: a SIGALRM after
     ``untimed_bound`` seconds interrupts it, and it must let that
     interrupt through (a call deaf to it is "overtime");
   - waiter: ``wait(seq, T)``, ``wait(seq, 0)``, ``wait_async(seq, T)``
     under ``asyncio.wait_for``, ``changes(timeout=T)``;

6. afterwards the canaries are compared, and each child's exit status,
   per-call timings and exceptions are collected.

A call that returns later than its bound plus ``slack`` seconds is
"overtime"; a child still running at the case's hard deadline is killed
and counted as a hang (the call it was in is read from its status slot, a
small shared file it updates around every call).  A child killed by a
signal or exiting abnormally (an abort, a fatal error) is a crash.
Exceptions of the expected kinds (RuntimeError, TimeoutError, OSError; a
ValueError at attach) are counted with their messages; any other is
"unexpected".

Stdlib only, no pytest, no Hypothesis (the children import this module);
the driver is ``tests/fuzz_record_driver.py``, the corpus replay
``tests/test_fuzz_record.py``.  Replay a case by hand with
``python tests/fuzz_record.py FILE.json...``.

Offsets (x86-64 glibc; from the start of the record): see WORDS.
"""
from __future__ import annotations

import json
import mmap
import os
import random
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# ---- the record's words ----

#: name -> (offset, width in bytes, signed).  The header's first cache line,
#: the seqlock_t from 64 (its count and wake_from alone on 128 bytes, the
#: lock word from 192, glibc's pthread_mutex_t "beacon" from 224), its
#: padding to 320; the layout text follows at 320, then copy 0 and copy 1,
#: each from a multiple of 128 (record.h, version 6).
WORDS = {
    "magic": (0, 4, False),
    "version": (4, 4, False),
    "data_bytes": (8, 4, False),
    "layout_bytes": (12, 4, False),
    "lock_abi": (16, 4, False),
    "recoveries": (20, 4, False),
    "reserved0": (24, 4, False),
    "reserved9": (60, 4, False),
    "sequence": (64, 8, False),
    "wake_from": (72, 8, False),
    "count_line": (80, 8, False),
    "holder": (192, 8, False),
    "starving": (200, 8, False),
    "gaps": (208, 8, False),
    "ready": (216, 4, False),
    "abandoned": (220, 4, False),
    "beacon.lock": (224, 4, True),
    "beacon.count": (228, 4, False),
    "beacon.owner": (232, 4, True),
    "beacon.nusers": (236, 4, False),
    "beacon.kind": (240, 4, True),
    "beacon.spins": (244, 4, False),
    "beacon.list_prev": (248, 8, False),
    "beacon.list_next": (256, 8, False),
    "owner_token": (264, 8, False),
    "owner_pid_ns": (272, 8, False),
    "owner_started": (280, 8, False),
    "owner_tid": (288, 4, False),
    "lock_pad": (296, 8, False),
}
HEADER_SIZE = 320
RECORD_ALIGN = 64
COPY_LINE = 128
BEACON = (224, 264)  # the pthread_mutex_t's bytes
# What a writer trusts co-writers with (docs/implementation.md, "Whom a
# writer trusts"): glibc's robust-list links inside the beacon, which its
# unlock follows, and the beacon's word, where a value that reads as the
# kernel's death mark (FUTEX_OWNER_DIED, no thread id) hands a live
# holder's beacon to the next taker, and the beacon's kind, which glibc
# reads again after the writer's check (another kind takes glibc down
# paths that assert).  A writer's crash is tolerated only while a
# co-tenant rewrites these.
TRUSTED = ((224, 228), (240, 244), (248, 264))
SEQLOCK_READY = 0x59444552
FUTEX_WAITERS = 0x80000000
FUTEX_OWNER_DIED = 0x40000000

ROLES = ("reader", "writer", "waiter")
#: How long a child may take to start and attach before it counts as hung.
STARTUP_TIMEOUT = 20.0
#: Extra time past a case's last bound before children are killed as hung.
HANG_GRACE = 2.0

TESTS_DIR = Path(__file__).resolve().parent


def layout_text(fields):
    return ";".join(f"{name}:{code}" for name, code in fields.items())


def data_bytes(fields):
    return struct.calcsize("".join(fields.values()))


def _round_up(n, to):
    return (n + to - 1) // to * to


def geometry(fields):
    """(layout_bytes, data_bytes, offset of copy 0, offset of copy 1,
    record size) as the creator lays them out."""
    lb = len(layout_text(fields).encode())
    db = data_bytes(fields)
    stride = _round_up(db, COPY_LINE)
    c0 = _round_up(HEADER_SIZE + _round_up(lb, RECORD_ALIGN), COPY_LINE)
    return lb, db, c0, c0 + stride, c0 + 2 * stride


def word_name_at(fields, offset):
    """A readable name for a record offset (for reports and corpus files)."""
    for name, (off, width, _) in WORDS.items():
        if off <= offset < off + width:
            return name if off == offset else f"{name}+{offset - off}"
    lb, _, c0, c1, size = geometry(fields)
    if offset < c0:
        return f"layout[{offset - HEADER_SIZE}]"
    if offset < c1:
        return f"copy0[{(offset - c0) // 8}]+{(offset - c0) % 8}"
    if offset < size:
        return f"copy1[{(offset - c1) // 8}]+{(offset - c1) % 8}"
    return f"outside+{offset - size}"


# ---- values ----

def _mask(value, width):
    return value & ((1 << (8 * width)) - 1)


def resolve_value(spec, current, width, pids):
    """The bytes' new unsigned value: ``spec`` is an int (absolute), or
    ["add", d], ["xor", m], ["or", m] on the current value, or ["tid", k,
    bits]: the thread id of role k's process (its main thread) or, for k
    < 0 or a role not started, of the process doing the write, ORed with
    bits (FUTEX_WAITERS, FUTEX_OWNER_DIED)."""
    if isinstance(spec, int):
        return _mask(spec, width)
    op = spec[0]
    if op == "add":
        return _mask(current + spec[1], width)
    if op == "xor":
        return _mask(current ^ spec[1], width)
    if op == "or":
        return _mask(current | spec[1], width)
    if op == "tid":
        k = spec[1]
        tid = pids[k] if 0 <= k < len(pids) and pids[k] else os.getpid()
        return _mask(tid | (spec[2] if len(spec) > 2 else 0), width)
    raise ValueError(f"unknown value spec {spec!r}")


_FMT = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}


def poke(buf, base, write, pids):
    """Apply one write {"offset", "width", "value"} at base + offset."""
    fmt = _FMT[write["width"]]
    at = base + write["offset"]
    (current,) = struct.unpack_from(fmt, buf, at)
    struct.pack_into(fmt, buf, at, resolve_value(write["value"], current, write["width"], pids))


# ---- the case's memory ----

PAGE = mmap.PAGESIZE


class SharedFile:
    """/dev/shm/<name>: canary | record | canary, mapped read-write."""

    def __init__(self, record_size, rng):
        self.pre = PAGE
        self.size = record_size
        self.total = _round_up(self.pre + record_size + PAGE, PAGE)
        fd, self.path = tempfile.mkstemp(prefix="seqlock-fuzz-", dir="/dev/shm")
        try:
            os.ftruncate(fd, self.total)
            self.map = mmap.mmap(fd, self.total)
        finally:
            os.close(fd)
        self.canary = rng.randbytes(self.total)
        self.map[:] = self.canary
        self.map[self.pre:self.pre + self.size] = bytes(self.size)

    def damaged_canaries(self):
        """[(start, end)] ranges of canary bytes that changed, relative to
        the record's start (negative: before it)."""
        ranges = []
        for lo, hi in ((0, self.pre), (self.pre + self.size, self.total)):
            now = self.map[lo:hi]
            was = self.canary[lo:hi]
            if now == was:
                continue
            start = None
            for i in range(hi - lo):
                differs = now[i] != was[i]
                if differs and start is None:
                    start = i
                elif not differs and start is not None:
                    ranges.append((lo + start - self.pre, lo + i - self.pre))
                    start = None
            if start is not None:
                ranges.append((lo + start - self.pre, hi - self.pre))
        return ranges

    def close(self):
        try:
            self.map.close()
        except BufferError:
            pass
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def initial_values(fields, rng):
    values = {}
    for name, code in fields.items():
        values[name] = _value_for(code, rng)
    return values


def _scalar(kind, rng):
    if kind == "d":
        return rng.choice([0.0, -1.5, 1e300, rng.uniform(-1e6, 1e6)])
    if kind == "q":
        return rng.randrange(-(2**63), 2**63)
    if kind == "Q":
        return rng.randrange(0, 2**64)
    return rng.random() < 0.5


def _value_for(code, rng):
    kind = code[-1]
    if code[:-1]:
        return tuple(_scalar(kind, rng) for _ in range(int(code[:-1])))
    return _scalar(kind, rng)


# ---- children: the mapping, with guard regions ----

#: Address space reserved (PROT_NONE) on each side of a child's mapping
#: of the file: a read or write that leaves the file's pages within it
#: faults (SIGSEGV) instead of landing silently in a neighbour's memory.
GUARD_BYTES = 1 << 36


class GuardedMap:
    """The case's file mapped MAP_SHARED between two PROT_NONE guard
    regions (ctypes mmap with MAP_FIXED into a reservation); without
    guard, a plain mmap.mmap."""

    def __init__(self, path, write, guard=True):
        fd = os.open(path, os.O_RDWR if write else os.O_RDONLY)
        try:
            self.total = os.fstat(fd).st_size
            self.write = write
            self.plain = None
            self.base = None
            if guard:
                try:
                    self._guarded(fd)
                except OSError:
                    self.base = None
            if self.base is None:
                self.plain = mmap.mmap(fd, 0, access=mmap.ACCESS_WRITE if write else mmap.ACCESS_READ)
        finally:
            os.close(fd)

    def _guarded(self, fd):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self.libc = libc
        PROT_NONE, PROT_READ, PROT_WRITE = 0, 1, 2
        MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS, MAP_NORESERVE = 1, 2, 0x10, 0x20, 0x4000
        failed = ctypes.c_void_p(-1).value
        span = self.total + 2 * GUARD_BYTES
        base = libc.mmap(None, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
        if base in (None, failed):
            raise OSError(ctypes.get_errno(), "reserving guard regions")
        prot = PROT_READ | (PROT_WRITE if self.write else 0)
        addr = libc.mmap(base + GUARD_BYTES, self.total, prot, MAP_SHARED | MAP_FIXED, fd, 0)
        if addr in (None, failed):
            libc.munmap(base, span)
            raise OSError(ctypes.get_errno(), "mapping the file")
        self.base, self.span = base, span
        self.array = (ctypes.c_char * self.total).from_address(addr)

    def view(self, lo, hi):
        if self.plain is not None:
            return memoryview(self.plain)[lo:hi]
        mv = memoryview(self.array).cast("B")[lo:hi]
        return mv if self.write else mv.toreadonly()

    def close(self):
        if self.plain is not None:
            self.plain.close()
        elif self.base is not None:
            self.array = None
            self.libc.munmap(self.base, self.span)
            self.base = None


# ---- children: the status slot ----

# kind code (u32), state (u32: 1 in a call, 0 between), calls so far (u64),
# the call's start on CLOCK_MONOTONIC (f64), its bound in seconds (f64)
STATUS = struct.Struct("<IIqdd")
CALL_KINDS = (
    "start", "attach", "read", "read_into", "read_versioned", "read_dict",
    "getitem", "get", "write", "write_abort", "update", "wait", "wait0",
    "wait_async", "changes", "teardown", "private_lock",
)


def read_status(path):
    try:
        with open(path, "rb") as f:
            kind, state, calls, t0, bound = STATUS.unpack(f.read(STATUS.size))
    except (OSError, struct.error):
        return None
    return {"call": CALL_KINDS[kind] if kind < len(CALL_KINDS) else str(kind),
            "in_call": bool(state), "calls": calls, "t0": t0, "bound": bound}


# ---- children: the roles ----

class _Interrupted(Exception):
    """update()'s watchdog: SIGALRM turned into an exception."""


class _Rollback(Exception):
    """Raised inside a write section to roll it back."""


def _expected(kind, exc):
    if kind == "attach" and isinstance(exc, ValueError):
        return True
    if kind == "teardown" and isinstance(exc, BufferError):
        # The record still exports the buffer: it keeps itself alive while
        # its lock word looks held by this thread (an unlock a co-tenant
        # made fail), so glibc never links into unmapped memory.  Counted.
        return True
    return isinstance(exc, (RuntimeError, TimeoutError, OSError))


class Child:
    def __init__(self, spec):
        self.spec = spec
        self.role = spec["role"]
        self.slack = spec["slack"]
        self.timeout = spec["timeout"]
        self.rng = random.Random(spec["seed"])
        fd = os.open(spec["status"], os.O_RDWR)
        try:
            self.status = mmap.mmap(fd, STATUS.size)
        finally:
            os.close(fd)
        self.ncalls = 0
        self.report = {
            "role": self.role, "attach": None, "readonly": None,
            "calls": {}, "max_seconds": {}, "overtime": [], "overtime_count": 0,
            "errors": {}, "unexpected": [], "interrupted_updates": 0,
        }

    def _status(self, kind, state, t0=0.0, bound=0.0):
        STATUS.pack_into(self.status, 0, CALL_KINDS.index(kind), state, self.ncalls, t0, bound)

    def call(self, kind, bound, fn, *args):
        """Run fn(*args) as one timed call; returns (ok, result)."""
        t0 = time.monotonic()
        self._status(kind, 1, t0, bound)
        ok, result, note = True, None, None
        try:
            result = fn(*args)
        except (_Interrupted, _Rollback) as exc:
            note = type(exc).__name__
        except _OuterTimeout:
            note = "outer-timeout"
        except Exception as exc:  # noqa: BLE001 - every exception is data here
            ok = False
            note = "error"
            key = f"{type(exc).__name__}: {str(exc)[:200]}"
            errors = self.report["errors"].setdefault(kind, {})
            errors[key] = errors.get(key, 0) + 1
            if not _expected(kind, exc):
                if len(self.report["unexpected"]) < 10:
                    import traceback

                    self.report["unexpected"].append(
                        {"call": kind, "error": key,
                         "traceback": traceback.format_exc()[-2000:]})
        dur = time.monotonic() - t0
        self.ncalls += 1
        self._status(kind, 0)
        calls = self.report["calls"]
        calls[kind] = calls.get(kind, 0) + 1
        if dur > self.report["max_seconds"].get(kind, 0.0):
            self.report["max_seconds"][kind] = round(dur, 4)
        if note == "_Interrupted":
            self.report["interrupted_updates"] += 1
        if dur > bound + self.slack or note == "outer-timeout":
            self.report["overtime_count"] += 1
            if len(self.report["overtime"]) < 10:
                self.report["overtime"].append(
                    {"call": kind, "seconds": round(dur, 3), "bound": bound,
                     "note": "asyncio.wait_for's outer timeout fired"
                     if note == "outer-timeout" else None})
        return ok, result

    # -- attach --

    def attach(self):
        from seqlock_py import SeqRecord

        spec = self.spec
        fields = spec["fields"]
        lo, hi = spec["offset"], spec["offset"] + spec["size"]
        readonly = spec.get("readonly", False)
        self.maps = []

        def open_map(write):
            m = GuardedMap(spec["path"], write, spec.get("guard", True))
            self.maps.append(m)
            return m.view(lo, hi)

        self.rec = None
        if readonly:
            view = open_map(False)
            try:
                self.rec = SeqRecord.attach(view, **fields)
                self.report["readonly"] = "attached"
            except (TypeError, BufferError) as exc:
                # A build whose attach() wants a writable buffer: say so,
                # and read through a writable one.
                self.report["readonly"] = f"refused: {type(exc).__name__}: {exc}"[:200]
                view.release()
        if self.rec is None:
            view = open_map(True)
            self.rec = SeqRecord.attach(view, **fields)
        self.view = view

    def teardown(self):
        self.rec = None
        loop = getattr(self, "loop", None)
        if loop is not None:
            loop.close()
        import gc

        # A wait_async() thread whose wait has not ended yet still holds
        # the record: it must let go within its timeout.
        give_up = time.monotonic() + self.timeout + self.slack / 2
        while True:
            gc.collect()
            try:
                self.view.release()
                break
            except BufferError:
                if time.monotonic() > give_up:
                    raise
                time.sleep(0.01)
        for m in self.maps:
            m.close()

    # -- the roles' calls --

    def reader_calls(self, rec):
        fields = list(self.spec["fields"])
        raw = bytearray(rec.nbytes)
        getitem = rec.__getitem__
        return [
            ("read", 0.0, rec.read, ()),
            ("read_into", 0.0, rec.read_into, (raw,)),
            ("read_versioned", 0.0, rec.read_versioned, ()),
            ("read_dict", 0.0, rec.read_dict, ()),
            *[("getitem", 0.0, getitem, (name,)) for name in fields],
            ("get", 0.0, rec.get, (fields[-1], None)),
        ]

    def writer_calls(self, rec):
        fields = self.spec["fields"]
        rng = self.rng
        timeout = self.timeout
        arrays = [n for n, c in fields.items() if c[:-1]]

        def section(rollback):
            with rec.write(timeout=timeout) as w:
                for name, code in fields.items():
                    if rng.random() < 0.5:
                        setattr(w, name, _value_for(code, rng))
                for name in arrays:
                    arr = getattr(w, name)
                    arr[rng.randrange(len(arr))] = _scalar(fields[name][-1], rng)
                if rollback:
                    raise _Rollback

        untimed = self.spec["untimed_bound"]

        def update():
            values = initial_values(fields, rng)
            self.alarm_armed = True
            signal.setitimer(signal.ITIMER_REAL, untimed)
            try:
                rec.update(**values)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                self.alarm_armed = False

        return [
            ("write", timeout, section, (False,)),
            ("write_abort", timeout, section, (True,)),
            ("write", timeout, section, (False,)),
            ("update", untimed, update, ()),
        ]

    def waiter_calls(self, rec):
        import asyncio

        timeout = self.timeout
        loop = asyncio.new_event_loop()
        self.loop = loop
        outer = timeout + self.slack / 2

        def wait_async():
            seq = rec.sequence
            try:
                return loop.run_until_complete(
                    asyncio.wait_for(rec.wait_async(seq, timeout), outer))
            except asyncio.TimeoutError:
                # wait_async let its own timeout pass: the outer one fired
                raise _OuterTimeout from None

        def changes():
            it = rec.changes(timeout=timeout)
            try:
                next(it)  # the current snapshot: at once
                next(it, None)  # the next write's, or the end after timeout
            finally:
                close = getattr(it, "close", None)
                if close is not None:
                    close()

        return [
            ("wait", timeout, lambda: rec.wait(rec.sequence, timeout), ()),
            ("wait0", 0.0, lambda: rec.wait(rec.sequence, 0), ()),
            ("wait_async", timeout, wait_async, ()),
            ("changes", 2 * timeout, changes, ()),
        ]

    # -- the whole life of a child --

    def run(self):
        spec = self.spec
        self.alarm_armed = False

        def on_alarm(signum, frame):
            if self.alarm_armed:
                self.alarm_armed = False
                raise _Interrupted

        signal.signal(signal.SIGALRM, on_alarm)
        ok, _ = self.call("attach", 0.0, self.attach)
        self.report["attach"] = "ok" if ok else "failed"
        if ok:
            # Ready to go at once (asyncio imported, calls bound): the
            # roles start together.
            self.calls = {"reader": self.reader_calls, "writer": self.writer_calls,
                          "waiter": self.waiter_calls}[self.role](self.rec)
        out = sys.stdout
        out.write("attached\n" if ok else "attach-failed\n")
        out.flush()
        if not ok:
            self.finish()
            return
        go = sys.stdin.readline().split()
        if not go or go[0] != "go":
            self.finish()
            return
        import faulthandler

        # Every thread's stack shortly before the parent kills us as hung.
        faulthandler.dump_traceback_later(max(0.1, float(go[1]) - 0.3), exit=False)
        self._loop(spec["duration"])
        self.finish(teardown=True)

    def _loop(self, duration):
        # Its own frame: nothing of the record's outlives it but self.rec.
        calls, self.calls = self.calls, None
        deadline = time.monotonic() + duration
        i = 0
        while time.monotonic() < deadline:
            kind, bound, fn, args = calls[i % len(calls)]
            self.call(kind, bound, fn, *args)
            i += 1

    def finish(self, teardown=False):
        # The report first: a crash in teardown still leaves the counts.
        if teardown:
            self._write_report()
            self.call("teardown", self.timeout, self.teardown)
            if self.role == "writer":
                # A lock word left on this thread's robust list in unmapped
                # memory crashes the next, unrelated lock (issue 17, 4).
                from seqlock_py import SeqLock

                def private_lock():
                    lock = SeqLock()
                    for _ in range(3):
                        with lock:
                            pass

                self.call("private_lock", 0.0, private_lock)
        self._write_report()
        self._status("teardown", 0)

    def _write_report(self):
        data = json.dumps(self.report).encode()
        tmp = self.spec["report"] + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, self.spec["report"])


class _OuterTimeout(Exception):
    """wait_async() let its timeout pass: asyncio.wait_for's fired."""


def _child_main():
    spec = json.loads(sys.argv[1])
    import faulthandler

    # Every thread's stack if the child is still attaching near the
    # parent's startup deadline; run() re-arms it for the run's.
    faulthandler.dump_traceback_later(STARTUP_TIMEOUT - 0.5, exit=False)
    Child(spec).run()
    sys.stdout.flush()
    os._exit(0)


# ---- children: self-tests of the harness (planted failures) ----

def _selftest_main():
    """Roles that plant each failure the harness must see."""
    spec = json.loads(sys.argv[1])
    kind = spec["role"]
    fd = os.open(spec["status"], os.O_RDWR)
    status = mmap.mmap(fd, STATUS.size)
    os.close(fd)
    print("attached", flush=True)
    sys.stdin.readline()
    if kind == "selftest-oob":
        fd = os.open(spec["path"], os.O_RDWR)
        m = mmap.mmap(fd, 0)
        m[spec["offset"] + spec["size"] + 5] ^= 0xFF  # past the record
        m[spec["offset"] - 1] ^= 0xFF  # before it
    elif kind == "selftest-abort":
        os.abort()
    elif kind == "selftest-hang":
        STATUS.pack_into(status, 0, CALL_KINDS.index("wait"), 1, 7, time.monotonic(), 0.1)
        while True:
            time.sleep(1)
    elif kind == "selftest-overtime":
        child = Child(spec)
        child.call("read", 0.0, time.sleep, spec["slack"] + 0.2)
        child._write_report()
    os._exit(0)


# ---- the scribbler ----

def _scribbler_main():
    """Rewrite the "during" words until killed (argv: a JSON spec)."""
    spec = json.loads(sys.argv[1])
    fd = os.open(spec["path"], os.O_RDWR)
    m = mmap.mmap(fd, 0)
    os.close(fd)
    base = spec["offset"]
    writes = spec["writes"]
    pids = spec["pids"]
    paced = spec["paced"]
    print("scribbling", flush=True)
    end = time.monotonic() + spec["seconds"]
    n = 0
    while time.monotonic() < end:
        for w in writes:
            values = w["values"]
            poke(m, base, dict(w, value=values[n % len(values)]), pids)
        n += 1
        if paced:
            time.sleep(0.001)
    os._exit(0)


# ---- the parent ----

def package_root():
    import seqlock_py

    return os.path.dirname(os.path.dirname(seqlock_py.__file__))


def _child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [package_root(), str(TESTS_DIR)]
        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.pop("PYTHONSTARTUP", None)
    return env


def _spawn(entry, spec, python, env, stderr):
    code = f"import fuzz_record; fuzz_record.{entry}()"
    return subprocess.Popen(
        [python, "-X", "faulthandler", "-c", code, json.dumps(spec)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
        env=env, cwd="/")


def _stderr_gist(stderr):
    """The child's own words on its death (a glibc assertion, seqlock's
    abort message, an uncaught error), not the interpreter's stack dump."""
    skip = ("Fatal Python error", "Current thread", "Thread 0x", "  File", "Timeout (",
            "Extension modules", "Python runtime state", "<no Python frame>",
            "Stack (most recent", "Traceback")
    for line in stderr.splitlines():
        line = line.strip()
        if line and not line.startswith(skip) and not line.startswith("File "):
            return line[:200]
    return None


def _describe_exit(code):
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit {code}"


def normalise_case(case):
    """Fill a case's defaults (in place) and return it."""
    case.setdefault("duration", 0.5)
    case.setdefault("timeout", 0.2)
    case.setdefault("slack", 0.5)
    case.setdefault("untimed_bound", 0.5)
    case.setdefault("paced", False)
    case.setdefault("seed", 0)
    case.setdefault("writes", [])
    for w in case["writes"]:
        # A write that names a word takes the word's offset in this
        # layout: a corpus case means the word, wherever a version puts it.
        if "offset" not in w or w.get("word") in WORDS:
            w["offset"], w["width"], _ = WORDS[w["word"]]
        w.setdefault("word", word_name_at(case["fields"], w["offset"]))
        if w["when"] == "during" and "values" not in w:
            w["values"] = [w.pop("value")]
    case["roles"] = [r if isinstance(r, dict) else {"role": r} for r in case["roles"]]
    return case


def case_mode(case):
    return "during" if any(w["when"] == "during" for w in case["writes"]) else "static"


def run_case(case, *, python=None):
    """Play one case; return its result (a JSON-able dict).

    result["failures"] lists what breaks the promise: crashes, hangs,
    overtime calls, unexpected exceptions, bytes written outside the
    record; each {"kind", "role", "index", "mode", ...}.  A writer crash
    while a co-tenant rewrites the beacon's word or its robust-list links
    ("during", TRUSTED) is listed with "tolerated": True (the trust model
    lets a writer trust co-writers with those)."""
    case = normalise_case(json.loads(json.dumps(case)))
    python = python or sys.executable
    fields = case["fields"]
    rng = random.Random(case["seed"])
    _, _, _, _, size = geometry(fields)
    mode = case_mode(case)
    beacon_scribbled = any(
        w["when"] == "during" and w["offset"] < hi and w["offset"] + w["width"] > lo
        for w in case["writes"] for lo, hi in TRUSTED)
    shm = SharedFile(size, rng)
    work = tempfile.mkdtemp(prefix="seqlock-fuzz-")
    env = _child_env()
    children = []
    scribbler = None
    result = {"mode": mode, "roles": [], "failures": [], "errors": {},
              "oob": [], "harness": []}
    t_start = time.monotonic()
    try:
        from seqlock_py import SeqRecord

        if SeqRecord.buffer_size(**fields) != size:
            raise AssertionError(
                f"fuzz_record.geometry() disagrees with the build: {size} != "
                f"{SeqRecord.buffer_size(**fields)} bytes for {fields}")
        view = memoryview(shm.map)[shm.pre:shm.pre + size]
        rec = SeqRecord.create(view, **fields)
        rec.update(**initial_values(fields, rng))
        del rec
        view.release()

        pids = []
        for w in case["writes"]:
            if w["when"] == "before":
                poke(shm.map, shm.pre, w, pids)

        untimed = case["untimed_bound"]
        bound = max(case["timeout"] * 2, untimed, 0.0) + case["slack"]
        run_limit = case["duration"] + bound + HANG_GRACE
        for i, role in enumerate(case["roles"]):
            status = os.path.join(work, f"status-{i}")
            with open(status, "wb") as f:
                f.write(bytes(STATUS.size))
            spec = {
                "role": role["role"], "readonly": role.get("readonly", False),
                "path": shm.path, "offset": shm.pre, "size": size,
                "fields": fields, "duration": case["duration"],
                "timeout": case["timeout"], "slack": case["slack"],
                "untimed_bound": untimed, "seed": case["seed"] * 100 + i,
                "status": status, "report": os.path.join(work, f"report-{i}.json"),
            }
            stderr = open(os.path.join(work, f"stderr-{i}"), "wb")
            entry = "_selftest_main" if role["role"].startswith("selftest") else "_child_main"
            proc = _spawn(entry, spec, python, env, stderr)
            stderr.close()
            children.append({"index": i, "role": role["role"], "spec": spec,
                             "proc": proc, "state": "starting"})
            pids.append(proc.pid)

        # every child attached (or failed to, or died)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        waiting = {c["proc"].stdout.fileno(): c for c in children}
        while waiting and time.monotonic() < deadline:
            ready, _, _ = select.select(list(waiting), [], [], max(0.0, deadline - time.monotonic()))
            for fd in ready:
                c = waiting.pop(fd)
                line = c["proc"].stdout.readline().decode(errors="replace").strip()
                c["state"] = line or "exited"
        for c in waiting.values():
            c["state"] = "startup-hang"

        for w in case["writes"]:
            if w["when"] == "after":
                poke(shm.map, shm.pre, w, pids)
        during = [w for w in case["writes"] if w["when"] == "during"]
        if during:
            sspec = {"path": shm.path, "offset": shm.pre, "writes": during,
                     "pids": pids, "paced": case["paced"],
                     "seconds": case["duration"] + bound + HANG_GRACE + 1}
            scribbler = _spawn("_scribbler_main", sspec, python, env, subprocess.DEVNULL)
            if not select.select([scribbler.stdout], [], [], STARTUP_TIMEOUT)[0]:
                result["harness"].append("the scribbler did not start")
            scribbler.stdout.readline()

        for c in children:
            if c["state"] == "attached":
                try:
                    c["proc"].stdin.write(f"go {run_limit}\n".encode())
                    c["proc"].stdin.flush()
                except BrokenPipeError:
                    pass
        t_go = time.monotonic()
        for c in children:
            try:
                c["proc"].stdin.close()
            except BrokenPipeError:
                pass

        hard = t_go + run_limit
        for c in children:
            proc = c["proc"]
            if c["state"] == "startup-hang":
                _kill(proc)
                c["hung"] = True
                continue
            try:
                proc.wait(timeout=max(0.0, hard - time.monotonic()))
                c["hung"] = False
            except subprocess.TimeoutExpired:
                c["hung"] = True
                c["hang_status"] = read_status(c["spec"]["status"])
                c["hang_seen_at"] = time.monotonic()
                _kill(proc)
        if scribbler is not None:
            _kill(scribbler)
            scribbler = None

        result["oob"] = shm.damaged_canaries()
        if result["oob"]:
            result["failures"].append({
                "kind": "oob", "role": "any", "index": -1, "mode": mode,
                "detail": "canary bytes changed at record offsets "
                          + ", ".join(f"[{a}, {b})" for a, b in result["oob"][:8])})
        for c in children:
            _collect(c, mode, beacon_scribbled, result, work)
    finally:
        for c in children:
            _kill(c["proc"])
        if scribbler is not None:
            _kill(scribbler)
        shm.close()
        for name in os.listdir(work):
            os.unlink(os.path.join(work, name))
        os.rmdir(work)
    result["seconds"] = round(time.monotonic() - t_start, 3)
    return result


def _kill(proc):
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None and not stream.closed:
            try:
                stream.close()
            except BrokenPipeError:
                pass


def _collect(c, mode, beacon_scribbled, result, work):
    i, role, proc = c["index"], c["role"], c["proc"]
    try:
        with open(c["spec"]["report"]) as f:
            report = json.load(f)
    except (OSError, ValueError):
        report = None
    try:
        with open(os.path.join(work, f"stderr-{i}"), "rb") as f:
            stderr = f.read().decode(errors="replace")
    except OSError:
        stderr = ""
    status = read_status(c["spec"]["status"])
    entry = {"index": i, "role": role, "state": c["state"],
             "exit": proc.returncode, "report": report}
    result["roles"].append(entry)
    base = {"role": role, "index": i, "mode": mode}
    fail = result["failures"].append
    if c.get("hung"):
        st = c.get("hang_status") or status or {}
        waited = (c.get("hang_seen_at", time.monotonic()) - st["t0"]) if st.get("in_call") else None
        where = st.get("call", "?") if st.get("in_call") else f"between calls (last: {st.get('call', '?')})"
        fail(dict(base, kind="hang", call=st.get("call") if st.get("in_call") else None,
                  detail=f"still running at the hard deadline, in {where}"
                         + (f" for {waited:.1f} s (bound {st['bound']} s)" if waited else "")
                         + (f" [startup]" if c["state"] == "startup-hang" else ""),
                  stderr=stderr[-3000:]))
    elif proc.returncode != 0:
        st = status or {}
        where = st.get("call", "?") if st.get("in_call") else f"between calls (last: {st.get('call', '?')})"
        tolerated = role == "writer" and mode == "during" and beacon_scribbled
        gist = _stderr_gist(stderr)
        fail(dict(base, kind="crash", signal=_describe_exit(proc.returncode),
                  call=st.get("call") if st.get("in_call") else None,
                  detail=f"{_describe_exit(proc.returncode)} in {where} after {st.get('calls', '?')} calls"
                         + (f" ({gist})" if gist else ""),
                  tolerated=tolerated, stderr=stderr[-3000:]))
    elif report is None and not role.startswith("selftest"):
        fail(dict(base, kind="crash", signal="no report", call=None,
                  detail="exited 0 without a report", tolerated=False,
                  stderr=stderr[-3000:]))
    if report:
        for o in report["overtime"][:3]:
            fail(dict(base, kind="overtime", call=o["call"],
                      detail=f"{o['call']} took {o['seconds']} s (bound {o['bound']} s"
                             f" + slack){' - ' + o['note'] if o.get('note') else ''}",
                      count=report["overtime_count"]))
        for u in report["unexpected"][:3]:
            fail(dict(base, kind="unexpected", call=u["call"], detail=u["error"],
                      traceback=u["traceback"]))
        for call, errs in report["errors"].items():
            for msg, n in errs.items():
                key = f"{role} {call}: {msg}"
                result["errors"][key] = result["errors"].get(key, 0) + n


def failed(result, *, include_tolerated=False):
    """The failures that break the promise (tolerated ones left out)."""
    return [f for f in result["failures"] if include_tolerated or not f.get("tolerated")]


def signature(result):
    """What kind of failure a result shows: {(role, kind)}."""
    return {(f["role"], f["kind"]) for f in failed(result)}


def describe(result):
    lines = []
    for f in result["failures"]:
        tol = " (tolerated: writer, beacon rewritten during the section)" if f.get("tolerated") else ""
        lines.append(f"  {f['kind']}: {f['role']}#{f['index']} [{f['mode']}] {f['detail']}{tol}")
    return "\n".join(lines)


# ---- the corpus ----

CORPUS_DIR = TESTS_DIR / "fuzz_corpus"


def load_corpus_file(path):
    with open(path) as f:
        return json.load(f)


def save_corpus_case(case, result, directory, meta):
    """Write case (and what it did) to directory/<kind>-<role>-<hash>.json;
    return the path, or None if that very case is there already."""
    import hashlib

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    body = json.dumps(case, sort_keys=True)
    digest = hashlib.sha1(body.encode()).hexdigest()[:10]
    fs = failed(result) or result["failures"]
    first = fs[0] if fs else {"kind": "none", "role": "none"}
    path = directory / f"{first['kind']}-{first['role']}-{digest}.json"
    if path.exists():
        return None
    found = [{k: v for k, v in f.items() if k in ("kind", "role", "mode", "call", "signal", "detail", "tolerated")}
             for f in fs]
    data = {"case": case, "found": dict(meta, failures=found)}
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path


def _replay_main(paths):
    bad = 0
    for p in paths:
        data = load_corpus_file(p)
        result = run_case(data["case"])
        fs = failed(result)
        print(f"{p}: {'FAIL' if fs else 'ok'} in {result['seconds']} s")
        if result["failures"]:
            print(describe(result))
        bad += bool(fs)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(_replay_main(sys.argv[1:]))
