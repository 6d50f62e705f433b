"""Signals reach every wait, and a signal handler that uses a lock can
neither deadlock nor tear it.

- SIGINT (Ctrl-C) ends each kind of wait with KeyboardInterrupt, promptly,
  and leaves the lock usable: a SeqLock reader waiting for its locking
  pass, each of a record's writers waiting for another thread's section,
  a main thread's wait() while another thread waits too, an untimed
  main-thread wait() (it sleeps in one piece: a signal ends the sleep);
- a signal to a waiting non-main thread neither ends its wait nor loses
  it; handlers run during a main thread's wait, which goes on, even for a
  signal another thread caught (the wait's backstop slice);
- a handler's write is news for the wait it interrupted; a handler that
  writes or waits while its own thread holds the write lock gets
  RuntimeError, and every snapshot stays consistent.

(Elsewhere: tests/test_seqlock.py, Ctrl-C on a SeqLock's writers;
tests/test_news.py, on a main thread's wait(); tests/test_reliability.py,
a handler reading its own thread's section.)  These tests come from
hostile reviews (issues 11 and 12): "Holds:"/"Held:" in a docstring means
it passed when written and covers something no other test did.
"""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from seqlock_py import SeqLock, SeqRecord
from workers import LONG, WOKEN, Call, start_in_thread


# ---- Ctrl-C ends every wait --------------------------------------------------


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs pthread_kill")
def test_ctrl_c_interrupts_a_reader_waiting_for_its_locking_pass():
    """Holds: a read() whose lock-free pass was overlapped (max_retries=0)
    waits for the lock word held by a long writer; SIGINT ends the wait
    with KeyboardInterrupt within the 50 ms wait slice."""
    lock = SeqLock(max_retries=0)
    release = threading.Event()
    holding = threading.Event()

    def long_writer():
        with lock:
            holding.set()
            release.wait(30)

    writer = []
    passes = []

    def copy():
        passes.append(1)
        if len(passes) == 1:
            writer.append(Call(long_writer))
            holding.wait(10)
        return 1

    timer = threading.Timer(0.3, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            lock.read(copy)
    finally:
        timer.cancel()
        release.set()
        writer[0].join(10)
    assert time.monotonic() - started < 5
    assert passes == [1] and not lock.locked()


RECORD_WAITS = {  # a record's readers never wait: only its writers do
    "update": lambda rec: rec.update(x=1.0),
    "write": lambda rec: rec.write().__enter__(),
    "write-timeout": lambda rec: rec.write(timeout=60).__enter__(),
}


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs pthread_kill")
@pytest.mark.parametrize("wait", list(RECORD_WAITS.values()), ids=list(RECORD_WAITS))
def test_ctrl_c_interrupts_every_wait_on_a_record_another_thread_writes(wait):
    """Holds: SIGINT ends each kind of wait on a SeqRecord whose write
    section another thread holds, promptly, and leaves the record usable
    (tests/test_seqlock.py covers the SeqLock's waits)."""
    rec = SeqRecord(x="d")
    inside, release = threading.Event(), threading.Event()

    def hold():
        with rec.write() as w:
            w.x = 5.0
            inside.set()
            release.wait(30)

    holder = Call(hold)
    assert inside.wait(10)
    timer = threading.Timer(0.2, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            wait(rec)
        assert time.monotonic() - started < 5
    finally:
        timer.cancel()
        release.set()
        holder.join(10)
    assert rec.read() == (5.0,) and not rec.locked() and rec.sequence == 2


@pytest.mark.timeout(30)
def test_ctrl_c_reaches_a_main_thread_waiting_beside_a_waiting_non_main_thread():
    """Held: with another thread asleep in one piece, a process-wide SIGINT
    still interrupts the main thread's wait() promptly."""
    lock = SeqLock()
    seq = lock.sequence
    other, box = start_in_thread(lock.wait, seq, LONG)
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            lock.wait(seq)
    finally:
        timer.join()
    assert time.monotonic() - start < 0.2 + WOKEN
    assert not box  # the other waiter sleeps on
    with lock:
        pass
    other.join(LONG)
    assert box and box[0][:2] == ("ok", True), box


@pytest.mark.timeout(30)
def test_a_signal_to_a_waiting_non_main_thread_neither_ends_its_wait_nor_loses_it():
    """Held: SIGUSR1 delivered to the thread asleep in wait() (not the
    main thread) interrupts its futex wait; it sleeps again and is woken
    by the next write."""
    lock = SeqLock()
    seq = lock.sequence
    got = []
    old = signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
    try:
        waiter, box = start_in_thread(lock.wait, seq, LONG)
        time.sleep(0.1)
        for _ in range(5):
            signal.pthread_kill(waiter.ident, signal.SIGUSR1)
            time.sleep(0.02)
        time.sleep(0.1)
        assert not box, box
        written_at = time.monotonic()
        with lock:
            pass
        waiter.join(LONG)
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert box and box[0][:2] == ("ok", True), box
    assert box[0][2] - written_at < WOKEN


# ---- signal handlers that use the lock ---------------------------------------


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer")
def test_signal_handler_writing_while_the_main_thread_waits_for_the_lock():
    """Holds: SIGALRM every 5 ms runs a handler that writes the record (and
    reads it back) while the main thread waits for, or holds, the lock that
    another thread keeps taking for 10 ms at a time.  No deadlock; inside
    the main thread's own section the handler gets RuntimeError; every
    snapshot is consistent."""
    rec = SeqRecord(a="q", b="q")
    outcomes = []

    def handler(signum, frame):
        # One n for both fields: a SIGALRM landing between two len() calls
        # runs a nested handler that appends, and update(a=1, b=4) would
        # then write exactly the "torn" pair this test looks for.
        n = len(outcomes)
        try:
            rec.update(a=n, b=n)
            a, b = rec.read()
            outcomes.append("wrote" if a == b else f"torn {a} {b}")
        except RuntimeError as exc:
            assert "already holds" in str(exc), exc
            outcomes.append("refused")

    def other_writer():
        for _ in range(30):
            with rec.write() as w:
                w.a = -1
                time.sleep(0.01)
                w.b = -1
                w.a = w.b = 0

    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.005, 0.005)
    try:
        other = Call(other_writer)
        while not other.done():
            rec.update(a=5, b=5)  # waits for the other writer
            with rec.write() as w:  # holds: a handler here is refused
                w.a = 7
                time.sleep(0.001)
                w.b = 7
            a, b = rec.read()
            assert a == b, (a, b)
        other.join(30)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, previous)
    assert "wrote" in outcomes
    assert not [o for o in outcomes if o.startswith("torn")]
    assert not rec.locked() and rec.sequence % 2 == 0


