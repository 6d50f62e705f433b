"""A record never trusts its buffer's header words (issue 17: defects 1, 2,
4, 5 and 10).

Any process that can write a shared record's buffer can change any word of
it at any moment: a co-tenant that scribbles, a stray write, a crashed
co-writer.  What a process that attached keeps, whatever those words say:

- its own view of the record's geometry (data_bytes, layout_bytes), fixed
  at attach(): no read or write outside the record's extent, no stack
  buffer sized from the shared words;
- every call returns (a clear error at worst) within its timeout, and an
  untimed one can be interrupted;
- no crash, no abort, not even later, after the record is gone.

The tests play the co-tenant with header.poke() (record_helpers:
HEADER_OFFSETS, the version-5 layout of src/libseqlock/record.h).  Every victim runs
in a fresh interpreter with a deadline, so a crash or a hang fails its
test.  A corrupted record may give wrong values or raise RuntimeError whose
message says "corrupt"; nothing worse.  Each docstring ends with what
today's main did ("main: ..."), on 3.11 and on 3.13t unless it says.
"""
from __future__ import annotations

import os
import signal
import struct
import time

import pytest

from process_helpers import PythonProcess, assert_clean_exit, run_python
from record_helpers import (
    CANARY_BYTES,
    copy_offsets,
    map_shared_memory,
    peek,
    poke,
    shared_memory_block,
)
from seqlock_py import SeqRecord

#: A child that hangs is killed after this long (a hang fails the test).
HANG = 10.0

BIG = dict(x="d", v="100d")  # 808 bytes of data: more than a 512-byte stack scratch
BEFORE = (1.0, tuple(float(i) for i in range(100)))


@pytest.mark.parametrize("fields", [None, {"x": "f", "v": "(2,3)f"}], ids=["stored", "given"])
def test_attach_says_the_data_size_disagrees_when_the_layout_text_was_rewritten_to_agree(fields):
    """Another process rewrote the stored layout "x:d;..." to "x:f;..."
    (same length): the text now names fields of 4 bytes less than the
    header's data size.  attach() refuses it, saying so; it said "expected
    b'x:f;v:(2,3)f', found b'x:f;v:(2,3)f'", two equal texts."""
    from record_helpers import LAYOUT_TEXT_OFFSET

    block = shared_memory_block(SeqRecord.buffer_size(x="d", v="(2,3)f"))
    try:
        mem = map_shared_memory(block.name)
        with SeqRecord.create(memoryview(mem), x="d", v="(2,3)f"):
            pass
        assert mem[LAYOUT_TEXT_OFFSET:LAYOUT_TEXT_OFFSET + 3] == b"x:d"
        mem[LAYOUT_TEXT_OFFSET + 2] = ord("f")
        with pytest.raises(ValueError, match=r"data size .*\b32\b.*\b28\b"):
            SeqRecord.attach(memoryview(mem), **(fields or {}))
        mem.close()
    finally:
        block.unlink()


# ---------------------------------------------------------------------------
# 1. The geometry is private: fixed at attach(), never read from the buffer
#    again.
# ---------------------------------------------------------------------------

