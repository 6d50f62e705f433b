"""Shared helpers for the SeqRecord tests (imported as a plain module).

Thread helpers start every worker behind a threading.Barrier and re-raise a
worker's exception in the test.  Process workers live here, at module
level, so that the "spawn" start method can import them in a child.

The invariant record used by the stress tests: fields a, b, c, arr, flag
with b == a + 1, c == 2 * a, flag == (a is odd), and arr a permutation of
ARRAY_VALUES (integers as floats, so the sum is exact): sum(arr) == ARRAY_SUM.
Writers only ever publish states that satisfy it; a reader that sees one
that does not has seen a torn snapshot.
"""

from __future__ import annotations

import os
import struct
import sys
import threading
import time
import traceback

from seqlock_py import SeqRecord

# ---- threads ----

from workers import run_each as run_threads  # noqa: E402,F401

# ---- the invariant record ----

INVARIANT_FIELDS = {"a": "q", "b": "q", "c": "d", "arr": "16d", "flag": "?"}
ARRAY_VALUES = tuple(float(i) for i in range(1, 17))
ARRAY_SUM = sum(ARRAY_VALUES)  # 136.0, exact


def invariant_state(k):
    """The consistent state number k: every field follows from k."""
    shift = k % len(ARRAY_VALUES)
    return {
        "a": k,
        "b": k + 1,
        "c": 2.0 * k,
        "arr": ARRAY_VALUES[shift:] + ARRAY_VALUES[:shift],
        "flag": k % 2 == 1,
    }


def holds(a, b, c, arr, flag):
    """The invariant every published state satisfies."""
    return (
        b == a + 1
        and c == 2.0 * a
        and flag == (a % 2 == 1)
        and len(arr) == len(ARRAY_VALUES)
        and sum(arr) == ARRAY_SUM
        and sorted(arr) == list(ARRAY_VALUES)
    )


def holds_for_tuple(snap):
    return holds(*snap)


def holds_for_dict(snap):
    return list(snap) == list(INVARIANT_FIELDS) and holds(**snap)


def holds_for_flat(rec_format, raw):
    """Check a read_into() buffer through struct.unpack(rec.format, ...)."""
    values = struct.unpack_from(rec_format, raw)
    a, b, c = values[0:3]
    arr = values[3:19]
    (flag,) = values[19:]
    return holds(a, b, c, arr, flag)


def write_section_step(rec, k, pause=0.0):
    """Move the record to invariant_state(k) in one write() section, one
    field and one element at a time, so every intermediate state breaks
    the invariant; readers must never see any of them.  With pause, the
    section sleeps that long between steps (a slow multi-step section)."""
    target = invariant_state(k)
    step = (lambda: time.sleep(pause)) if pause else (lambda: None)
    with rec.write() as w:
        w.a = target["a"]
        step()
        w.c = target["c"]
        for i, value in enumerate(target["arr"]):
            w.arr[i] = -1.0  # breaks the sum until the next line
            if i % 4 == 0:
                step()
            w.arr[i] = value
        w.arr[-1] = target["arr"][-1]
        w.flag = target["flag"]
        step()
        w.b = w.a + 1


def write_until(rec, deadline, use_sections, start_k, pause=0.0):
    """Write invariant states k = start_k, start_k + 1, ... until the
    monotonic ``deadline``, with write() sections (write_section_step) or
    update(); return how many writes were made."""
    writes, k = 0, start_k
    while time.monotonic() < deadline:
        if use_sections:
            write_section_step(rec, k, pause)
        else:
            rec.update(**invariant_state(k))
        writes += 1
        k += 1
    return writes


def read_counting_open_sections(rec, read):
    """read(), and whether it began and ended inside one open write
    section (the sequence odd and unchanged around it): a read a latch
    answers without waiting for the writer."""
    before = rec.sequence
    snap = read()
    return snap, before % 2 == 1 and rec.sequence == before


# ---- shared memory ----


# A writer process for PythonProcess: argv is the SharedMemory block's name,
# the record's fields ("x=q,y=q") and the fields each update() sets
# ("x,y").  Attaches, prints "writing", then update()s those fields to 1,
# 2, 3, ... flat out until killed.
UPDATE_FLAT_OUT = r'''
import sys
from record_helpers import open_shared_record

fields = dict(f.split("=") for f in sys.argv[2].split(","))
rec = open_shared_record(sys.argv[1], **fields)
setting = sys.argv[3].split(",")
print("writing", flush=True)
i = 0
while True:
    i += 1
    rec.update(**{name: i for name in setting})
'''


