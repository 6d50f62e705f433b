"""Closing a record: close() and ``with`` release its buffer, later calls
raise ValueError, and a close() racing other threads' calls never lets
memory go under them (docs/implementation.md: Closing a record)."""
from __future__ import annotations

import asyncio
import signal
import sys
import threading
import time
from multiprocessing import shared_memory

import pytest

from seqlock_py import SeqRecord
from process_helpers import assert_clean_exit, run_python
from workers import LONG, join_in_time, run_threads, start_in_thread

FIELDS = {"x": "d", "n": "q", "v": "3d"}


@pytest.fixture
def shm():
    block = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(**FIELDS))
    yield block
    try:
        block.close()
        block.unlink()
    except (BufferError, FileNotFoundError):
        pass


# Every call that touches the record, as (name, call on the record).
CALLS = [
    ("read", lambda r: r.read()),
    ("read_versioned", lambda r: r.read_versioned()),
    ("read_dict", lambda r: r.read_dict()),
    ("read_into", lambda r: r.read_into(bytearray(64))),
    ("subscript", lambda r: r["x"]),
    ("get", lambda r: r.get("x")),
    ("update", lambda r: r.update(x=1.0)),
    ("write", lambda r: r.write()),
    ("wait", lambda r: r.wait(0, timeout=0)),
    ("_waiter", lambda r: r._waiter(0)),
    ("wait_async", lambda r: r.wait_async(0)),
    ("changes", lambda r: r.changes()),
    ("changes_async", lambda r: r.changes_async()),
    ("locked", lambda r: r.locked()),
    ("sequence", lambda r: r.sequence),
    ("recoveries", lambda r: r.recoveries),
    ("enter", lambda r: r.__enter__()),
]


@pytest.mark.parametrize("name,call", CALLS, ids=[c[0] for c in CALLS])
def test_every_call_after_close_raises_value_error(shm, name, call):
    rec = SeqRecord.create(shm.buf, **FIELDS)
    rec.close()
    with pytest.raises(ValueError, match="the record is closed"):
        call(rec)


@pytest.mark.parametrize("name", ["read", "read_into", "get", "update", "wait", "locked"])
def test_bound_methods_kept_from_before_raise_after_close(shm, name):
    rec = SeqRecord.create(shm.buf, **FIELDS)
    method = getattr(rec, name)
    args = {"read_into": (bytearray(64),), "get": ("x",), "wait": (0, 0)}.get(name, ())
    kwargs = {"update": {"x": 2.0}}.get(name, {})
    method(*args, **kwargs)
    rec.close()
    with pytest.raises(ValueError, match="the record is closed"):
        method(*args, **kwargs)


def test_shared_memory_closes_and_unlinks_after_close_with_bound_methods_alive():
    block = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(**FIELDS))
    rec = SeqRecord.create(block.buf, **FIELDS)
    read, read_into = rec.read, rec.read_into  # per-thread bound methods, kept
    assert read() == (0.0, 0, (0.0, 0.0, 0.0))
    rec.close()
    block.close()  # BufferError if the record still exported the buffer
    block.unlink()
    with pytest.raises(ValueError):
        read()
    with pytest.raises(ValueError):
        read_into(bytearray(64))


def test_close_twice_does_nothing(shm):
    rec = SeqRecord.create(shm.buf, **FIELDS)
    rec.close()
    rec.close()
    assert rec.closed


def test_with_block_closes_the_record(shm):
    with SeqRecord.create(shm.buf, **FIELDS) as rec:
        rec.update(x=1.5)
        assert not rec.closed
    assert rec.closed
    shm.close()


def test_layout_properties_still_answer_after_close(shm):
    rec = SeqRecord.create(shm.buf, **FIELDS)
    rec.close()
    assert rec.fields == ("x", "n", "v")
    assert rec.format == "dq3d"
    assert rec.nbytes == 40
    assert rec.readonly is False
    assert rec.closed is True
    assert "closed" in repr(rec)


def test_close_inside_a_write_section_raises_buffer_error_and_keeps_the_record(shm):
    rec = SeqRecord.create(shm.buf, **FIELDS)
    with rec.write() as w:
        w.x = 3.0
        with pytest.raises(BufferError, match="write section"):
            rec.close()
        assert not rec.closed
    assert rec.read()[0] == 3.0
    rec.close()