# argv: a mutation (Python code run on `hdr`, the record's extent, after
# attach) and an operation name.  The record sits in a slice of a larger
# mapping between two canaries (record_helpers.RecordBetweenCanaries).  The
# operation must work on the geometry attach() saw (or raise a clear
# "corrupt" error); no byte outside the record may change.
GEOMETRY_CHANGED_AFTER_ATTACH = r'''
import struct, sys
from record_helpers import RecordBetweenCanaries, copy_offsets, peek, poke
from seqlock_py import SeqRecord

mutation, operation = sys.argv[1], sys.argv[2]
FIELDS = dict(x="d", v="100d")
BEFORE = (1.0, tuple(float(i) for i in range(100)))
space = RecordBetweenCanaries(**FIELDS)
hdr = space.view
SeqRecord.create(hdr, **FIELDS).update(x=BEFORE[0], v=BEFORE[1])
rec = SeqRecord.attach(hdr, **FIELDS)
copy0, copy1 = copy_offsets(hdr)  # where attach() found the copies


def copies():
    """Both copies, read where attach() found them, as (x, v)."""
    out = []
    for at in (copy0, copy1):
        words = struct.unpack_from("101d", hdr, at)
        out.append((words[0], words[1:]))
    return tuple(out)


def short(state):
    return [(x, v[:2], v[-1]) for x, v in state]


def op_update():
    rec.update(x=7.0, v=[7.0] * 100)
    want = (7.0, (7.0,) * 100)
    assert copies() == (want, want), f"copies where attach() found them: {short(copies())}"


def op_write():
    with rec.write() as w:
        w.x = 7.0
        w.v[99] = 7.0
    want = (7.0, BEFORE[1][:99] + (7.0,))
    assert copies() == (want, want), f"copies where attach() found them: {short(copies())}"


def op_read():
    got = rec.read()
    assert got == BEFORE, f"read() gave {short([got])}"


def op_read_into():
    target = bytearray(b"\xee" * (rec.nbytes + 64))
    rec.read_into(target)
    assert target[rec.nbytes:] == b"\xee" * 64, "read_into() wrote past rec.nbytes in its target"
    got = struct.unpack_from(rec.format, target)
    assert got == (BEFORE[0],) + BEFORE[1], f"read_into() gave {got[:3]}..."


def op_read_versioned():
    seq, got = rec.read_versioned()
    assert got == BEFORE and seq % 2 == 0, f"read_versioned() gave {seq}, {short([got])}"


def op_getitem():
    got = (rec["x"], rec["v"])
    assert got == BEFORE, f"rec[name] gave {short([got])}"


def op_wait():
    changed = rec.wait(peek(hdr, "sequence") & ~1, 0.05)
    assert changed in (True, False)
    assert copies() == (BEFORE, BEFORE), f"after wait(): {short(copies())}"


exec(mutation)
failure = None
outcome = "worked"
try:
    globals()["op_" + operation]()
except RuntimeError as exc:
    if "corrupt" not in str(exc):
        failure = exc
    outcome = f"refused: {exc}"
except BaseException as exc:
    failure = exc
outside = space.written_outside()
assert not outside, outside
if failure is not None:
    raise failure
print("ok", outcome, flush=True)
'''

GEOMETRY_MUTATIONS = {
    "layout_bytes+64": 'poke(hdr, "layout_bytes", peek(hdr, "layout_bytes") + 64)',
    "layout_bytes=0x7fffff00": 'poke(hdr, "layout_bytes", 0x7FFFFF00)',
    "data_bytes=8": 'poke(hdr, "data_bytes", 8)',
    "data_bytes+1024": 'poke(hdr, "data_bytes", peek(hdr, "data_bytes") + 1024)',
    # readers of an open section copy copy 1, whose place depends on data_bytes
    "data_bytes=0xfffffff8,section-open": (
        'poke(hdr, "data_bytes", 0xFFFFFFF8); '
        'poke(hdr, "sequence", peek(hdr, "sequence") | 1)'
    ),
    # the words attach() checked once: they must not matter afterwards
    "magic,version,lock_abi=garbage": (
        'poke(hdr, "magic", 0); poke(hdr, "version", 99); poke(hdr, "lock_abi", 0xDEAD)'
    ),
    # a section nobody can finish: the next taker repairs it (copies words)
    "data_bytes+1024,section-abandoned": (
        'poke(hdr, "data_bytes", peek(hdr, "data_bytes") + 1024); '
        'poke(hdr, "sequence", peek(hdr, "sequence") | 1); '
        'poke(hdr, "abandoned", 1)'
    ),
}
GEOMETRY_OPERATIONS = ["update", "write", "read", "read_into", "read_versioned", "getitem", "wait"]