def writer_left_by_a_dead_thread(rec):
    """A RecordWriter of ``rec`` entered by a thread that then exited inside
    it (having set x = 1.0): a dead writer's section, and its object."""
    box = []

    def die_inside():
        w = rec.write()
        w.__enter__()
        w.x = 1.0
        box.append(w)

    t = threading.Thread(target=die_inside, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "thread hung"
    return box.pop()


def attach_shared_memory(name):
    """Open an existing SharedMemory block in a child; only the creator
    (the test) unlinks it."""
    from multiprocessing import shared_memory

    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, track=False)
    # Before 3.13 attaching registers the name with the resource tracker,
    # but a spawned child shares its parent's tracker, whose registry is a
    # set: the name is already there, so this adds nothing (and
    # unregistering here would make the parent's unlink() fail in it).
    return shared_memory.SharedMemory(name=name)


def map_shared_memory(name):
    """Map the SharedMemory block ``name`` (/dev/shm/<name>) directly: in a
    process that multiprocessing did not start (``subprocess``,
    ``unshare``), no resource tracker of its own then claims the block (and
    unlinks it at exit); in the test, the map may outlive a failed test's
    traceback, which SharedMemory.close() would refuse (BufferError)."""
    import mmap

    fd = os.open(os.path.join("/dev/shm", name.lstrip("/")), os.O_RDWR)
    try:
        return mmap.mmap(fd, 0)
    finally:
        os.close(fd)


def open_shared_record(name, **fields):
    """Attach to the record in the SharedMemory block ``name``."""
    return SeqRecord.attach(map_shared_memory(name), **fields)


def _report(queue, role, fn):
    """Run fn() in a child and send ("ok", role, result) or ("error",
    role, traceback text) to the parent."""
    try:
        queue.put(("ok", role, fn()))
    except BaseException:
        queue.put(("error", role, traceback.format_exc()))


def process_reader(name, barrier, duration, queue):
    """Child: read the shared invariant record for duration seconds with
    read(), read_dict(), read_into() and rec['arr']; count torn reads."""

    def work():
        shm = attach_shared_memory(name)
        rec = SeqRecord.attach(shm.buf, **INVARIANT_FIELDS)
        reads = torn = inside = 0
        first_torn = None
        raw = bytearray(rec.nbytes)
        fmt = rec.format
        read, read_dict, read_into = rec.read, rec.read_dict, rec.read_into
        last_seq = 0
        barrier.wait(timeout=60)
        deadline = time.monotonic() + duration
        while time.monotonic() < deadline:
            for kind in range(4):
                if kind == 0:
                    snap, was_inside = read_counting_open_sections(rec, read)
                    inside += was_inside
                    ok = holds_for_tuple(snap)
                elif kind == 1:
                    snap = read_dict()
                    ok = holds_for_dict(snap)
                elif kind == 2:
                    seq = read_into(raw)
                    ok = seq % 2 == 0 and seq >= last_seq and holds_for_flat(fmt, raw)
                    last_seq = seq
                    snap = bytes(raw)
                else:
                    snap = rec["arr"]
                    ok = sum(snap) == ARRAY_SUM and sorted(snap) == list(ARRAY_VALUES)
                reads += 1
                if not ok:
                    torn += 1
                    first_torn = first_torn or repr(snap)
        del rec, read, read_dict, read_into
        shm.close()
        return {"reads": reads, "torn": torn, "inside_sections": inside, "first_torn": first_torn}

    _report(queue, "reader", work)


def process_writer(name, barrier, duration, queue, start_k, use_sections, pause=0.0):
    """Child: publish invariant states k = start_k, start_k + 1, ... for
    duration seconds with update() or with write() sections (pausing
    between a section's steps)."""

    def work():
        shm = attach_shared_memory(name)
        rec = SeqRecord.attach(shm.buf, **INVARIANT_FIELDS)
        barrier.wait(timeout=60)
        writes = write_until(rec, time.monotonic() + duration, use_sections, start_k, pause)
        del rec
        shm.close()
        return {"writes": writes}

    _report(queue, "writer", work)


def process_update(name, fields, values, queue):
    """Child: attach to a shared record, update it once, report its read()."""

    def work():
        shm = attach_shared_memory(name)
        rec = SeqRecord.attach(shm.buf, **fields)
        rec.update(**values)
        snap = rec.read()
        del rec
        shm.close()
        return snap

    _report(queue, "updater", work)


def process_hold_a_section(name, inside, finish):
    """Child: open a write section towards state 2, break the invariant,
    set inside, and stay in the section until finish is set; then finish
    the write."""
    shm = attach_shared_memory(name)
    rec = SeqRecord.attach(shm.buf, **INVARIANT_FIELDS)
    target = invariant_state(2)
    with rec.write() as w:
        w.a = target["a"]  # half a write
        inside.set()
        finish.wait(60)
        w.update(**{k: v for k, v in target.items() if k != "a"})
    del rec, w
    shm.close()