def test_close_while_another_thread_holds_a_write_section_raises(shm):
    rec = SeqRecord.create(shm.buf, **FIELDS)
    entered, leave = threading.Event(), threading.Event()

    def hold():
        with rec.write() as w:
            w.n = 5
            entered.set()
            assert leave.wait(LONG)

    thread, box = start_in_thread(hold)
    assert entered.wait(LONG)
    with pytest.raises(BufferError):
        rec.close()
    leave.set()
    join_in_time(thread)
    assert box[0][0] == "ok", box
    assert rec.read()[1] == 5
    rec.close()


def test_a_write_section_entered_before_close_is_entered_no_more_after(shm):
    rec = SeqRecord.create(shm.buf, **FIELDS)
    writer = rec.write()
    rec.close()
    with pytest.raises(ValueError, match="closed"):
        writer.__enter__()


def test_a_wait_in_another_thread_is_ended_by_close(shm):
    rec = SeqRecord.create(shm.buf, **FIELDS)
    seq = rec.sequence
    thread, box = start_in_thread(rec.wait, seq)
    time.sleep(0.2)  # let it fall asleep (a close before it sleeps is fine too)
    rec.close()
    join_in_time(thread)
    kind, exc, _ = box[0]
    assert kind == "raised" and isinstance(exc, ValueError), box
    shm.close()


def test_a_pending_wait_async_is_ended_by_close(shm):
    rec = SeqRecord.create(shm.buf, **FIELDS)

    async def main():
        task = asyncio.ensure_future(rec.wait_async(rec.sequence))
        await asyncio.sleep(0.2)
        await asyncio.get_running_loop().run_in_executor(None, rec.close)
        with pytest.raises(ValueError, match="closed"):
            await asyncio.wait_for(task, LONG)

    asyncio.run(main())
    shm.close()


def test_an_update_waiting_for_the_lock_is_ended_by_close(shm):
    """The section is another record object's (of the same buffer), so it
    does not keep this record's close() off; the waiting update raises."""
    rec = SeqRecord.create(shm.buf, **FIELDS)
    other = SeqRecord.attach(shm.buf)
    entered, leave = threading.Event(), threading.Event()

    def hold():
        with other.write():
            entered.set()
            assert leave.wait(LONG)

    holder, _ = start_in_thread(hold)
    assert entered.wait(LONG)
    updater, box = start_in_thread(lambda: rec.update(x=9.0))
    time.sleep(0.2)
    rec.close()
    join_in_time(updater)
    kind, exc, _ = box[0]
    assert kind == "raised" and isinstance(exc, ValueError), box
    leave.set()
    join_in_time(holder)
    other.close()


def test_a_private_record_closes_too():
    rec = SeqRecord(x="d")
    rec.update(x=1.0)
    rec.close()
    with pytest.raises(ValueError):
        rec.read()


def test_two_threads_closing_at_once_both_return(shm):
    rec = SeqRecord.create(shm.buf, **FIELDS)
    run_threads(2, lambda i: rec.close())
    assert rec.closed
    shm.close()


def test_a_reader_looping_while_the_record_closes_then_unmaps_never_crashes():
    block = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(**FIELDS))
    rec = SeqRecord.create(block.buf, **FIELDS)
    started = threading.Event()

    def reader():
        read, n = rec.read, 0
        started.set()
        try:
            while True:
                read()
                n += 1
        except ValueError:
            return n

    thread, box = start_in_thread(reader)
    assert started.wait(LONG)
    time.sleep(0.05)
    rec.close()
    block.close()  # unmaps: a reader still inside would crash
    block.unlink()
    join_in_time(thread)
    assert box[0][0] == "ok", box