@pytest.mark.parametrize("operation", GEOMETRY_OPERATIONS)
@pytest.mark.parametrize("mutation", list(GEOMETRY_MUTATIONS))
def test_geometry_changed_after_attach_is_ignored(mutation, operation):
    """After attach(), a co-tenant changes the header's data_bytes or
    layout_bytes: every operation still works on the geometry attach()
    found (the values where attach() found them), or raises a clear
    "corrupt" RuntimeError; it never crashes, never writes a byte outside
    the record's extent (canaries on both sides), and read_into() never
    writes past rec.nbytes of its target.

    main (3.11 and 3.13t alike; the copies' places, copy_out()'s and
    read_into()'s sizes and update()'s scratch come from the shared words):

    - layout_bytes+64: update, write: 64 bytes written past the record's
      end (record_finish); read, read_into, read_versioned, getitem: the
      values of the wrong place; wait: holds.
    - layout_bytes=0x7fffff00: every operation but wait: SIGSEGV.
    - data_bytes=8: update: SIGSEGV (808 bytes encoded into the 512-byte
      stack scratch); write: record_finish copies one word, into copy 0's
      second word; read_into: 8 bytes copied, the rest garbage; read,
      read_versioned, getitem, wait: hold.
    - data_bytes+1024: update, write: 1826 bytes past the end written;
      read_into: ValueError "buffer too small"; the others hold.
    - data_bytes=0xfffffff8,section-open: read_into: ValueError; wait:
      holds; the others: SIGSEGV.
    - magic,version,lock_abi=garbage: every operation holds.
    - data_bytes+1024,section-abandoned: update, write, wait: the repair
      of the abandoned section writes 216-1020 bytes past the end; read,
      read_versioned, getitem: garbage (copy 1 looked for past the end);
      read_into: ValueError.
    """
    assert_clean_exit(
        run_python(GEOMETRY_CHANGED_AFTER_ATTACH, GEOMETRY_MUTATIONS[mutation], operation, timeout=HANG),
        f"{operation} after {mutation}",
    )


# The same defect across processes, as the issue reproduced it: the victim
# attached in a process of its own; the test changes the shared header.

# argv: the SharedMemory name, the number of bytes of the block that are the
# record, and what to do after "go": "read" or "update".
VICTIM_PROCESS = r'''
import struct, sys
from record_helpers import map_shared_memory
from seqlock_py import SeqRecord

name, size, action = sys.argv[1], int(sys.argv[2]), sys.argv[3]
FIELDS = dict(x="d", v="100d")
BEFORE = (1.0, tuple(float(i) for i in range(100)))
mem = map_shared_memory(name)
rec = SeqRecord.attach(memoryview(mem)[:size], **FIELDS)
raw = bytearray(rec.nbytes)
print("attached", flush=True)
sys.stdin.readline()  # the test changes the header meanwhile
outcome = "worked"
try:
    if action == "read":
        for _ in range(100):
            assert rec.read() == BEFORE, rec.read()[:1]
            rec.read_into(raw)
            assert struct.unpack(rec.format, raw)[:2] == (1.0, 0.0)
            assert rec["v"] == BEFORE[1]
            assert rec.read_versioned()[1] == BEFORE
            assert rec.get("x") == 1.0
    else:
        # 1.5 is 0x3ff8000000000000: no address, were it to land on a
        # return address
        rec.update(x=1.5, v=[1.5] * 100)
except RuntimeError as exc:
    if "corrupt" not in str(exc):
        raise
    outcome = f"refused: {exc}"
print("ok", outcome, flush=True)
'''


def run_victim(name, size, action, change):
    """Start the victim, let it attach, call change(), let it act; return
    its (exit code, output)."""
    with PythonProcess(VICTIM_PROCESS, name, size, action) as victim:
        victim.expect("attached")
        change()
        victim.tell("go")
        return victim.finish(HANG)


