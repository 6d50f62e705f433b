"""Read-only readers: attach() of a read-only buffer (issue 17).

A process that only reads needs no write access to a record: attach()
takes a read-only buffer (an mmap opened with mmap.ACCESS_READ or
prot=mmap.PROT_READ, memoryview(...).toreadonly(), bytes) and gives a
record whose `readonly` is True; it reads, read_into()s, read_versioned()s
and waits; its update() and write() raise TypeError ("read-only"), and it
never writes a byte of the buffer: with a PROT_READ mapping any write
would be a SIGSEGV.  So each reader runs in a fresh interpreter (a crash
fails its test); the test process creates and writes the record in a
SharedMemory block (/dev/shm/<name>).  Each docstring ends with what
today's main did.
"""
from __future__ import annotations

import threading
import time

import pytest

from process_helpers import PythonProcess, assert_clean_exit, run_python
from record_helpers import map_shared_memory, peek, poke, shared_memory_block
from seqlock_py import SeqRecord

FIELDS = dict(x="d", n="q", v="3d")
VALUES = dict(x=1.5, n=7, v=(1.0, 2.0, 3.0))
HANG = 10.0

# The child's preamble.  argv: the block's name and the kind of read-only
# buffer; defines buffer(), FIELDS and EXPECTED.
OPEN_READ_ONLY = r'''
import asyncio, mmap, os, struct, sys, time
from seqlock_py import SeqRecord

name, kind = sys.argv[1], sys.argv[2]
FIELDS = dict(x="d", n="q", v="3d")
EXPECTED = (1.5, 7, (1.0, 2.0, 3.0))
PATH = os.path.join("/dev/shm", name.lstrip("/"))


def buffer():
    """A read-only buffer over the block, of the kind asked for."""
    if kind == "mmap-ACCESS_READ":
        with open(PATH, "rb") as f:
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if kind == "mmap-PROT_READ":
        fd = os.open(PATH, os.O_RDONLY)
        try:
            return mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
    if kind == "memoryview-toreadonly":  # a writable mapping, viewed read-only
        fd = os.open(PATH, os.O_RDWR)
        try:
            return memoryview(mmap.mmap(fd, 0)).toreadonly()
        finally:
            os.close(fd)
    if kind == "bytes":  # a copy: it never changes
        with open(PATH, "rb") as f:
            return f.read()
    raise SystemExit(f"unknown kind {kind}")
'''

ATTACH_AND_READ = OPEN_READ_ONLY + r'''
rec = SeqRecord.attach(buffer(), **FIELDS)
assert rec.readonly is True, rec.readonly
assert rec.read() == EXPECTED, rec.read()
assert rec.read_dict() == dict(zip(("x", "n", "v"), EXPECTED)), rec.read_dict()
raw = bytearray(rec.nbytes)
seq = rec.read_into(raw)
assert seq % 2 == 0 and struct.unpack(rec.format, raw) == (1.5, 7, 1.0, 2.0, 3.0), raw
assert rec.read_versioned() == (seq, EXPECTED), rec.read_versioned()
assert rec["v"] == (1.0, 2.0, 3.0) and rec["x"] == 1.5
assert rec.get("n") == 7 and rec.get("nope", 5) == 5
assert not rec.locked()
print("ok", flush=True)
'''

WRITES_REFUSED = OPEN_READ_ONLY + r'''
rec = SeqRecord.attach(buffer(), **FIELDS)


def update():
    rec.update(x=2.0)


def section():
    with rec.write() as w:
        w.x = 2.0


def timed_section():
    with rec.write(timeout=0) as w:
        w.x = 2.0


for attempt in (update, section, timed_section):
    try:
        attempt()
    except TypeError as exc:
        assert "read-only" in str(exc), f"{attempt.__name__}: {exc!r}"
    else:
        raise AssertionError(f"{attempt.__name__}() went through a read-only record")
assert rec.read() == EXPECTED and not rec.locked()
print("ok", flush=True)
'''

WAITS_TIME_OUT = OPEN_READ_ONLY + r'''
rec = SeqRecord.attach(buffer(), **FIELDS)
seq = rec.read_versioned()[0]
started = time.monotonic()
assert rec.wait(seq, 0) is False
assert rec.wait(seq, 0.1) is False
assert asyncio.run(rec.wait_async(seq, timeout=0.1)) is False
assert list(rec.changes(timeout=0.1)) == [(seq, EXPECTED)]
took = time.monotonic() - started
assert took <= 2.0, f"three 0.1 s waits took {took:.2f} s"
print("ok", flush=True)
'''

