"""Garbage collection: every object that holds references takes part in
it, so a reference cycle through a record, its buffer, a writer, an array
field, a write section or a waiter is freed like any other.

Each test builds one cycle, drops it, runs gc.collect() and checks through
a weak reference (or a finalizer) that its objects are gone.

And a collection never crashes or tears a section: not on a cycle through
an exported memoryview (CPython gh-77894 on 3.11: such a cycle is kept
there rather than freed), not from a finalizer or a weakref callback that
uses records, not mid-update() or mid-read_into(), not from another thread,
not around a fork; a record whose holder thread died is freed once
another writer took over, and reference counts come back where they were.
Those tests come from the hostile GC review (issue 12): "Holds:" in a
docstring means it passed when written; the others were defects.
Anything that can crash runs in a fresh interpreter.
"""
from __future__ import annotations

import gc
import os
import sys
import textwrap
import threading
import time
import weakref

import pytest

from process_helpers import describe_exit, in_forked_child, run_python
from record_helpers import writer_left_by_a_dead_thread
from seqlock_py import SeqLock, SeqRecord
from workers import join_in_time, start_daemon

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


# ---- memoryviews: the collector must never clear an exported memoryview ----


def run_ok(code, timeout=60):
    """Run code in a fresh interpreter; fail unless it exits 0 and prints ok."""
    code = "import gc, sys, threading, weakref\n" + textwrap.dedent(code)
    status, out = run_python(code, timeout=timeout)
    assert status == 0 and "ok" in out.split(), f"{describe_exit(status)}\n{out}"
    return out


def test_collecting_a_record_on_a_memoryview_in_a_cycle_does_not_crash():
    """3.11: SIGSEGV in the collector.  The record's traverse showed it
    its memoryview; the collector cleared that memoryview while the record
    still exported it (CPython gh-77894, fixed in 3.12.7 and 3.13), freeing
    its managed buffer; releasing the record's export then freed the
    memoryview, which dereferenced the cleared buffer."""
    run_ok("""
        from seqlock_py import SeqRecord
        F = dict(x="d")
        class B(bytearray): pass
        buf = B(SeqRecord.buffer_size(**F))
        mv = memoryview(buf)
        rec = SeqRecord.create(mv, **F)
        buf.rec = rec          # cycle: rec -> mv -> buf -> rec
        holder = [mv]          # a collection that keeps them puts mv first
        del buf, rec
        gc.collect()
        del mv, holder
        gc.collect()
        print("ok")
    """)


def test_collecting_a_record_on_shared_memory_buf_in_a_cycle_does_not_crash():
    """3.11: SIGSEGV.  The everyday case of the one above: an object
    holding a SharedMemory and the record laid out in its .buf, in a
    reference cycle, dropped."""
    out = run_ok("""
        from multiprocessing.shared_memory import SharedMemory
        from seqlock_py import SeqRecord
        F = dict(x="d")
        class Feed: pass
        shm = SharedMemory(create=True, size=SeqRecord.buffer_size(**F))
        name = shm.name
        try:
            rec = SeqRecord.create(shm.buf, **F)
            rec.update(x=2.0)
            feed = Feed(); feed.shm = shm; feed.rec = rec; feed.me = feed
            ref = weakref.ref(rec)
            del feed, shm, rec
            gc.collect()
            print("freed", ref() is None)
        finally:
            SharedMemory(name).unlink()
        print("ok")
    """)
    assert "freed True" in out  # the cycle does not run through the memoryview


def test_a_record_on_a_memoryview_in_a_cycle_is_not_cleared_before_it_is_unreachable():
    """Holds: a cycle through a memoryview that is still referenced from
    outside keeps the record usable after a collection."""
    buf = Buffer(SeqRecord.buffer_size(**FIELDS))
    mv = memoryview(buf)
    rec = SeqRecord.create(mv, **FIELDS)
    buf.rec = rec
    del buf
    gc.collect()
    rec.update(x=4.0)
    assert rec["x"] == 4.0
    mv.obj.rec = None  # break the cycle: the record goes, its export too
    del rec
    gc.collect()
    mv.release()


# ---- references held for a holder that died --------------------------------


def test_a_record_whose_holder_thread_died_is_freed_once_another_writer_took_over():
    """The record was never freed: the reference its dead holder's lock
    took (lock_path.c) was never given back, even after another thread took
    the lock over and released it."""
    rec = SeqRecord(**FIELDS)
    writer_left_by_a_dead_thread(rec)
    rec.update(x=2.0)  # takes the dead thread's section over
    assert not rec.locked()
    ref = weakref.ref(rec)
    del rec
    gc.collect()
    assert ref() is None