@pytest.fixture
def big_record():
    """A SharedMemory block holding a 100-double record (values BEFORE)
    followed by CANARY_BYTES of neighbour; yields (name, mapping, size)."""
    size = SeqRecord.buffer_size(**BIG)
    shm = shared_memory_block(size + CANARY_BYTES)
    mem = map_shared_memory(shm.name)
    try:
        rec = SeqRecord.create(memoryview(mem)[:size], **BIG)
        rec.update(x=BEFORE[0], v=BEFORE[1])
        del rec
        mem[size:] = b"\xa5" * CANARY_BYTES
        yield shm.name, mem, size
    finally:
        shm.unlink()


def test_reader_process_survives_layout_bytes_made_huge_after_it_attached(big_record):
    """A process that only reads attached; then layout_bytes becomes
    0x7fffff00 in the shared header.  Its read(), read_into(), rec[name],
    read_versioned() and get() go on reading the record attach() found.
    main: the reader dies of SIGSEGV in the copy."""
    name, mem, size = big_record
    outcome = run_victim(name, size, "read", lambda: poke(mem, "layout_bytes", 0x7FFFFF00))
    assert_clean_exit(outcome, "a reader after layout_bytes = 0x7fffff00")


def test_update_after_data_bytes_shrunk_to_8_writes_the_whole_record_safely(big_record):
    """A writer process attached to a 100-double record (808 bytes); then
    data_bytes becomes 8.  Its update() of every field works on its own
    geometry: the process survives and both copies hold the new values
    where attach() found them.  main: update_fields() sizes its scratch
    from the shared data_bytes and encodes 808 bytes into the 512-byte
    stack buffer: the return address is overwritten with the values
    written (SIGSEGV; the extension has no stack protector)."""
    name, mem, size = big_record
    copy0, copy1 = copy_offsets(mem)
    outcome = run_victim(name, size, "update", lambda: poke(mem, "data_bytes", 8))
    assert_clean_exit(outcome, "update() after data_bytes = 8")
    if "refused" not in outcome[1]:
        for at in (copy0, copy1):
            assert struct.unpack_from("101d", mem, at) == (1.5,) * 101


def test_update_after_layout_bytes_grew_leaves_the_neighbouring_bytes_alone(big_record):
    """The record is the first part of a larger SharedMemory block; a
    writer process attached to that slice; then layout_bytes grows by 64.
    Its update() writes nothing past the record's end.  main: update()
    (record_finish) writes copy 1 64 bytes further on: the last 64 bytes
    land in the neighbour, silently."""
    name, mem, size = big_record
    outcome = run_victim(
        name, size, "update", lambda: poke(mem, "layout_bytes", peek(mem, "layout_bytes") + 64)
    )
    neighbour = mem[size:]
    changed = [i for i, b in enumerate(neighbour) if b != 0xA5]
    assert not changed, (
        f"{len(changed)} bytes past the record's end were written "
        f"(+{changed[0]}..+{changed[-1]}); the writer: {outcome}"
    )
    assert_clean_exit(outcome, "update() after layout_bytes += 64")


# ---------------------------------------------------------------------------
# 2. The lock's `ready` word changed after attach: no spin, no hang.
# ---------------------------------------------------------------------------

