"""A ring's buffer is untrusted: a co-tenant may write any word of it at
any moment (hostile review of issue 20, tests/hostile_20_report.md).

Readers (poll, read_last, wait, wait_async, reader(), the attributes; of a
writable and of a read-only mapping) and writers run in child processes
while this process rewrites random 32-bit words of the live ring: none may
crash or overrun a timeout for good, no byte outside the ring may change
(canaries of a page on each side), and while the slots are left alone no
entry is delivered torn (an entry's three fields come from one append).
attach() of a rewritten header gives ValueError or a ring whose calls
stay inside the buffer.  Counts, never times.
"""
from __future__ import annotations

import json
import mmap
import os
import random
import signal
import struct
import subprocess
import sys
import time
import uuid

import pytest

from process_helpers import PythonProcess, child_env, run_python
from record_helpers import HEADER_OFFSETS, LAYOUT_TEXT_OFFSET
from seqlock_py import SeqRing

FIELDS = dict(a="q", b="q", c="5d")
CAPACITY = 8
PAGE = 4096
CANARY = bytes((i * 37 + 11) % 251 for i in range(PAGE))
# Where things are in a ring of FIELDS (ring.h, version 2; its header and
# lock lie as a record's): the header's first line (0-63), its lock
# (64-319: the count's line, then the lock's words), the layout text
# (320-383), head's line (384-511), slots.
LOCK = range(HEADER_OFFSETS["sequence"][0], LAYOUT_TEXT_OFFSET)
# The whole robust mutex (a pthread_mutex_t: its lock word, owner, kind and
# robust-list links).  A writer process trusts these words: glibc follows
# the links, so scribbled ones can crash it (issue 17's trust model,
# docs/processes.md); readers never touch them.
MUTEX = range(HEADER_OFFSETS["beacon_lock"][0], HEADER_OFFSETS["owner_token"][0])
SLOTS = 512

ROLE = r'''
import asyncio, json, mmap, os, random, sys, time
from seqlock_py import SeqRing
path, size, role, duration, seed = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
rng = random.Random(seed)
ro = role == "read-only"
fd = os.open(path, os.O_RDONLY if ro else os.O_RDWR)
m = mmap.mmap(fd, 0, prot=mmap.PROT_READ if ro else mmap.PROT_READ | mmap.PROT_WRITE)
ring = SeqRing.attach(memoryview(m)[4096:4096 + size])
print("attached", flush=True)
counts, seen = {}, {"delivered": 0, "torn": 0, "calls": 0}
def call(name, fn):
    seen["calls"] += 1
    try:
        fn()
        counts[name] = counts.get(name, 0) + 1
    except (ValueError, RuntimeError, TimeoutError) as exc:
        key = name + ": " + type(exc).__name__
        counts[key] = counts.get(key, 0) + 1
def check(entries):
    for _, e in entries:
        seen["delivered"] += 1
        seen["torn"] += e.b != -e.a or e.c != (float(e.a),) * 5
reader = ring.reader(oldest=True)
end = time.monotonic() + duration
while time.monotonic() < end:
    if role == "writer":
        k = rng.randrange(1 << 40)
        call("append", lambda: ring.append(a=k, b=-k, c=(float(k),) * 5))
        continue
    k = rng.randrange(6)
    if k == 0:
        call("poll", lambda: check(reader.poll()))
    elif k == 1:
        call("read_last", lambda: ring.read_last(rng.randrange(12)))
    elif k == 2:
        call("wait", lambda: reader.wait(rng.choice([0, 0.001, 0.01])))
    elif k == 3:
        call("wait_async", lambda: asyncio.run(reader.wait_async(0.005)))
    elif k == 4:
        call("attributes", lambda: (ring.head, ring.recoveries, reader.missed, ring.reader()))
    elif rng.random() < 0.1:
        reader = ring.reader(oldest=True)  # a rewound reader is replaced
print(json.dumps({"role": role, "counts": counts, **seen}), flush=True)
'''


def first_line(pipe):
    """A child's first line, read a byte at a time.  readline() on the pipe
    would buffer what follows it too, which communicate() (it reads the
    descriptor itself) never sees: a child that had already finished (a
    parent slow to look, on a loaded machine) lost its report."""
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(pipe.fileno(), 1)
        if not byte:
            break
        line += byte
    return line.decode().strip()