@pytest.mark.timeout(30)
def test_a_signal_handler_that_writes_the_record_ends_the_main_threads_wait():
    """Held: a handler runs during the main thread's wait; its write is
    news for the wait it interrupted."""
    assert threading.current_thread() is threading.main_thread()
    rec = SeqRecord(x="q")
    seq = rec.sequence
    old = signal.signal(signal.SIGUSR1, lambda *_: rec.update(x=5))
    timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        timer.start()
        start = time.monotonic()
        assert rec.wait(seq, LONG) is True
        assert time.monotonic() - start < 0.1 + WOKEN
    finally:
        timer.join()
        signal.signal(signal.SIGUSR1, old)
    assert rec.read() == (5,)


def waited_on(kind):
    """(object to wait on, write()) for a SeqLock, a SeqRecord and a
    read-only record attached to a writable one's memory (which polls)."""
    if kind == "SeqLock":
        lock = SeqLock()

        def write_lock():
            with lock:
                pass
        return lock, write_lock
    buf = bytearray(SeqRecord.buffer_size(x="q"))
    rec = SeqRecord.create(buf, x="q")
    seen = SeqRecord.attach(memoryview(buf).toreadonly(), x="q") if kind == "read-only" else rec
    return seen, lambda: rec.update(x=rec["x"] + 1)


WAITED_ON = ["SeqLock", "SeqRecord", "read-only"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", WAITED_ON)
def test_ctrl_c_from_another_thread_interrupts_an_untimed_main_thread_wait(kind):
    """A wait with no timeout in the main thread sleeps in one piece (no
    50 ms slices any more): SIGINT sent to the process by a timer thread
    (os.kill: the kernel offers it to the main thread) ends the sleep and
    KeyboardInterrupt is raised."""
    assert threading.current_thread() is threading.main_thread()
    obj, _ = waited_on(kind)
    timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            obj.wait(obj.sequence)
            pytest.fail("wait() returned without a write")
    finally:
        timer.join()
    assert obj.wait(obj.sequence, 0) is False  # nothing was written


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", WAITED_ON)
def test_signal_handlers_run_during_a_main_thread_wait_that_goes_on(kind):
    """Three SIGUSR1 from another thread (each sent once the handler of
    the one before has run: signals coalesce) each run their handler
    while the main thread's untimed wait sleeps; the wait goes on after
    each and answers True for the write that follows them."""
    assert threading.current_thread() is threading.main_thread()
    obj, write = waited_on(kind)
    seq = obj.sequence
    ran = []
    handled = threading.Event()

    def handler(*_):
        ran.append(obj.sequence)  # before the write: the wait is still on
        handled.set()

    def signal_then_write():
        for _ in range(3):
            time.sleep(0.05)
            handled.clear()
            os.kill(os.getpid(), signal.SIGUSR1)
            handled.wait(LONG)
        write()

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        sender = threading.Thread(target=signal_then_write)
        sender.start()
        assert obj.wait(seq) is True
        sender.join(LONG)
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert ran == [seq] * 3


@pytest.mark.timeout(30)
def test_a_signal_caught_by_another_thread_still_runs_its_handler_during_a_main_thread_wait():
    """signal.raise_signal() in a timer thread delivers SIGUSR1 to that
    thread: the main thread's futex wait is not interrupted, but CPython
    has recorded the signal, and the wait's backstop slice runs the
    handler (whose write ends the wait) instead of sleeping until a write
    that would never come."""
    assert threading.current_thread() is threading.main_thread()
    rec = SeqRecord(x="q")
    seq = rec.sequence
    old = signal.signal(signal.SIGUSR1, lambda *_: rec.update(x=7))
    timer = threading.Timer(0.1, signal.raise_signal, (signal.SIGUSR1,))
    try:
        timer.start()
        assert rec.wait(seq) is True
    finally:
        timer.join()
        signal.signal(signal.SIGUSR1, old)
    assert rec.read() == (7,)


@pytest.mark.timeout(30)
def test_wait_in_a_signal_handler_while_the_main_thread_writes_raises():
    """Held: a handler that waits for news while its own thread holds the
    write lock gets RuntimeError, not a deadlock."""
    lock = SeqLock()
    seen = []

    def handler(*_):
        try:
            seen.append(lock.wait(lock.sequence, LONG))
        except RuntimeError as exc:
            seen.append(exc)

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        with lock:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)
            time.sleep(0.05)  # the handler runs here
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert len(seen) == 1 and isinstance(seen[0], RuntimeError), seen