# argv: the value for `ready`, and "write(timeout=0.2)", "update()" or
# "read": must return (or raise a clear error) within its timeout + 1 s.
READY_CHANGED_AFTER_ATTACH = r'''
import mmap, struct, sys, time
from record_helpers import poke
from seqlock_py import SeqRecord

value, operation = int(sys.argv[1], 0), sys.argv[2]
FIELDS = dict(x="d")
mem = mmap.mmap(-1, SeqRecord.buffer_size(**FIELDS))
SeqRecord.create(mem, **FIELDS).update(x=1.0)
rec = SeqRecord.attach(mem, **FIELDS)
poke(mem, "ready", value)
started = time.monotonic()
outcome = "returned"
try:
    if operation == "write(timeout=0.2)":
        with rec.write(timeout=0.2) as w:
            w.x = 2.0
    elif operation == "update()":
        rec.update(x=2.0)
    else:
        raw = bytearray(rec.nbytes)
        rec.read_into(raw)
        assert rec.read() == (1.0,) and struct.unpack("d", raw) == (1.0,)
except TimeoutError:
    assert "timeout" in operation, f"TimeoutError from {operation}, which has no timeout"
    outcome = "TimeoutError"
except RuntimeError as exc:
    assert operation != "read", f"a reader failed: {exc!r}"
    assert "corrupt" in str(exc), f"an unclear error: {exc!r}"
    outcome = f"RuntimeError: {exc}"
took = time.monotonic() - started
limit = (0.2 if "timeout" in operation else 0.0) + 1.0
assert took <= limit, f"{operation} took {took:.2f} s (limit {limit} s)"
print("ok", outcome, f"in {took:.3f} s", flush=True)
'''

READY_VALUES = {"initialising": "1", "garbage": "0x12345678"}


@pytest.mark.parametrize("operation", ["write(timeout=0.2)", "update()"])
@pytest.mark.parametrize("ready", list(READY_VALUES))
def test_writer_returns_in_time_when_the_ready_word_changes_after_attach(ready, operation):
    """The lock's `ready` word is set to 1 ("initialising") or to garbage
    after attach(): write(timeout=0.2) and update() return, or raise
    TimeoutError (where a timeout was given) or a RuntimeError that says
    "corrupt", within their timeout + 1 s.  main: ensure_ready() spins on
    sched_yield() for ever for "initialising" (attached: the GIL held on
    3.11, stop-the-world pauses blocked on 3.13t), so even
    write(timeout=0.2) never returns; for garbage it raises RuntimeError
    "the lock's mutex is unusable: Invalid argument" (not "corrupt")."""
    assert_clean_exit(
        run_python(READY_CHANGED_AFTER_ATTACH, READY_VALUES[ready], operation, timeout=HANG),
        f"{operation} with ready = {READY_VALUES[ready]}",
    )


@pytest.mark.parametrize("ready", list(READY_VALUES))
def test_readers_do_not_look_at_the_ready_word(ready):
    """A record's readers (read(), read_into()) give the committed values
    whatever the lock's `ready` word says.  main: holds (readers never
    look at it)."""
    assert_clean_exit(
        run_python(READY_CHANGED_AFTER_ATTACH, READY_VALUES[ready], "read", timeout=HANG),
        f"readers with ready = {READY_VALUES[ready]}",
    )


# argv: the value for `ready` and "update()" or "write()".  A thread holds a
# write section; another writes untimed (update() or write() without a
# timeout) and is asleep, waiting for it, when `ready` is rewritten; then
# the holder leaves its section.  Prints the sleeper's outcome.
READY_CHANGED_UNDER_A_SLEEPER = r'''
import mmap, os, sys, threading, time
from record_helpers import poke
from seqlock_py import SeqRecord

value, operation = int(sys.argv[1], 0), sys.argv[2]
FIELDS = dict(x="d")
mem = mmap.mmap(-1, SeqRecord.buffer_size(**FIELDS))
rec = SeqRecord.create(mem, **FIELDS)
inside, leave = threading.Event(), threading.Event()
def hold():
    with rec.write() as w:
        w.x = 1.0
        inside.set()
        leave.wait()
outcome = []
def write():
    try:
        if operation == "update()":
            rec.update(x=2.0)
        else:
            with rec.write() as w:
                w.x = 2.0
        outcome.append("returned")
    except Exception as exc:
        outcome.append(f"{type(exc).__name__}: {exc}")
holder = threading.Thread(target=hold, daemon=True)
holder.start()
inside.wait()
writer = threading.Thread(target=write, daemon=True)
writer.start()
time.sleep(0.3)  # past its spin and yields: asleep
assert not outcome, outcome
poke(mem, "ready", value)
leave.set()
holder.join()
writer.join(5)
print("ok" if outcome and "corrupt" in outcome[0] else "failed", outcome or "still waiting", flush=True)
os._exit(0)
'''


