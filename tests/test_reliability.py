"""Promises that must hold when things go wrong: signal handlers, killed
writer processes, and resources over many lifetimes."""

import gc
import multiprocessing
import os
import signal
import sys
import threading
import time
import tracemalloc
import weakref
from multiprocessing import shared_memory

import pytest

from seqlock_py import SeqLock, SeqRecord

FIELDS = dict(a="q", b="q", total="q")  # invariant: a + b == total


# ---- a signal handler that reads what its own thread is writing ----


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="needs SIGUSR1")
def test_signal_handler_reading_its_own_threads_write_section_gets_an_error():
    lock = SeqLock()
    seen = []

    def handler(signum, frame):
        try:
            lock.read(lambda: None)
        except RuntimeError as e:
            seen.append(e)

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        with lock:
            signal.raise_signal(signal.SIGUSR1)  # the handler runs here, mid-write
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert len(seen) == 1 and "holds the write lock" in str(seen[0])
    assert not lock.locked() and lock.sequence == 2


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="needs SIGUSR1")
def test_signal_handler_reading_a_record_its_thread_is_writing_sees_the_committed_state():
    # A record is a latch: a reader never waits, so even a handler that
    # interrupted its own thread's write section gets a complete snapshot.
    rec = SeqRecord(x="d", y="d")
    rec.update(x=1.0, y=1.0)
    seen = []

    def handler(signum, frame):
        seen.append(rec.read())

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        with rec.write() as w:
            w.x = 2.0
            signal.raise_signal(signal.SIGUSR1)  # the handler runs here, mid-write
            w.y = 2.0
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert seen == [(1.0, 1.0)]
    assert rec.read() == (2.0, 2.0) and not rec.locked()


# ---- a writer process killed inside a write section ----


def write_then_hang(name, ready):
    shm = shared_memory.SharedMemory(name=name)
    rec = SeqRecord.attach(shm.buf, **FIELDS)
    section = rec.write()
    w = section.__enter__()
    w.a = 1_000_000  # half a write: total not updated
    ready.set()
    time.sleep(60)  # killed before it ever finishes


@pytest.fixture
def shared_record():
    shm = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(**FIELDS))
    held = {"rec": SeqRecord.create(shm.buf, **FIELDS), "name": shm.name}
    yield held
    held.clear()  # pytest keeps the fixture value: drop the record here
    gc.collect()
    shm.close()
    shm.unlink()


def kill_a_writer_mid_section(name):
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    child = ctx.Process(target=write_then_hang, args=(name, ready))
    child.start()
    assert ready.wait(30), "the writer process never opened its section"
    child.kill()  # SIGKILL: no cleanup of any kind
    child.join(30)
    assert child.exitcode == -signal.SIGKILL


def test_sigkilled_writer_leaves_readers_the_last_complete_snapshot(shared_record):
    rec, name = shared_record["rec"], shared_record["name"]
    rec.update(a=1, b=2, total=3)
    before = rec.sequence
    kill_a_writer_mid_section(name)
    assert rec.locked() and rec.sequence == before + 1  # left mid-write
    assert rec.read() == (1, 2, 3)  # at once: readers never wait
    assert rec.recoveries == 0  # nor repair anything: the next writer does


def test_sigkilled_writer_is_recovered_by_the_next_writer(shared_record):
    rec, name = shared_record["rec"], shared_record["name"]
    rec.update(a=1, b=2, total=3)
    kill_a_writer_mid_section(name)
    with rec.write(timeout=5) as w:
        assert (w.a, w.b, w.total) == (1, 2, 3)  # the half-write was undone
        w.update(a=5, total=7)
    assert rec.read() == (5, 2, 7) and rec.recoveries == 1


# ---- resources ----


def test_a_held_lock_keeps_its_owner_alive():
    # The held mutex is linked into the holding thread's robust list: its
    # memory must not be freed under it.
    lock = SeqLock()
    lock.acquire_write()
    ref = weakref.ref(lock)
    del lock
    gc.collect()
    assert ref() is not None
    ref().release_write()
    gc.collect()
    assert ref() is None


def test_seqlock_is_small():
    # The count's line (128 bytes: readers' count apart from the writers'
    # words) and the robust process-shared mutex (40 bytes on glibc) are
    # most of it.
    assert sys.getsizeof(SeqLock()) <= 384


def allocated_after(work, rounds):
    gc.collect()
    tracemalloc.start()
    try:
        work(rounds // 10)  # warm caches and free lists
        gc.collect()
        base = tracemalloc.get_traced_memory()[0]
        work(rounds)
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()


def test_seqlock_lifetimes_leak_nothing():
    def work(n):
        for i in range(n):
            lock = SeqLock(max_retries=3)
            with lock.write(timeout=1):
                pass
            lock.read(lambda: i)
            lock.read_retry(lock.read_begin())
            try:
                lock.read(lambda: 1 / 0)
            except ZeroDivisionError:
                pass

    assert allocated_after(work, 20_000) < 64 * 1024


def test_seqrecord_lifetimes_leak_nothing():
    buf = bytearray(2048)

    def work(n):
        for i in range(n):
            rec = SeqRecord(x="d", n="q", flag="?", v="64d")
            rec.update(x=1.5, n=i, v=[float(i)] * 64)
            with rec.write() as w:
                w.v[3] = 2.0
                w.x += 1
            rec.read(), rec.read_dict(), rec["v"], rec.get("x")
            rec.read_into(buf)
            try:
                rec.update(n="bad")
            except TypeError:
                pass

    assert allocated_after(work, 5_000) < 64 * 1024


def test_shared_records_release_their_buffer():
    fields = dict(x="d")
    shm = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(**fields))
    try:
        for _ in range(1000):
            rec = SeqRecord.create(shm.buf, overwrite=True, **fields)
            SeqRecord.attach(shm.buf, **fields).read()
            del rec
    finally:
        shm.close()  # BufferError here if any record still held the buffer
        shm.unlink()