def test_many_readers_and_a_writer_racing_close_end_cleanly_every_time():
    """Stress: 4 reader threads (read, read_into, rec[...], wait) and a
    writer against close() and the unmapping that follows, repeated; each
    worker ends with ValueError, never a crash.  Counts what it saw."""
    outcomes = {"closed": 0, "reads": 0}
    for _ in range(20):
        block = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(**FIELDS))
        rec = SeqRecord.create(block.buf, **FIELDS)
        buf = bytearray(64)
        kinds = [lambda: rec.read(), lambda: rec.read_into(buf), lambda: rec["v"],
                 lambda: rec.wait(rec.sequence, 0.01), lambda: rec.update(x=1.0)]
        go = threading.Barrier(len(kinds) + 1)

        def worker(i):
            call, n = kinds[i], 0
            go.wait(LONG)
            try:
                while True:
                    call()
                    n += 1
            except ValueError:
                return n

        threads = [start_in_thread(worker, i) for i in range(len(kinds))]
        go.wait(LONG)
        time.sleep(0.01)
        rec.close()
        block.close()
        block.unlink()
        for thread, box in threads:
            join_in_time(thread)
            kind, value, _ = box[0]
            assert kind == "ok", box
            outcomes["closed"] += 1
            outcomes["reads"] += value
    assert outcomes["closed"] == 20 * 5
    print(outcomes)


def test_close_in_a_forked_child_is_not_held_up_by_the_parents_readers():
    """A parent's thread inside a read at the fork is not a thread of the
    child: the child's close() does not wait for its slot (a fork handler
    frees it), nor for a wait the child started, which it ends."""
    from process_helpers import in_forked_child

    block = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(x="d"))
    rec = SeqRecord.create(block.buf, x="d")
    stop = threading.Event()

    def parent_reader():
        read = rec.read
        while not stop.is_set():
            read()

    reader = threading.Thread(target=parent_reader, daemon=True)
    reader.start()

    def check():
        thread, box = start_in_thread(rec.wait, rec.sequence)
        time.sleep(0.1)
        rec.close()
        thread.join(LONG)
        return box and isinstance(box[0][1], ValueError)

    try:
        code, report = in_forked_child(check)
    finally:
        stop.set()
        join_in_time(reader)
        rec.close()
        block.close()
        block.unlink()
    assert code == 0, report


@pytest.mark.parametrize("memory", ["shared", "private"])
def test_close_in_a_forked_child_is_not_refused_for_a_section_a_parents_thread_holds(memory):
    """A parent's thread inside a write section at the fork is no thread
    of the child: nothing there can end that section, so the child's
    close() does not wait for it.  It raised BufferError ("a write section
    opened through it is open") in the child for good."""
    from process_helpers import in_forked_child

    block = None
    if memory == "shared":
        block = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(x="d"))
        rec = SeqRecord.create(block.buf, x="d")
    else:
        rec = SeqRecord(x="d")
    inside, leave = threading.Event(), threading.Event()

    def holder():
        with rec.write() as w:
            w.x = 1.0
            inside.set()
            leave.wait(LONG)

    thread = threading.Thread(target=holder)
    thread.start()

    def check():
        rec.close()
        return rec.closed

    try:
        assert inside.wait(LONG)
        code, report = in_forked_child(check)
    finally:
        leave.set()
        join_in_time(thread)
        rec.close()
        if block is not None:
            block.close()
            block.unlink()
    assert code == 0, report
    assert rec.closed


def test_close_in_a_forked_child_still_refuses_the_section_its_own_thread_goes_on_with():
    """Forked inside a write section of a private record, the child's
    thread goes on with it (its lock repaired as the child's): close()
    there raises BufferError as in the parent, until the with block ends."""
    from process_helpers import in_forked_child

    rec = SeqRecord(x="d")

    def check():
        with pytest.raises(BufferError, match="write section"):
            rec.close()
        return not rec.closed

    with rec.write() as w:
        w.x = 1.0
        code, report = in_forked_child(check)
    assert code == 0, report


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer")
def test_close_from_a_signal_handler_inside_the_records_own_wait_raises_buffer_error(shm):
    rec = SeqRecord.create(shm.buf, **FIELDS)

    def handler(signum, frame):
        rec.close()

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(BufferError, match="its own calls"):
            rec.wait(rec.sequence, timeout=LONG)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert not rec.closed
    rec.close()


# ---- user code in a buffer's release (a Python exporter, 3.12+) ----