@pytest.mark.parametrize("operation", ["update()", "write()"])
@pytest.mark.parametrize("ready", list(READY_VALUES))
def test_an_untimed_writer_asleep_when_the_ready_word_changes_raises(ready, operation):
    """An untimed writer (update(), write() without a timeout) is asleep,
    waiting for another thread's section, when the lock's `ready` word is
    set to 1 ("initialising") or to garbage; then the section ends.  Should
    hold: the sleeper raises the "corrupt" RuntimeError a fresh call gets
    (a record's lock was set up by create(), and a used lock is never
    being set up), instead of waiting for good.

    Seen (main 8941112, 3.11 and 3.13t): for "initialising", the sleeper
    was still waiting 5 s later (only the first try looks at `ready`; the
    core waits for a first taker that does not exist); garbage: holds."""
    assert_clean_exit(
        run_python(READY_CHANGED_UNDER_A_SLEEPER, READY_VALUES[ready], operation, timeout=HANG),
        f"{operation} asleep when ready = {READY_VALUES[ready]}",
    )


# Prints "waiting" and enters an untimed write section on a record whose
# `ready` word says "initialising"; the test sends SIGINT.
UNTIMED_WRITE_ON_INITIALISING = r'''
import mmap, signal, time
from record_helpers import poke
from seqlock_py import SeqRecord

FIELDS = dict(x="d")
mem = mmap.mmap(-1, SeqRecord.buffer_size(**FIELDS))
SeqRecord.create(mem, **FIELDS)
rec = SeqRecord.attach(mem, **FIELDS)
poke(mem, "ready", 1)
print("waiting", flush=True)
try:
    with rec.write() as w:
        w.x = 2.0
    outcome = "returned"
except KeyboardInterrupt:
    outcome = "KeyboardInterrupt"
except RuntimeError as exc:
    assert "corrupt" in str(exc), f"an unclear error: {exc!r}"
    outcome = f"RuntimeError: {exc}"
signal.signal(signal.SIGINT, signal.SIG_IGN)  # one SIGINT only: no race at exit
print("ok", outcome, flush=True)
'''


def test_ctrl_c_interrupts_an_untimed_write_when_the_ready_word_says_initialising():
    """An untimed `with rec.write():` on a record whose `ready` word was
    set to "initialising" after attach() returns, raises a "corrupt"
    RuntimeError, or ends with KeyboardInterrupt within 1 s of a SIGINT
    (Ctrl-C).  main: the spin never runs signal handlers: SIGINT changes
    nothing and the child hangs until it is killed."""
    with PythonProcess(UNTIMED_WRITE_ON_INITIALISING) as child:
        child.expect("waiting")
        time.sleep(0.3)
        sent = time.monotonic()
        os.kill(child.proc.pid, signal.SIGINT)
        child.expect("ok", timeout=5)
        took = time.monotonic() - sent
        code, output = child.finish()
    assert code == 0, output
    assert took <= 1.0, f"the write ended {took:.2f} s after SIGINT"


# ---------------------------------------------------------------------------
# 4. The beacon's word altered during a section: no crash, not even later.
# ---------------------------------------------------------------------------