def process_die_in_write_section(name):
    """Child: complete one write (state 1), then open a write section,
    break the invariant half-way, and die with the section still open."""
    shm = attach_shared_memory(name)
    rec = SeqRecord.attach(shm.buf, **INVARIANT_FIELDS)
    rec.update(**invariant_state(1))
    section = rec.write()
    w = section.__enter__()
    w.a = 999
    w.arr[0] = -1.0
    os._exit(0)  # no __exit__, no cleanup: the lock word names a dead thread


# ---- the record's words, for tests that play a co-tenant ----

#: The layout versions this build writes and reads (record.h, ring.h).
RECORD_VERSION = 6
RING_VERSION = 2

#: Byte offsets of a record's header words from the start of its buffer:
#: the version-6 layout of src/libseqlock/record.h (record_header, then its seqlock_t
#: and the glibc pthread_mutex_t beacon in it), on x86-64 Linux with glibc.
#: Tests that scribble on a live record write these words through another
#: mapping, or through the buffer itself, as a co-tenant with write access
#: could.  Each entry: (offset, struct format code).
HEADER_OFFSETS = {
    "magic": (0, "I"),
    "version": (4, "I"),
    "data_bytes": (8, "I"),
    "layout_bytes": (12, "I"),
    "lock_abi": (16, "I"),
    "recoveries": (20, "I"),
    # the seqlock_t, from the second cache line: its count and the
    # sleepers' announcement alone on 128 bytes, then the lock's words
    "sequence": (64, "Q"),
    "wake_from": (72, "Q"),
    "holder": (192, "Q"),       # the holder's 64-bit token
    "starving": (200, "Q"),
    "gaps": (208, "Q"),
    "ready": (216, "I"),       # READY_WORD once set up; 1: "initialising"
    "abandoned": (220, "I"),   # 1: an open section nobody can finish
    # the beacon: a robust, process-shared glibc pthread_mutex_t (40 bytes)
    "beacon_lock": (224, "I"),   # holder's tid | FUTEX_WAITERS | FUTEX_OWNER_DIED
    "beacon_count": (228, "I"),
    "beacon_owner": (232, "I"),
    "beacon_nusers": (236, "I"),
    "beacon_kind": (240, "I"),   # BEACON_KIND: robust | pshared
    "beacon_spins": (244, "I"),
    "beacon_list_prev": (248, "Q"),
    "beacon_list_next": (256, "Q"),
    # who holds the lock word: its token, its PID namespace's inode, its
    # thread's start time and id (seqlock_t.owner)
    "owner_token": (264, "Q"),
    "owner_pid_ns": (272, "Q"),
    "owner_started": (280, "Q"),
    "owner_tid": (288, "I"),
}

READY_WORD = 0x59444552  # "REDY"
INITIALISING_WORD = 1
BEACON_KIND = 0x90  # PTHREAD_MUTEX_ROBUST_NORMAL_NP | PTHREAD_MUTEX_PSHARED_BIT
FUTEX_WAITERS = 0x80000000
FUTEX_OWNER_DIED = 0x40000000
#: Where the layout text starts; the copies follow it, padded to 64, each
#: from a multiple of COPY_LINE bytes.
LAYOUT_TEXT_OFFSET = 320
COPY_LINE = 128


def peek(buf, word):
    """The header word ``word`` (a HEADER_OFFSETS name) of the record at the
    start of ``buf`` (any buffer: mmap, bytearray, memoryview)."""
    offset, code = HEADER_OFFSETS[word]
    return struct.unpack_from(code, buf, offset)[0]


def poke(buf, word, value):
    """Overwrite header word ``word`` of the record at the start of
    ``buf`` with ``value`` (wrapped to the word's width), as a co-tenant
    with write access to the buffer could at any moment."""
    offset, code = HEADER_OFFSETS[word]
    bits = 8 * struct.calcsize(code)
    struct.pack_into(code, buf, offset, value % (1 << bits))


def copy_offsets(buf):
    """(copy 0, copy 1) byte offsets of the record at the start of buf, as
    its header says now."""
    layout_bytes, data_bytes = peek(buf, "layout_bytes"), peek(buf, "data_bytes")
    copy0 = _round_up(LAYOUT_TEXT_OFFSET + _round_up(layout_bytes, 64), COPY_LINE)
    return copy0, copy0 + _round_up(data_bytes, COPY_LINE)