# Prints "waiting", then waits for the test's write (x=2.5), with wait()
# and then with wait_async() (x=3.5).
WAIT_SEES_A_WRITE = OPEN_READ_ONLY + r'''
rec = SeqRecord.attach(buffer(), **FIELDS)
seq, values = rec.read_versioned()
assert values == EXPECTED
print("waiting", flush=True)
assert rec.wait(seq, timeout=5) is True, "wait() saw no write in 5 s"
seq, values = rec.read_versioned()
assert values[0] == 2.5, values
print("waiting-async", flush=True)
assert asyncio.run(rec.wait_async(seq, timeout=5)) is True, "wait_async() saw no write"
assert rec.read()[0] == 3.5, rec.read()
print("ok", flush=True)
'''

CREATE_REFUSED = OPEN_READ_ONLY + r'''
try:
    SeqRecord.create(buffer(), **FIELDS)
except (TypeError, BufferError) as exc:
    print("ok", type(exc).__name__, exc, flush=True)
else:
    raise AssertionError("create() laid out a record in a read-only buffer")
'''

KINDS = ["mmap-ACCESS_READ", "mmap-PROT_READ", "memoryview-toreadonly", "bytes"]
LIVE_KINDS = KINDS[:3]  # a bytes copy never sees a later write


@pytest.fixture
def shared_record():
    """(name, mapping) of a SharedMemory block holding a record with
    VALUES, written by this process."""
    shm = shared_memory_block(SeqRecord.buffer_size(**FIELDS))
    mem = map_shared_memory(shm.name)
    try:
        SeqRecord.create(mem, **FIELDS).update(**VALUES)
        yield shm.name, mem
    finally:
        shm.unlink()


@pytest.mark.parametrize("kind", KINDS)
def test_a_read_only_buffer_attaches_and_every_reader_works(shared_record, kind):
    """attach() of a read-only buffer gives a record with readonly True
    whose read(), read_dict(), read_into(), read_versioned(), rec[name]
    and get() give the values written.  main: attach() raises BufferError
    ("Object is not writable." / "memoryview: underlying buffer is not
    writable"): it asks for a writable buffer."""
    name, _ = shared_record
    assert_clean_exit(run_python(ATTACH_AND_READ, name, kind, timeout=HANG), f"readers over {kind}")


@pytest.mark.parametrize("kind", KINDS)
def test_a_read_only_record_refuses_writes_with_a_clear_type_error(shared_record, kind):
    """A read-only record's update(), write() and write(timeout=0) raise
    TypeError whose message says "read-only"; nothing changes.  main:
    attach() raises BufferError."""
    name, mem = shared_record
    before = bytes(mem)
    assert_clean_exit(run_python(WRITES_REFUSED, name, kind, timeout=HANG), f"writes over {kind}")
    assert bytes(mem) == before


@pytest.mark.parametrize("kind", KINDS)
def test_a_read_only_record_waits_and_times_out(shared_record, kind):
    """A read-only record's wait(seq, 0), wait(seq, 0.1),
    wait_async(seq, timeout=0.1) and changes(timeout=0.1) work with no
    write: False, False, False, the current snapshot only.  main: attach()
    raises BufferError."""
    name, _ = shared_record
    assert_clean_exit(run_python(WAITS_TIME_OUT, name, kind, timeout=HANG), f"waits over {kind}")


@pytest.mark.parametrize("kind", LIVE_KINDS)
def test_a_read_only_reader_process_sees_another_processes_writes(shared_record, kind):
    """A reader process with a read-only mapping of /dev/shm/<name>: its
    wait(seq, timeout=5) returns True after this process writes, and it
    reads the new value; so does wait_async (latency not asserted).
    main: attach() raises BufferError."""
    name, mem = shared_record
    rec = SeqRecord.attach(mem, **FIELDS)
    with PythonProcess(WAIT_SEES_A_WRITE, name, kind) as reader:
        reader.expect("waiting")
        rec.update(x=2.5)
        reader.expect("waiting-async")
        time.sleep(0.05)
        rec.update(x=3.5)
        code, output = reader.finish(HANG)
    assert_clean_exit((code, output), f"a reader over {kind}")


@pytest.mark.parametrize("kind", KINDS)
def test_create_refuses_a_read_only_buffer(shared_record, kind):
    """create() of a read-only buffer raises (TypeError or BufferError)
    and writes nothing.  main: holds (BufferError)."""
    name, mem = shared_record
    before = bytes(mem)
    assert_clean_exit(run_python(CREATE_REFUSED, name, kind, timeout=HANG), f"create over {kind}")
    assert bytes(mem) == before