# A write section whose beacon word (the mutex's owner tid) a co-tenant
# changes to another tid; then the record is dropped and its memory
# unmapped, and the thread takes many unrelated private locks.
BEACON_WORD_ALTERED_IN_A_SECTION = r'''
import gc, mmap, threading
from record_helpers import poke
from seqlock_py import SeqLock, SeqRecord

FIELDS = dict(x="d")
mem = mmap.mmap(-1, SeqRecord.buffer_size(**FIELDS))
rec = SeqRecord.create(mem, **FIELDS)
outcome = "closed"
try:
    with rec.write() as w:
        w.x = 1.0
        poke(mem, "beacon_lock", threading.get_native_id() + 1)
except RuntimeError as exc:
    outcome = f"RuntimeError: {exc}"
del rec, w
gc.collect()
try:
    mem.close()  # munmap
    memory = "unmapped"
except BufferError:
    memory = "kept mapped (the record kept its buffer exported)"
print("section:", outcome, "; memory:", memory, flush=True)
for i in range(1000):
    lock = SeqLock()
    with lock:
        pass
    other = SeqRecord(x="q")
    other.update(x=i)
    assert other.read() == (i,)
print("ok", outcome, flush=True)
'''


def test_a_beacon_word_altered_during_a_section_never_crashes_the_process_later():
    """A co-tenant sets the beacon's lock word to the writer's tid + 1
    while `with rec.write()` is open.  The section ends cleanly or with a
    clear RuntimeError; then the record is deleted and its memory
    unmapped, and 1,000 unrelated private SeqLock and SeqRecord writes
    in the same thread all work.  main: release_lock_word() ignores
    pthread_mutex_unlock()'s EPERM, so the unmapped mutex stays on the
    thread's robust list: the next private lock dies of SIGSEGV when glibc
    links into the dead page."""
    assert_clean_exit(
        run_python(BEACON_WORD_ALTERED_IN_A_SECTION, timeout=HANG),
        "a section whose beacon word was altered, then private locks",
    )


# ---------------------------------------------------------------------------
# 5. A garbage beacon kind: a clear error, never an abort.
# ---------------------------------------------------------------------------

# argv: the kind word's value, "write(timeout=0.2)" or "update()", and
# "after" (set after attach) or "before" (attach() may refuse it).
GARBAGE_BEACON_KIND = r'''
import mmap, sys, time
from record_helpers import poke
from seqlock_py import SeqRecord

kind, operation, when = int(sys.argv[1], 0), sys.argv[2], sys.argv[3]
FIELDS = dict(x="d")
mem = mmap.mmap(-1, SeqRecord.buffer_size(**FIELDS))
SeqRecord.create(mem, **FIELDS).update(x=1.0)
if when == "before":
    poke(mem, "beacon_kind", kind)
    try:
        rec = SeqRecord.attach(mem, **FIELDS)
    except ValueError as exc:
        print("ok attach() refused:", exc, flush=True)
        raise SystemExit(0)
else:
    rec = SeqRecord.attach(mem, **FIELDS)
    poke(mem, "beacon_kind", kind)
started = time.monotonic()
try:
    if operation == "write(timeout=0.2)":
        with rec.write(timeout=0.2) as w:
            w.x = 2.0
    else:
        rec.update(x=2.0)
except TimeoutError:
    assert "timeout" in operation, f"TimeoutError from {operation}, which has no timeout"
    outcome = "TimeoutError"
except RuntimeError as exc:
    assert "corrupt" in str(exc), f"an unclear error: {exc!r}"
    outcome = f"RuntimeError: {exc}"
else:
    raise AssertionError(f"{operation} went through a beacon of kind {kind:#x}")
took = time.monotonic() - started
limit = (0.2 if "timeout" in operation else 0.0) + 1.0
assert took <= limit, f"{operation} took {took:.2f} s"
assert rec.read() == (1.0,), rec.read()
print("ok", outcome, flush=True)
'''

# What main did with each (3.11 and 3.13t): 0x40 (priority-protect), 0xc0
# (the same, process-shared): SIGABRT, a glibc assertion in
# __pthread_tpp_change_priority; 0x20 (priority-inherit), 0x80 (shared but
# not robust: a dead holder would never be noticed), 0x0 (a plain private
# mutex): the write goes through; 0x12345678: RuntimeError "the lock's
# mutex is unusable: Invalid argument".
GARBAGE_KINDS = ["0x40", "0xc0", "0x20", "0x80", "0x0", "0x12345678"]