def _round_up(n, to):
    return -(-n // to) * to


def shared_memory_block(size):
    """A new SharedMemory block of ``size`` bytes (/dev/shm/<name>), closed
    in this process: map it with map_shared_memory(name); unlink() it when
    done (the caller owns it)."""
    from multiprocessing import shared_memory

    shm = shared_memory.SharedMemory(create=True, size=size)
    shm.close()
    return shm


#: Bytes of canary on each side of a record made by record_between_canaries().
CANARY_BYTES = 4096
_CANARY = bytes((i * 37 + 11) % 251 for i in range(CANARY_BYTES))


class RecordBetweenCanaries:
    """A record in a slice of a larger anonymous shared mapping (MAP_SHARED,
    so forked children share it), with CANARY_BYTES of a known pattern on
    each side: its neighbours in the mapping.  ``view`` is the record's
    extent (a memoryview slice, what create()/attach() get), ``mem`` the
    whole mapping."""

    def __init__(self, **fields):
        import mmap

        self.fields = fields
        self.size = SeqRecord.buffer_size(**fields)
        self.mem = mmap.mmap(-1, CANARY_BYTES + self.size + CANARY_BYTES)
        self.mem[:CANARY_BYTES] = _CANARY
        self.mem[CANARY_BYTES + self.size:] = _CANARY
        self.view = memoryview(self.mem)[CANARY_BYTES:CANARY_BYTES + self.size]

    def written_outside(self):
        """'' if both canaries are intact, else which bytes around the
        record were changed (offsets from the record's start)."""
        mem, end = self.mem, CANARY_BYTES + self.size
        changed = [i - CANARY_BYTES for i in range(CANARY_BYTES) if mem[i] != _CANARY[i]]
        changed += [i - CANARY_BYTES for i in range(end, end + CANARY_BYTES)
                    if mem[i] != _CANARY[i - end]]
        if not changed:
            return ""
        return (f"{len(changed)} bytes outside the record's {self.size} were "
                f"written (offsets {changed[0]}..{changed[-1]} from its start)")


# ---- keywords ----


def keywords_naming_one_field_twice(name, first, second):
    """Keyword arguments with two distinct keys that a record's field table
    takes for one field: a str subclass equal to `name` once armed, unequal
    while the dict of keywords is built (a call written in the source never
    passes such a pair; a hostile caller can)."""

    class Twin(str):
        armed = False
        __hash__ = str.__hash__

        def __eq__(self, other):
            return Twin.armed and str.__eq__(self, other)

    keywords = {Twin(name): first, name: second}
    assert len(keywords) == 2
    Twin.armed = True
    return keywords


# argv: "record" or "ring".  A writer and a reader process (forks) use a
# record or ring of a shared mapping, 5000 calls each, while this process
# lays a new one over it with create(overwrite=True) until they end:
# prints each role's exit status, torn reads and errors, then how many
# creates laid out or were refused.
OVERWRITE_WHILE_IN_USE = r'''
import mmap, os, sys
from seqlock_py import SeqRecord, SeqRing
kind = sys.argv[1]
F = dict(a="q", b="q", total="q", pad="8192q")  # a + b == total; pad: a long laying out
if kind == "record":
    m = mmap.mmap(-1, SeqRecord.buffer_size(**F))
    made = SeqRecord.create(m, **F)
    def make(): SeqRecord.create(m, overwrite=True, **F)
else:
    m = mmap.mmap(-1, SeqRing.buffer_size(8, **F))
    made = SeqRing.create(m, 8, **F)
    def make(): SeqRing.create(m, 8, overwrite=True, **F)
pids = {}
for role in ("writer", "reader"):
    pid = os.fork()
    if pid == 0:
        bad, errors = 0, {}
        reader = made.reader(oldest=True) if kind == "ring" else None
        for k in range(1, 5001):
            try:
                if role == "writer":
                    (made.update if kind == "record" else made.append)(a=k, b=k + 1, total=2 * k + 1)
                elif kind == "record":
                    s = made.read()
                    bad += s.a + s.b != s.total
                else:
                    for _, e in reader.poll():
                        bad += e.a + e.b != e.total
            except Exception as exc:
                if "rewound" in str(exc):
                    reader = made.reader(oldest=True)
                    continue
                what = f"{type(exc).__name__}: {exc}"
                errors[what] = errors.get(what, 0) + 1
        print(role, "torn", bad, "errors", errors, flush=True)
        os._exit(0)
    pids[pid] = role
laid = busy = 0
while pids:
    try:
        make()
        laid += 1
    except ValueError as exc:
        assert "locked by a writer" in str(exc), exc
        busy += 1
    pid, status = os.waitpid(-1, os.WNOHANG)
    if pid:
        print(pids.pop(pid), "exit status", status, flush=True)
print("laid", laid, "refused", busy, flush=True)
'''