def test_a_seqlock_whose_holder_thread_died_is_freed_once_taken_over():
    """As above for a SeqLock: leaked for ever after a take-over."""
    lock = SeqLock()
    join_in_time(start_daemon(lock.acquire_write))
    with pytest.warns(RuntimeWarning):
        assert lock.acquire_write(timeout=5)
    lock.release_write()
    ref = weakref.ref(lock)
    del lock
    gc.collect()
    assert ref() is None


# ---- the collector on another thread, finalizers, weakref callbacks --------


def test_a_writer_entered_on_one_thread_and_collected_on_another_is_undone_by_its_thread():
    """Holds: the holder's next write undoes the dropped section; the
    record stays alive (the lock's reference) until then."""
    rec = SeqRecord(**FIELDS)
    ref = weakref.ref(rec)
    entered, collected, done = threading.Event(), threading.Event(), threading.Event()
    seen = []

    def holder(rec):
        box = [rec.write()]
        box.append(box)
        box[0].__enter__()
        box[0].x = 9.0  # a half write: must not become visible
        del box
        entered.set()
        assert collected.wait(30)
        rec.update(history=[1.0, 2.0, 3.0, 4.0])
        seen.append(rec.read())
        done.set()

    t = start_daemon(holder, rec)
    del rec
    assert entered.wait(30)
    gc.collect()
    collected.set()
    join_in_time(t)
    assert done.is_set()
    assert seen == [(0.0, (1.0, 2.0, 3.0, 4.0))]
    gc.collect()
    assert ref() is None


def test_a_finalizer_that_resurrects_the_record_inside_a_write_section_keeps_it_usable():
    """Holds: __del__ of the buffer opens a section and keeps the writer
    (resurrecting record and buffer); the record stays whole, and the
    section closes later."""
    kept = []

    class Finalized(Buffer):
        def __del__(self):
            w = self.rec.write()
            w.__enter__()
            w.x = 3.0
            kept.append(w)

    buf = Finalized(SeqRecord.buffer_size(**FIELDS))
    buf.rec = SeqRecord.create(buf, **FIELDS)
    buf.me = buf
    del buf
    gc.collect()
    gc.collect()
    (w,) = kept
    assert w.x == 3.0
    w.__exit__(None, None, None)
    (rec,) = [r for r in gc.get_referents(w) if isinstance(r, SeqRecord)]
    assert rec["x"] == 3.0 and not rec.locked()
    rec.update(x=4.0)
    assert rec.read()[0] == 4.0


def test_a_finalizer_that_waits_on_the_record_returns():
    """Holds: __del__ waiting (with a timeout) and reading works."""
    seen = []

    class Finalized(Buffer):
        def __del__(self):
            seq, _ = self.rec.read_versioned()
            seen.append(self.rec.wait(seq, 0.01))
            seen.append(self.rec.wait(seq - 2, 0))

    buf = Finalized(SeqRecord.buffer_size(**FIELDS))
    buf.rec = SeqRecord.create(buf, **FIELDS)
    buf.rec.update(x=1.0)
    del buf
    gc.collect()
    assert seen == [False, True]


def test_a_weakref_callback_that_collects_and_uses_other_records_is_harmless():
    """Holds: a callback on a dying record runs gc.collect() and writes a
    second record in the same cycle's neighbourhood."""
    other = SeqRecord(**FIELDS)
    calls = []

    def callback(ref):
        gc.collect()
        other.update(x=float(len(calls) + 1))
        calls.append(ref() is None)

    refs = []
    for _ in range(20):
        buf = Buffer(SeqRecord.buffer_size(**FIELDS))
        buf.rec = SeqRecord.create(buf, **FIELDS)
        refs.append(weakref.ref(buf.rec, callback))
        del buf
    gc.collect()
    assert calls == [True] * 20
    assert other["x"] == 20.0


def test_update_whose_conversion_drops_the_cycle_and_collects_still_writes():
    """Holds: __float__ drops the last outside reference to the buffer
    cycle and runs gc.collect() in the middle of update(); the record
    (kept by the call) is written, then freed."""
    holder = {}

    class Evil:
        def __float__(self):
            holder.clear()
            gc.collect()
            return 6.0

    buf = Buffer(SeqRecord.buffer_size(**FIELDS))
    buf.rec = SeqRecord.create(buf, **FIELDS)
    holder["buf"] = buf
    ref = weakref.ref(buf.rec)
    rec = buf.rec
    del buf
    rec.update(x=Evil())
    assert rec["x"] == 6.0
    with rec.write() as w:
        w.history[0] = Evil()
        w.x = Evil()
    assert rec.read() == (6.0, (6.0, 0.0, 0.0, 0.0))
    del rec, w
    gc.collect()
    assert ref() is None


