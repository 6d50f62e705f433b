"""Garbage collection: every object that holds references takes part in
it, so a reference cycle through a record, its buffer, a writer, an array
field, a write section or a waiter is freed like any other.

Each test builds one cycle, drops it, runs gc.collect() and checks through
a weak reference (or a finalizer) that its objects are gone.
"""
from __future__ import annotations

import gc
import threading
import weakref

import pytest

from seqlock_py import SeqLock, SeqRecord

FIELDS = dict(x="d", history="4d")


class Buffer(bytearray):
    """A buffer that can refer back to the record laid out in it."""


def record_on_own_buffer():
    buf = Buffer(SeqRecord.buffer_size(**FIELDS))
    rec = SeqRecord.create(buf, **FIELDS)
    buf.rec = rec
    return buf, rec


def collected(ref):
    gc.collect()
    return ref() is None


def test_every_type_that_holds_references_is_tracked_by_the_gc():
    buf, rec = record_on_own_buffer()
    writer = rec.write()
    with writer as w:
        field = w.history
    section = SeqLock().write()
    for obj in (rec, writer, field, section, SeqLock(), rec._waiter(0, 0)):
        assert gc.is_tracked(obj), type(obj).__name__


def test_record_kept_on_its_own_buffer_is_freed():
    buf, rec = record_on_own_buffer()
    rec.update(x=1.0)
    ref = weakref.ref(rec)
    del buf, rec
    assert collected(ref)


def test_record_in_a_cycle_through_its_buffers_attributes_is_freed():
    buf = Buffer(SeqRecord.buffer_size(**FIELDS))
    rec = SeqRecord.create(buf, **FIELDS)
    buf.extra = {"records": [rec]}
    ref = weakref.ref(rec)
    del buf, rec
    assert collected(ref)


def test_record_writer_in_a_cycle_is_freed():
    buf, rec = record_on_own_buffer()
    buf.writer = rec.write()
    ref = weakref.ref(rec)
    del buf, rec
    assert collected(ref)


def test_array_field_kept_after_its_section_in_a_cycle_is_freed():
    buf, rec = record_on_own_buffer()
    with rec.write() as w:
        w.history[0] = 2.0
        buf.field = w.history
    ref = weakref.ref(rec)
    del buf, rec, w
    assert collected(ref)


def test_waiter_in_a_cycle_is_freed():
    buf, rec = record_on_own_buffer()
    buf.waiter = rec._waiter(0, 0)
    ref = weakref.ref(rec)
    del buf, rec
    assert collected(ref)


def test_seqlock_write_section_in_a_cycle_is_freed():
    lock = SeqLock()
    box = [lock.write()]
    box.append(box)
    ref = weakref.ref(lock)
    del lock, box
    assert collected(ref)


def test_freeing_a_cycle_leaves_the_buffers_memory_reusable():
    """The collector drops the record's export of its buffer, so the
    exporter is freed with it (it would keep its memory otherwise)."""
    buf, rec = record_on_own_buffer()
    buf_ref = weakref.ref(buf)
    del buf, rec
    assert collected(buf_ref)


def test_many_dropped_cycles_do_not_accumulate():
    refs = []
    for _ in range(2000):
        buf, rec = record_on_own_buffer()
        refs.append(weakref.ref(rec))
        del buf, rec
    gc.collect()
    assert sum(r() is not None for r in refs) == 0


def test_record_in_a_cycle_whose_lock_another_thread_holds_is_kept_until_released():
    """A held lock keeps its record alive (its memory holds the lock the
    holder's thread will release): the collector must not free it."""
    buf, rec = record_on_own_buffer()
    ref = weakref.ref(rec)
    inside, leave, done = threading.Event(), threading.Event(), threading.Event()

    def writer(rec):
        with rec.write() as w:
            w.x = 5.0
            inside.set()
            leave.wait(30)
        done.set()

    t = threading.Thread(target=writer, args=(rec,))
    t.start()
    assert inside.wait(30)
    del buf, rec
    gc.collect()
    kept = ref() is not None
    leave.set()
    t.join(30)
    assert kept
    assert done.is_set()
    assert collected(ref)


def test_a_finalizer_in_the_cycle_sees_a_usable_record():
    """__del__ of the buffer runs before the collector clears anything
    (PEP 442): the record it reaches still reads and writes."""
    seen = []

    class Finalized(Buffer):
        def __del__(self):
            self.rec.update(x=3.0)
            seen.append(self.rec.read()[0])

    buf = Finalized(SeqRecord.buffer_size(**FIELDS))
    buf.rec = SeqRecord.create(buf, **FIELDS)
    del buf
    gc.collect()
    assert seen == [3.0]


@pytest.mark.parametrize("make", [
    lambda rec: rec.write(),
    lambda rec: rec._waiter(0, 0),
], ids=["writer", "waiter"])
def test_collecting_a_cycle_twice_over_is_harmless(make):
    for _ in range(3):
        buf, rec = record_on_own_buffer()
        buf.obj = make(rec)
        buf.self = buf
        del buf, rec
        gc.collect()