def run_storm(seconds, offsets, seed):
    """Writers, readers and a read-only reader in child processes; this
    process rewrites random words at offsets (a list of byte offsets in
    the ring).  Returns (each role's report, rewrites, canaries intact)."""
    import numpy  # noqa: F401  (the children import it in read_last)

    size = SeqRing.buffer_size(CAPACITY, **FIELDS)
    path = f"/dev/shm/seqlock_test_ring_storm_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with open(path, "wb") as f:
        f.write(CANARY + bytes(size) + CANARY)
    try:
        fd = os.open(path, os.O_RDWR)
        m = mmap.mmap(fd, 0)
        os.close(fd)
        with SeqRing.create(memoryview(m)[PAGE:PAGE + size], CAPACITY, **FIELDS) as ring:
            for k in range(20):
                ring.append(a=k, b=-k, c=(float(k),) * 5)
        roles = ["writer", "writer", "reader", "read-only"]
        children = [
            subprocess.Popen(
                [sys.executable, "-c", ROLE, path, str(size), role, str(seconds), str(seed + i)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                cwd="/", env=child_env())  # not a checkout: the installed package
            for i, role in enumerate(roles)
        ]
        reports, rewrites = [], 0
        try:
            for child in children:
                assert first_line(child.stdout) == "attached", child.stderr.read()
            rng = random.Random(seed)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                at = PAGE + rng.choice(offsets) // 4 * 4
                word = rng.choice([0, 1, 2, 3, 0xFFFFFFFF, 0x80000000, rng.getrandbits(32)])
                m[at:at + 4] = struct.pack("<I", word)
                rewrites += 1
                if rewrites % 64 == 0:
                    time.sleep(0.0001)
            for child, role in zip(children, roles):
                out, err = child.communicate(timeout=60)
                assert child.returncode == 0, f"{role} exited {child.returncode}: {err[-2000:]}"
                reports.append(json.loads(out.strip().splitlines()[-1]))
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()
                child.stdout.close()
                child.stderr.close()
        intact = m[:PAGE] == CANARY and m[PAGE + size:] == CANARY
        m.close()
        return reports, rewrites, intact
    finally:
        os.unlink(path)


@pytest.mark.timeout(120)
def test_every_role_survives_a_scribbler_on_every_word_of_a_live_ring():
    """Held (3.11 and 3.13t, and the ASan build): ~350k rewrites of any
    word but the robust mutex's (header, the rest of the lock, layout
    text, head, stamps, entries) in 3 s; every
    writer, reader and read-only (PROT_READ) reader exits 0 having made
    its calls (ValueError/RuntimeError allowed: "corrupted", "rewound"),
    and no byte outside the ring changed."""
    pytest.importorskip("numpy")
    size = SeqRing.buffer_size(CAPACITY, **FIELDS)
    # Every word but the robust mutex's (MUTEX): forged list links can
    # crash a writer (it exited -11 in one of three runs), and writers
    # trust co-writers with them (the trust model).  (A forged beacon word
    # alone is a RuntimeError: the test after the next one.)
    offsets = [o for o in range(size) if o not in MUTEX]
    reports, rewrites, intact = run_storm(3.0, offsets, seed=20)
    assert intact
    assert rewrites > 1000
    assert all(r["calls"] > 0 for r in reports), reports


@pytest.mark.timeout(120)
def test_no_torn_entry_is_delivered_while_a_scribbler_rewrites_the_header_and_head():
    """Held: with the slots and the lock left alone (stamps honest),
    rewrites of the header's first line, the layout text and head make
    readers count wrong misses or see the ring rewound, never deliver a
    torn entry; appends go on."""
    pytest.importorskip("numpy")
    offsets = [o for o in range(SLOTS) if o not in LOCK]
    reports, rewrites, intact = run_storm(3.0, offsets, seed=21)
    assert intact
    assert sum(r["torn"] for r in reports) == 0, reports
    assert sum(r["delivered"] for r in reports) > 0, reports
    assert sum(r["counts"].get("append", 0) for r in reports) > 0, reports


def test_attach_of_a_rewritten_header_gives_value_error_or_a_ring_that_stays_inside():
    """Held: 600 headers with one to three words rewritten (magic, version,
    sizes, capacity up to 2**64-1, lock words, layout text, head), and
    buffers shorter than the header says: attach() raises ValueError, or
    gives a ring whose readers' calls return (no crash, no read past the
    buffer: a guard page of PROT_NONE follows it)."""
    pytest.importorskip("numpy")
    size = SeqRing.buffer_size(4, **FIELDS)
    good = mmap.mmap(-1, size)
    with SeqRing.create(good, 4, **FIELDS) as ring:
        for k in range(6):
            ring.append(a=k, b=-k, c=(float(k),) * 5)
    rng = random.Random(2020)
    words = [0, 1, 2, 3, 7, 8, 64, 0xFFFFFFFF, 0x80000000, 2**40, 2**63, 2**64 - 1]
    outcomes = {"ValueError": 0, "attached": 0}
    span = (size + PAGE - 1) // PAGE * PAGE
    for _ in range(600):
        m = mmap.mmap(-1, span + PAGE)
        m[:size] = bytes(good)
        for _ in range(rng.choice([1, 1, 2, 3])):
            at = rng.randrange(0, SLOTS) // 8 * 8
            m[at:at + 8] = (rng.choice(words + [rng.getrandbits(64)])).to_bytes(8, "little")
        length = rng.choice([size, size, size - 8, LAYOUT_TEXT_OFFSET, 100, 8])
        # the buffer ends at a PROT_NONE page: a read past it is a crash
        end = span - length
        m[end:span] = m[:length]
        guard_page(m, span)
        view = memoryview(m)[end:span]
        if rng.random() < 0.3:
            view = view.toreadonly()
        try:
            ring = SeqRing.attach(view)
        except ValueError:
            outcomes["ValueError"] += 1
            view.release()
            continue
        outcomes["attached"] += 1
        with ring:
            reader = ring.reader(oldest=True)
            for call in (reader.poll, lambda: reader.wait(0), lambda: ring.read_last(100),
                         lambda: (ring.head, ring.recoveries)):
                try:
                    call()
                except RuntimeError:
                    pass  # rewound
        view.release()
    assert outcomes["ValueError"] > 0 and outcomes["attached"] > 0, outcomes


def guard_page(m, at):
    """Make the page of m at offset at PROT_NONE (mprotect through ctypes)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    address = ctypes.addressof(ctypes.c_char.from_buffer(m)) + at
    assert libc.mprotect(address, PAGE, 0) == 0, os.strerror(ctypes.get_errno())


FORGED_BEACON = r'''
import mmap, os, sys, threading, time
from seqlock_py import SeqRing
m = mmap.mmap(-1, SeqRing.buffer_size(4, x="q"))
ring = SeqRing.create(m, 4, x="q")
ring.append(x=1)
tid = 12345
while os.path.exists(f"/proc/{tid}"):
    tid += 1
m[BEACON_LOCK:BEACON_LOCK + 4] = tid.to_bytes(4, "little")  # the beacon "held" by a thread id nobody has
if sys.argv[1:] == ["unnamed"]:
    m[HOLDER:HOLDER + 8] = (0x5EED).to_bytes(8, "little")  # the word held by a token nobody recorded
outcome = []
def append():
    try:
        ring.append(x=2)
        outcome.append("appended")
    except Exception as exc:
        outcome.append(f"{type(exc).__name__}: {exc}")
t = threading.Thread(target=append, daemon=True)
t.start()
t.join(20)
reader = ring.reader(oldest=True)
print("outcome", outcome[0] if outcome else "still waiting", "| read", [e.x for _, e in reader.poll()], flush=True)
os._exit(0)
'''.replace("BEACON_LOCK", str(HEADER_OFFSETS["beacon_lock"][0])).replace("HOLDER", str(HEADER_OFFSETS["holder"][0]))


def test_append_to_a_ring_whose_beacon_word_is_forged_ends_instead_of_waiting_for_good():
    """A co-tenant writes one word, the beacon's lock word,
    as if a thread nobody has held it; the holder word still says nobody
    does.  Should hold: append() (which has no timeout) raises the lock's
    corruption RuntimeError once "word free, beacon held" has lasted its
    bound (honest writers pass through that state in a few instructions,
    or stay in it stopped: docs/implementation.md, "Stuck locks"); readers
    go on.

    Seen (hostile review of issue 20, main 8941112): every append() of
    every process waited for good (a non-main thread: not even a signal
    ended it)."""
    code, out = run_python(FORGED_BEACON, timeout=60)
    assert code == 0, out
    assert "outcome RuntimeError: " in out and "corrupted" in out, out
    assert "| read [1]" in out, out


def test_append_to_a_ring_whose_lock_word_holds_a_token_nobody_recorded_ends_instead_of_waiting_for_good():
    """A co-tenant writes the holder word as a token the owner
    record does not name, and the beacon's lock word as held by a
    thread nobody has.  Should hold: append() raises the lock's corruption
    RuntimeError once the state has lasted its bound; readers go on.

    Seen (main 666f113, 3.11): append() was still waiting after 20 s."""
    code, out = run_python(FORGED_BEACON, "unnamed", timeout=60)
    assert code == 0, out
    assert "outcome RuntimeError: " in out and "corrupted" in out, out
    assert "| read [1]" in out, out