def test_read_into_a_buffer_whose_cycle_is_collected_meanwhile():
    """Holds: read_into a bytearray-subclass target in a cycle, collected
    between reads by another thread, never fails or crashes."""
    rec = SeqRecord(**FIELDS)
    rec.update(x=1.5)
    stop = threading.Event()

    def collector():
        # Paced: on 3.13t each full collection stops the world, and back to
        # back on a loaded machine they left this thread almost no turn.
        while not stop.is_set():
            gc.collect()
            time.sleep(0.001)

    t = start_daemon(collector)
    reads = 0
    deadline = time.monotonic() + 10
    try:
        while reads < 300 and time.monotonic() < deadline:
            target = Buffer(rec.nbytes)
            target.me = target
            assert rec.read_into(target) % 2 == 0
            assert memoryview(target).cast("d")[0] == 1.5
            del target
            reads += 1
    finally:
        stop.set()
        join_in_time(t)
    assert reads > 0


def test_array_field_kept_after_its_writer_and_record_are_collected_refuses_use():
    """Holds: an ArrayField kept past its section keeps writer and record
    alive and refuses reads and writes (RuntimeError, no crash)."""
    buf = Buffer(SeqRecord.buffer_size(**FIELDS))
    buf.rec = SeqRecord.create(buf, **FIELDS)
    with buf.rec.write() as w:
        field = w.history
        field[1] = 2.0
    buf.field = field
    del buf, w
    gc.collect()
    with pytest.raises(RuntimeError):
        field[0]
    with pytest.raises(RuntimeError):
        field[0] = 1.0
    assert len(field) == 4


def test_get_referents_of_every_type_are_what_it_holds():
    """Holds: traverse reports each object's type and its one reference."""
    buf = Buffer(SeqRecord.buffer_size(**FIELDS))
    rec = SeqRecord.create(buf, **FIELDS)
    own = SeqRecord(**FIELDS)
    lock = SeqLock()
    writer = rec.write()
    with writer as w:
        field = w.history
    snapshot_class = type(own.read())
    assert set(map(id, gc.get_referents(rec))) == {
        id(SeqRecord), id(snapshot_class), id(buf)}
    assert gc.get_referents(own) == [SeqRecord, snapshot_class]
    assert gc.get_referents(lock) == [SeqLock]
    assert gc.get_referents(writer)[1:] == [rec]
    assert gc.get_referents(field)[1:] == [writer]
    assert gc.get_referents(lock.write())[1:] == [lock]
    assert gc.get_referents(rec._waiter(0, 0))[1:] == [rec]
    assert any(r is rec for r in gc.get_referrers(buf))


def test_reference_counts_return_to_where_they_were_after_sections():
    """Holds: sections, failed sections, waiters and reads leave the
    record's and the lock's reference counts as they found them."""
    rec = SeqRecord(**FIELDS)
    lock = SeqLock()
    before = sys.getrefcount(rec), sys.getrefcount(lock)
    for _ in range(50):
        with rec.write() as w:
            w.x = 1.0
        with pytest.raises(ZeroDivisionError):
            with rec.write() as w:
                1 / 0
        rec.update(x=2.0)
        rec.read(), rec.read_dict(), rec.get("x"), rec._waiter(0, 0)
        with lock:
            pass
        assert lock.acquire_write(timeout=1)
        lock.release_write()
        lock.read(lambda: None)
    del w
    assert (sys.getrefcount(rec), sys.getrefcount(lock)) == before


# ---- fork after the collector freed private records ------------------------


@pytest.mark.thread_unsafe(reason="forks: no other test thread may hold a lock at the fork")
def test_fork_after_the_collector_freed_private_records_in_cycles():
    """Holds: records in private memory cleared by the collector leave the
    atfork repair list; a fork then repairs only live locks."""
    live = SeqRecord(**FIELDS)
    for kind in range(3):
        for _ in range(200):
            buf = Buffer(SeqRecord.buffer_size(**FIELDS))
            rec = SeqRecord.create(buf, **FIELDS)
            buf.rec = rec
            if kind == 1:
                buf.w = rec.write()
            elif kind == 2:
                buf.waiter = rec._waiter(0, 0)
            rec.update(x=1.0)
            del buf, rec
        gc.collect()
    # Allocate over the freed memory, so a dangling node would be garbage.
    junk = [bytearray(b"\xff" * SeqRecord.buffer_size(**FIELDS)) for _ in range(2000)]

    def check():
        live.update(x=3.0)
        return live["x"] == 3.0

    code, report = in_forked_child(check)
    del junk
    assert code == 0, f"{describe_exit(code)}: {report}"