needs_release_buffer = pytest.mark.skipif(
    sys.version_info < (3, 12), reason="__release_buffer__ is 3.12's (PEP 688)"
)

#: A Python exporter of a bytearray that runs ``on_release(self)`` when an
#: export of it ends, inside the release: the hook the scenarios below use
#: to run user code while a record or ring lets its buffer go.
EXPORTER = """
import gc
from seqlock_py import SeqRecord, SeqRing

class Exporter:
    def __init__(self, size):
        self.memory = bytearray(size)
        self.on_release = lambda self: None
    def __buffer__(self, flags):
        return memoryview(self.memory)
    def __release_buffer__(self, view):
        view.release()
        self.on_release(self)
"""

#: A cycle through an exporter that hands what its box holds to ``kept``
#: when the collector's clear releases the export.  Tuples have no clear,
#: and the object's closer (its own bound method) is a second way to it,
#: so the collector often clears the record or ring while it is alive;
#: not always (its order is its own), hence the rounds.
CLEARED_CYCLES = """
import gc
from seqlock_py import SeqRecord, SeqRing

kept = []

class Exporter(tuple):
    __slots__ = ()
    def __buffer__(self, flags):
        return memoryview(self[0])
    def __release_buffer__(self, view):
        view.release()
        kept.extend(self[1])

def cycle(make, size, keep=lambda obj: obj):
    box = []
    obj = make(Exporter((bytearray(size), box)))
    box.append(keep(obj))
    obj._close_with(obj.__enter__)

def clear_as_the_collector_does(make, size, keep):
    # The collector's tp_clear call on one object of a cycle, made
    # directly: which object of a cycle the collector clears first is its
    # own choice (CPython 3.13's never picks the record or ring here).
    import ctypes
    box = []
    obj = make(Exporter((bytearray(size), box)))
    box.append(keep(obj))
    get_slot = ctypes.pythonapi.PyType_GetSlot
    get_slot.restype, get_slot.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_int]
    TP_CLEAR = 51  # Py_tp_clear, typeslots.h
    ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object)(get_slot(type(obj), TP_CLEAR))(obj)

def cleared(make, size, keep=lambda obj: obj):
    for _ in range(20):
        cycle(make, size, keep)
        gc.collect()
    if not kept:
        clear_as_the_collector_does(make, size, keep)
    assert kept, "the release kept nothing"
    return kept
"""


@needs_release_buffer
def test_close_called_while_the_buffer_is_released_returns_at_once():
    code = EXPORTER + """
exporter = Exporter(SeqRecord.buffer_size(x="d"))
rec = SeqRecord.create(exporter, x="d")
exporter.on_release = lambda self: rec.close()
rec.close()
assert rec.closed
print("ok")
"""
    assert_clean_exit(run_python(code, timeout=30), "close() from the release")


@needs_release_buffer
def test_a_record_the_collector_cleared_is_closed_to_code_that_kept_it():
    code = CLEARED_CYCLES + """
other = SeqRecord(x="d")
for rec in cleared(lambda e: SeqRecord.create(e, x="d"), SeqRecord.buffer_size(x="d")):
    assert rec.closed
    try:
        rec.update(x=1.0)
    except ValueError as exc:
        assert "closed" in str(exc), exc
    else:
        raise AssertionError("update() of a cleared record wrote")
assert other.read() == (0.0,)
print("ok", len(kept))
"""
    assert_clean_exit(run_python(code, timeout=60), "a cleared record kept alive")


@needs_release_buffer
def test_a_close_racing_the_release_returns_after_it():
    # Another thread's close() must not return while the buffer is still
    # exported: its caller would then close the buffer's owner.
    code = EXPORTER + """
import threading
exporter = Exporter(SeqRecord.buffer_size(x="d"))
rec = SeqRecord.create(exporter, x="d")
releasing, released = threading.Event(), threading.Event()
def slow_release(self):
    releasing.set()
    threading.Event().wait(0.3)
    released.set()
exporter.on_release = slow_release
first = threading.Thread(target=rec.close)
first.start()
assert releasing.wait(10)
rec.close()
assert released.is_set(), "close() returned while the release ran"
first.join()
print("ok")
"""
    assert_clean_exit(run_python(code, timeout=30), "two closers")