# ---------------------------------------------------------------------------
# A read-only record never writes its buffer: the paths that would (a
# reader's locking pass, a sleeper's announcement, a repair) under a
# PROT_READ mapping, where a write is a SIGSEGV.
# ---------------------------------------------------------------------------

# Reads with max_retries = 0 while the test writes flat out (overlaps), then
# a wait that sleeps, then one that a write ends.
EVERY_READER_PATH_UNDER_PROT_READ = OPEN_READ_ONLY + r'''
rec = SeqRecord.attach(buffer(), **FIELDS)
rec.max_retries = 0
raw = bytearray(rec.nbytes)
print("reading", flush=True)
deadline = time.monotonic() + 1.0
reads = 0
while time.monotonic() < deadline:
    rec.read()
    rec.read_into(raw)
    rec["v"]
    x, n, v = rec.read()
    assert n == int(x) and v == (x, x, x), (x, n, v)  # the writer's invariant
    reads += 1
print("sleeping", flush=True)
sys.stdin.readline()  # the test stops writing
seq = rec.read_versioned()[0]
assert rec.wait(seq, 0.3) is False  # sleeps: announces itself nowhere
assert asyncio.run(rec.wait_async(seq, timeout=0.1)) is False
print("waiting", flush=True)
assert rec.wait(seq, timeout=5) is True
print("ok", reads, "reads; retries", rec.read_retries, flush=True)
'''


def test_a_read_only_record_never_writes_its_buffer(shared_record):
    """Under a PROT_READ mapping (any write is a SIGSEGV): reads with
    max_retries = 0 overlapping a writer's storm (every overlap would send
    a reader of main to its locking pass, which writes the lock word), a
    wait that sleeps (main's sleepers announce themselves in the buffer),
    wait_async, and a wait that a write ends: all work, every snapshot is
    consistent, and the process lives.  main: attach() raises
    BufferError."""
    name, mem = shared_record
    rec = SeqRecord.attach(mem, **FIELDS)
    rec.update(x=0.0, n=0, v=(0.0, 0.0, 0.0))
    stop = threading.Event()

    def storm():
        i = 0
        while not stop.is_set():
            i += 1
            rec.update(x=float(i), n=i, v=(float(i),) * 3)

    with PythonProcess(EVERY_READER_PATH_UNDER_PROT_READ, name, "mmap-PROT_READ") as reader:
        writer = threading.Thread(target=storm, daemon=True)
        reader.expect("reading")
        writer.start()
        try:
            reader.expect("sleeping")
        finally:
            stop.set()
            writer.join(10)
        reader.tell("go")
        reader.expect("waiting")
        time.sleep(0.1)
        rec.update(x=-1.0, n=-1, v=(-1.0,) * 3)
        code, output = reader.finish(HANG)
    assert_clean_exit((code, output), "every reader path under PROT_READ")


# Waits on a section that looks abandoned (the test holds it and sets the
# word): a read-only reader must not repair it (a write), nor wait past its
# timeout.
WAIT_ON_AN_ABANDONED_LOOKING_SECTION = OPEN_READ_ONLY + r'''
rec = SeqRecord.attach(buffer(), **FIELDS)
seq, values = rec.read_versioned()
assert values == EXPECTED, values
started = time.monotonic()
changed = rec.wait(seq, 0.2)
took = time.monotonic() - started
assert changed is False and took <= 1.2, (changed, took)
assert rec.read() == EXPECTED  # the committed state; the section is not ours to undo
print("ok", round(took, 3), flush=True)
'''


def test_a_read_only_waiter_never_repairs_a_section_that_looks_abandoned(shared_record):
    """This process holds a write section (x=9 inside); the `abandoned`
    word then says nobody can finish it.  A read-only waiter (PROT_READ)
    does not try to repair it (a write) and returns False from wait(seq,
    0.2) within 1.2 s; it reads the committed state.  main: attach()
    raises BufferError."""
    name, mem = shared_record
    rec = SeqRecord.attach(mem, **FIELDS)
    with rec.write() as w:
        w.x = 9.0
        poke(mem, "abandoned", 1)
        try:
            outcome = run_python(WAIT_ON_AN_ABANDONED_LOOKING_SECTION, name, "mmap-PROT_READ", timeout=HANG)
        finally:
            poke(mem, "abandoned", 0)
        assert peek(mem, "sequence") % 2 == 1
    assert_clean_exit(outcome, "a read-only waiter on an abandoned-looking section")
    assert rec.read()[0] == 9.0