def test_fork_while_another_thread_collects_cycles_of_private_records():
    """Holds: forks while a thread keeps creating and collecting private
    records in cycles (the repair list changes under the fork)."""
    run_ok("""
        import os
        from seqlock_py import SeqRecord
        sys.path.insert(0, %r)
        from process_helpers import in_forked_child
        F = dict(x="d")
        class B(bytearray): pass
        stop = threading.Event()
        def churn():
            while not stop.is_set():
                for _ in range(50):
                    b = B(SeqRecord.buffer_size(**F)); b.r = SeqRecord.create(b, **F)
                    b.r.update(x=1.0); b.w = b.r.write()
                gc.collect()
        t = threading.Thread(target=churn, daemon=True); t.start()
        live = SeqRecord(**F)
        for _ in range(20):
            code, report = in_forked_child(lambda: live.update(x=2.0) or live["x"] == 2.0)
            assert code == 0, report
        stop.set(); t.join(30)
        print("ok")
    """ % os.path.dirname(__file__))


# ---- many threads and a collector (most telling on the free-threaded build) --


def test_threads_churning_cycles_while_one_thread_collects_do_not_crash():
    """Holds: four threads build and drop cycles through buffers, writers,
    array fields, waiters and write sections, writing, reading and waiting
    on shared records, while another collects in a loop (2 s)."""
    run_ok("""
        import time
        from seqlock_py import SeqLock, SeqRecord
        F = dict(x="d", h="4d")
        class B(bytearray): pass
        shared = [SeqRecord(**F) for _ in range(2)]
        stop = threading.Event()
        errors = []
        def churn(i):
            try:
                n = 0
                while not stop.is_set():
                    n += 1
                    b = B(SeqRecord.buffer_size(**F))
                    rec = SeqRecord.create(memoryview(b) if n % 3 == 0 else b, **F)
                    b.rec = rec
                    with rec.write() as w:
                        w.x = float(n); w.h[n % 4] = 1.0
                        b.f = w.h
                    b.waiter = rec._waiter(0, 0)
                    lock = SeqLock(); b.s = lock.write()
                    with b.s: pass
                    s = shared[n % 2]
                    s.update(x=float(n), h=[float(n)] * 4)
                    x, h = s.read()
                    assert h == (x,) * 4, (x, h)
                    seq, _ = s.read_versioned()
                    s.wait(seq, 0)
                    del b, rec, w, lock, s
            except BaseException as e:
                errors.append(repr(e))
        def collect():
            while not stop.is_set():
                gc.collect()
        ts = [threading.Thread(target=churn, args=(i,)) for i in range(4)]
        ts.append(threading.Thread(target=collect))
        for t in ts: t.start()
        time.sleep(2)
        stop.set()
        for t in ts: t.join(30)
        assert not any(t.is_alive() for t in ts), "hung"
        assert not errors, errors
        gc.collect()
        print("ok")
    """)


def test_waiters_whose_records_are_dropped_and_collected_still_wake():
    """Holds: threads asleep in wait() and _Waiter.wait() on records whose
    last outside reference is dropped and collected wake on the write and
    the cancel."""
    buf = Buffer(SeqRecord.buffer_size(**FIELDS))
    buf.rec = SeqRecord.create(buf, **FIELDS)
    rec = buf.rec
    seq, _ = rec.read_versioned()
    waiter = rec._waiter(seq, 30)  # cancelled before the write
    answers = []
    t1 = start_daemon(lambda r: answers.append(r.wait(seq, 30)), rec)
    t2 = start_daemon(lambda w: answers.append(w.wait()), waiter)
    cancel = waiter.cancel
    del buf, waiter
    for _ in range(5):
        gc.collect()
    gc.get_referrers(rec)
    cancel()
    join_in_time(t2)
    rec.update(x=1.0)
    join_in_time(t1)
    assert sorted(answers) == [False, True]
    ref = weakref.ref(rec)
    del rec, cancel
    gc.collect()
    assert ref() is None


@pytest.mark.thread_unsafe(reason="counts the process's wait_async threads")
def test_wait_async_on_a_record_in_a_collected_cycle_is_cancelled_cleanly():
    """Holds: an abandoned wait_async task on a record in a cycle; the loop
    closes, the cycle is collected, the waiting thread ends."""
    import asyncio

    buf = Buffer(SeqRecord.buffer_size(**FIELDS))
    buf.rec = SeqRecord.create(buf, **FIELDS)
    ref = weakref.ref(buf.rec)

    async def main(buf):
        seq, _ = buf.rec.read_versioned()
        task = asyncio.ensure_future(buf.rec.wait_async(seq, 30))
        buf.task = task  # cycle: buf -> task -> coroutine -> buf
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main(buf))
    del buf
    gc.collect()
    deadline = threading.Event()
    for _ in range(300):
        if not any(t.name == "seqlock_py wait_async" for t in threading.enumerate()):
            break
        deadline.wait(0.1)
    assert not any(t.name == "seqlock_py wait_async" for t in threading.enumerate())
    gc.collect()
    assert ref() is None