@pytest.mark.parametrize("operation", ["write(timeout=0.2)", "update()"])
@pytest.mark.parametrize("kind", GARBAGE_KINDS)
def test_first_write_refuses_a_garbage_beacon_kind_set_after_attach(kind, operation):
    """The beacon mutex's kind word (robust | pshared, 0x90, at create())
    is changed after attach(): the first write, timed or not, raises a
    "corrupt" RuntimeError (or, timed, TimeoutError) within its timeout +
    1 s, writes nothing, and the process lives.  main: 0x40 and 0xc0:
    SIGABRT (a glibc assertion, even with a timeout); 0x20, 0x80, 0x0:
    the write goes through a mutex that is not the robust one create()
    made; 0x12345678: RuntimeError "the lock's mutex is unusable: Invalid
    argument" (clear enough, but not "corrupt")."""
    assert_clean_exit(
        run_python(GARBAGE_BEACON_KIND, kind, operation, "after", timeout=HANG),
        f"{operation} with beacon kind {kind}",
    )


@pytest.mark.parametrize("kind", ["0x40", "0xc0"])
def test_attach_or_the_first_write_refuses_a_buffer_whose_beacon_kind_is_garbage(kind):
    """attach() of a record whose beacon kind is garbage raises
    ValueError, or the first write(timeout=0.2) raises as above; the
    process lives.  main: attach() accepts it and the write dies of
    SIGABRT."""
    assert_clean_exit(
        run_python(GARBAGE_BEACON_KIND, kind, "write(timeout=0.2)", "before", timeout=HANG),
        f"attach and write with beacon kind {kind}",
    )


# ---------------------------------------------------------------------------
# 10. The count's parity flipped during a live section.
# ---------------------------------------------------------------------------

# A write section during which a co-tenant makes the count even (as if the
# section had closed); then writers of this thread and another.
PARITY_FLIPPED_IN_A_SECTION = r'''
import mmap, threading
from record_helpers import peek, poke
from seqlock_py import SeqRecord

FIELDS = dict(x="d")
mem = mmap.mmap(-1, SeqRecord.buffer_size(**FIELDS))
SeqRecord.create(mem, **FIELDS)
rec = SeqRecord.attach(mem, **FIELDS)
outcome = "closed"
try:
    with rec.write() as w:
        w.x = 1.0
        poke(mem, "sequence", peek(mem, "sequence") + 1)  # even: "no section"
except RuntimeError as exc:
    assert "corrupt" in str(exc) and "unlocked" not in str(exc), f"__exit__ raised {exc!r}"
    outcome = f"RuntimeError: {exc}"
assert not rec.locked(), "the lock word is still held after the section ended"
assert rec.sequence % 2 == 0, f"a section still looks open: {rec.sequence}"
rec.update(x=2.0)
assert rec.read() == (2.0,), rec.read()
errors = []

def other_writer():
    try:
        with rec.write(timeout=1) as w:
            w.x = 3.0
    except BaseException as exc:
        errors.append(exc)

t = threading.Thread(target=other_writer)
t.start()
t.join(10)
assert not t.is_alive() and not errors, errors
assert rec.read() == (3.0,) and not rec.locked()
print("ok", outcome, flush=True)
'''


def test_a_flipped_parity_during_a_section_still_releases_the_lock():
    """While this process's writer is inside `with rec.write()`, a
    co-tenant makes the count even.  __exit__ still closes the section
    and releases the lock (no "release unlocked lock"; a clear "corrupt"
    error at most), the count is even, and later writers, update() in
    this thread and write(timeout=1) in another, go through.  main:
    __exit__ raises RuntimeError("release unlocked lock") and the lock
    word stays held for good (a co-tenant's single 8-byte write made one
    writer fail 2,173,066 of 2,182,861 writes)."""
    assert_clean_exit(
        run_python(PARITY_FLIPPED_IN_A_SECTION, timeout=HANG),
        "a section whose count was made even",
    )
