"""A hostile review of readers that wait for news (issue 11).

Each test names the behaviour it demands; its docstring says what failed
when the test was written (if anything did) or what it guards.  Every wait
has a deadline: nothing here may hang, and the only timing bounds are
"woken well before the waiter's 1 s nap" (WOKEN) and "did not hang".
"""

from __future__ import annotations

import asyncio
import os
import signal
import struct
import sys
import sysconfig
import threading
import time

import pytest

from seqlock_py import SeqLock, SeqRecord
from process_helpers import (
    PythonProcess,
    in_forked_child,
    require_pid_namespaces,
    run_python,
)

# A wake-up arrives well within this; a waiter's nap (1 s) would not.
WOKEN = 0.5
LONG = 20.0
# The timeout of waits that failed by sleeping it out.
SHORT = 4.0
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def waiter_threads():
    return [t for t in threading.enumerate() if t.name == "seqlock_py wait_async"]


def no_waiter_thread_left(within=5.0):
    deadline = time.monotonic() + within
    while waiter_threads() and time.monotonic() < deadline:
        time.sleep(0.005)
    return not waiter_threads()


def in_thread(fn, *args):
    """Run fn(*args) in a thread; return (thread, box) where box gets
    ("ok", result, when) or ("raised", exception, when)."""
    box = []

    def run():
        try:
            box.append(("ok", fn(*args), time.monotonic()))
        except BaseException as exc:  # reported to the test
            box.append(("raised", exc, time.monotonic()))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def set_record_count(buf, rec, count):
    """Set rec's sequence count (in buf) to the even count: the word that
    rec.sequence reads, found by trying each word equal to it."""
    rec.update(x=0)
    now = struct.pack("<Q", rec.sequence)
    for i in range(0, len(buf) - 7, 8):
        if bytes(buf[i:i + 8]) == now:
            struct.pack_into("<Q", buf, i, count)
            if rec.sequence == count:
                return
            buf[i:i + 8] = now
    raise AssertionError("no count word found")


# ---- a writer that died inside its section -----------------------------------


def thread_dies_holding(lock):
    """A thread takes lock's write lock and exits without releasing it."""
    t = threading.Thread(target=lock.acquire_write)
    t.start()
    t.join()


@pytest.mark.timeout(30)
def test_seqlock_wait_raises_like_read_once_its_writer_died_mid_section():
    """Failed: read() raised RuntimeError ('owner thread exited inside a
    write section') but wait(seq) slept on the odd count for its whole
    timeout, and for ever with timeout=None: a consumer waiting for news
    never learnt that no news could come."""
    lock = SeqLock()
    seq = lock.read_begin()
    thread_dies_holding(lock)
    with pytest.raises(RuntimeError, match="exited inside a write section"):
        lock.read(lambda: None)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="exited inside a write section"):
        lock.wait(seq, SHORT)
    assert time.monotonic() - start < 1.0 + WOKEN  # at the latest after a nap


@pytest.mark.timeout(30)
def test_seqlock_wait_in_a_thread_raises_when_the_writer_dies_while_it_sleeps():
    """Failed: a non-main thread asleep in wait(seq) when the writer
    thread exited inside its section slept until its timeout."""
    lock = SeqLock()
    seq = lock.read_begin()
    entered, leave = threading.Event(), threading.Event()

    def die_in_section():
        lock.acquire_write()
        entered.set()
        leave.wait(LONG)

    writer = threading.Thread(target=die_in_section)
    writer.start()
    entered.wait(LONG)
    waiter, box = in_thread(lock.wait, seq, SHORT)
    time.sleep(0.1)
    leave.set()
    writer.join()
    died_at = time.monotonic()
    waiter.join(LONG)
    assert box and box[0][0] == "raised", box
    assert isinstance(box[0][1], RuntimeError)
    assert box[0][2] - died_at < 1.0 + WOKEN


@pytest.mark.timeout(30)
def test_record_wait_repairs_a_dead_writers_section_and_reports_it_as_news():
    """Failed: wait(seq) on a record whose writer thread exited inside its
    section slept for its whole timeout (None: for ever), although read()
    of the same record carries on and the next locked read repairs it.
    Demanded: the waiter rolls the section back (as a reader's locked pass
    does) and returns True; the values are the committed ones."""
    rec = SeqRecord(x="q")
    rec.update(x=7)
    seq, values = rec.read_versioned()

    def die_in_section():
        w = rec.write()
        w.__enter__()
        w.x = 99  # half a write, never finished

    t = threading.Thread(target=die_in_section)
    t.start()
    t.join()
    start = time.monotonic()
    assert rec.wait(seq, SHORT) is True
    assert time.monotonic() - start < 1.0 + WOKEN
    new_seq, new_values = rec.read_versioned()
    assert new_seq > seq and new_values == values == (7,)
    rec.update(x=8)  # the lock is usable again
    assert rec.read() == (8,)


DIE_IN_SECTION_SCRIPT = """
import sys
from record_helpers import open_shared_record
rec = open_shared_record(sys.argv[1], x="q")
w = rec.write()
w.__enter__()
w.x = 99
print("ready", flush=True)
sys.stdin.readline()
"""


@pytest.mark.timeout(60)
def test_changes_waits_through_a_dead_writers_section_until_the_next_writer():
    """A changes() consumer on a shared record whose writer process was
    SIGKILLed inside a section gets no item for the dead section (it
    never committed: nothing is news) and does not roll it back itself (a
    waiter is a reader: it never takes the lock, issue 17); the next
    writer rolls it back (recoveries + 1) and its write reaches the
    consumer at once.  (Earlier builds made the waiter roll the section
    back and report the rollback as news, by taking the lock, which a
    co-tenant rewriting the lock's links could turn into a crash.)"""
    from multiprocessing import shared_memory

    shm = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(x="q"))
    box = []
    try:
        rec = SeqRecord.create(shm.buf, x="q")
        rec.update(x=5)
        items = rec.changes(timeout=LONG)
        first = next(items)
        with PythonProcess(DIE_IN_SECTION_SCRIPT, shm.name) as writer:
            writer.expect("ready")
            consumer, box = in_thread(next, items)
            time.sleep(0.1)
            writer.proc.kill()
            writer.proc.wait()
            time.sleep(1.0 + WOKEN)  # a nap of the waiter's, and then some
            nothing_yet = not box
            recoveries_before = rec.recoveries
            rec.update(x=7)  # the next writer: rolls back, then writes
            written_at = time.monotonic()
            consumer.join(LONG)
        items.close()
        del items
        assert nothing_yet, f"the dead section came as news: {box}"
        assert box and box[0][0] == "ok", box
        seq, values = box[0][1]
        assert seq > first[0] and values == (7,)
        assert rec.recoveries == recoveries_before + 1
        assert box[0][2] - written_at < 1.0 + WOKEN
        del rec
    finally:
        box.clear()  # a StopIteration's traceback holds the record
        import gc
        gc.collect()
        shm.close()
        shm.unlink()


# ---- sequence numbers at the edges of the count -------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("start", [2**32 - 2, 2**64 - 2], ids=["2**32", "2**64"])
def test_a_section_crossing_a_count_boundary_wakes_a_waiter_at_once(start):
    """Failed for 2**64: a waiter asleep on the odd count 2**64 - 1 (a
    section open at the top of the range) was not woken when the count
    wrapped to 0 (the section end's check wake_from + 1 >= seq overflowed)
    and slept its whole 1 s nap.  2**32 (the futex word is the count's low
    half) held."""
    buf = bytearray(SeqRecord.buffer_size(x="q"))
    rec = SeqRecord.create(buf, x="q")
    set_record_count(buf, rec, start)
    assert rec.sequence == start
    section = rec.write()
    section.__enter__()
    section.x = 1
    waiter, box = in_thread(rec.wait, start, SHORT)
    time.sleep(0.2)  # asleep on the odd count
    ended_at = time.monotonic()
    section.__exit__(None, None, None)
    waiter.join(LONG)
    assert box and box[0][:2] == ("ok", True), box
    assert box[0][2] - ended_at < WOKEN
    assert rec.read_versioned() == ((start + 2) % 2**64, (1,))


# ---- cancelling --------------------------------------------------------------


@pytest.mark.timeout(60)
def test_cancelling_a_waiter_ends_its_thread_promptly_however_the_cancel_lands():
    """Failed (rarely, here; every time in the C test that aims at the
    window): a cancel landing between the waiter's look at its flag and
    its futex wait found nobody to wake, and the wait_async thread slept
    on for its 1 s nap after the await had been cancelled."""
    lock = SeqLock()
    seq = lock.sequence
    slow, rounds = 0, 0
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline and not slow:
        waiter = lock._waiter(seq, None)
        t = threading.Thread(target=waiter.wait)
        t.start()
        for _ in range(rounds % 500):
            pass
        cancelled_at = time.monotonic()
        waiter.cancel()
        t.join(LONG)
        slow += time.monotonic() - cancelled_at >= WOKEN
        rounds += 1
    assert slow == 0, f"{slow} of {rounds} cancels took a nap"


@pytest.mark.timeout(60)
def test_cancelling_hundreds_of_wait_async_ends_every_thread():
    """Held: 300 pending wait_async cancelled at once all end their
    threads (each cancel wakes every sleeper on the lock)."""
    lock = SeqLock()

    async def main():
        tasks = [asyncio.ensure_future(lock.wait_async(lock.sequence, LONG)) for _ in range(300)]
        await asyncio.sleep(0.3)
        assert len(waiter_threads()) == 300
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, asyncio.CancelledError) for r in results)

    asyncio.run(main())
    assert no_waiter_thread_left()


@pytest.mark.timeout(60)
def test_hundreds_of_wait_async_are_all_answered_by_one_write():
    """Held: 300 concurrent wait_async on one record all answer True after
    one write and leave no thread behind."""
    rec = SeqRecord(x="q")

    async def main():
        seq = rec.sequence
        tasks = [asyncio.ensure_future(rec.wait_async(seq, LONG)) for _ in range(300)]
        await asyncio.sleep(0.3)
        rec.update(x=1)
        return await asyncio.wait_for(asyncio.gather(*tasks), LONG)

    assert asyncio.run(main()) == [True] * 300
    assert no_waiter_thread_left()


@pytest.mark.timeout(30)
def test_a_wait_thread_outliving_its_closed_loop_ends_at_the_next_write():
    """Held: the loop is closed while a wait_async thread still sleeps
    (its task left pending); the next write ends the thread quietly."""
    lock = SeqLock()
    hooked = []
    old_hook = threading.excepthook
    threading.excepthook = hooked.append
    try:
        loop = asyncio.new_event_loop()
        task = loop.create_task(lock.wait_async(lock.sequence))
        loop.run_until_complete(asyncio.sleep(0.1))
        loop.close()
        assert len(waiter_threads()) == 1
        with lock:
            pass
        assert no_waiter_thread_left()
        assert not hooked
        del task
    finally:
        threading.excepthook = old_hook


ASYNCIO_CTRL_C_SCRIPT = """
import asyncio, threading
from seqlock_py import SeqLock
lock = SeqLock()
async def main():
    print("ready", flush=True)
    await lock.wait_async(lock.sequence)
try:
    asyncio.run(main())
except KeyboardInterrupt:
    left = [t for t in threading.enumerate() if t.name == "seqlock_py wait_async"]
    for t in left:
        t.join(5)
    print("interrupted", sum(t.is_alive() for t in left), flush=True)
"""


@pytest.mark.timeout(60)
def test_ctrl_c_during_asyncio_run_ends_the_wait_and_its_thread():
    """Held: SIGINT to asyncio.run awaiting wait_async raises
    KeyboardInterrupt at once, and the wait thread ends."""
    with PythonProcess(ASYNCIO_CTRL_C_SCRIPT) as child:
        child.expect("ready")
        time.sleep(0.2)
        child.proc.send_signal(signal.SIGINT)
        line = child.expect("interrupted", timeout=10)
        code, out = child.finish()
    assert line == "interrupted 0", out
    assert code == 0, out


SHUTDOWN_SCRIPT = """
import asyncio, threading, sys
from multiprocessing import shared_memory
from seqlock_py import SeqLock, SeqRecord
shm = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(x="q"))
rec = SeqRecord.create(shm.buf, x="q")
shm.unlink()
lock = SeqLock()
for _ in range(20):
    threading.Thread(target=rec.wait, args=(rec.sequence,), daemon=True).start()
    threading.Thread(target=lock.wait, args=(lock.sequence,), daemon=True).start()
def writer():
    i = 0
    while True:
        i += 1
        rec.update(x=i)
        with lock:
            pass
threading.Thread(target=writer, daemon=True).start()
async def main():
    for _ in range(20):
        asyncio.ensure_future(rec.wait_async(2**60))
    await asyncio.sleep(0.1)
    asyncio.get_running_loop().stop()
try:
    asyncio.run(main())
except RuntimeError:
    pass
print("exiting", flush=True)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("run", range(3))
def test_interpreter_exit_with_sleeping_waiters_and_a_flat_out_writer_is_clean(run):
    """Held: daemon threads asleep in wait() and wait_async threads left
    by a stopped loop, woken again and again by a writer while the
    interpreter finalises: exit 0, no crash, no hang."""
    code, out = run_python(SHUTDOWN_SCRIPT, timeout=60)
    assert code == 0 and "exiting" in out, out
    assert "Fatal Python error" not in out, out


# ---- changes() ---------------------------------------------------------------

SHARED_ITERATOR_SCRIPT = """
import sys, threading, time
from seqlock_py import SeqRecord
rec = SeqRecord(x="q")
items = rec.changes(timeout=1.0)
deadline = time.monotonic() + float(sys.argv[1])
def consume():
    while time.monotonic() < deadline:
        try:
            next(items)
        except StopIteration:
            return
        except ValueError as exc:
            assert "already" in str(exc), exc
def write():
    i = 0
    while time.monotonic() < deadline:
        i += 1
        rec.update(x=i)
threads = [threading.Thread(target=consume) for _ in range(2)]
threads.append(threading.Thread(target=write))
for t in threads:
    t.start()
for t in threads:
    t.join()
print("ok", flush=True)
"""


@pytest.mark.timeout(120)
def test_one_changes_iterator_used_from_two_threads_never_crashes_the_interpreter():
    """Failed on 3.13t (free-threaded): changes() is a plain generator, and
    two threads calling next() on it at once crashed the interpreter
    (SIGSEGV / SIGABRT in 4 runs of 10 of 2 s): 3.13t does not serialise a
    generator's frame.  Demanded: ValueError for the second thread, as
    with the GIL, never a crash."""
    for _ in range(6):
        code, out = run_python(SHARED_ITERATOR_SCRIPT, 2.0, timeout=60)
        assert code == 0 and out.startswith("ok"), f"exit {code}\n{out[-3000:]}"


@pytest.mark.timeout(30)
def test_changes_from_two_threads_raises_already_executing_for_the_second():
    """Held (GIL builds; demanded of all): the second thread's next() on a
    changes() iterator that is waiting in another thread raises
    ValueError at once instead of sharing the wait."""
    rec = SeqRecord(x="q")
    items = rec.changes(timeout=LONG)
    next(items)
    waiter, box = in_thread(next, items)
    time.sleep(0.1)
    with pytest.raises(ValueError):
        next(items)
    rec.update(x=1)
    waiter.join(LONG)
    assert box and box[0][0] == "ok" and box[0][1][1] == (1,), box


# ---- signals -----------------------------------------------------------------


@pytest.mark.timeout(30)
def test_a_signal_handler_that_writes_the_record_ends_the_main_threads_wait():
    """Held: a handler runs between the main thread's wait slices; its
    write is news for the wait it interrupted."""
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
        waiter, box = in_thread(lock.wait, seq, LONG)
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


@pytest.mark.timeout(30)
def test_ctrl_c_reaches_a_main_thread_waiting_beside_a_waiting_non_main_thread():
    """Held: with another thread asleep in one piece, a process-wide SIGINT
    still interrupts the main thread's wait() promptly."""
    lock = SeqLock()
    seq = lock.sequence
    other, box = in_thread(lock.wait, seq, LONG)
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


# ---- arguments that run user code -------------------------------------------


class IntWithOddEq(int):
    """An int whose == lies and whose __index__ says something else."""

    def __eq__(self, other):
        return True

    __hash__ = int.__hash__

    def __index__(self):
        return 12345


def test_a_seq_int_subclass_is_taken_by_its_value_not_its_methods():
    """Held: wait() reads an int subclass's value; its __eq__/__index__
    are not consulted."""
    lock = SeqLock()
    with lock:
        pass
    assert lock.wait(IntWithOddEq(2), 0) is False
    assert lock.wait(IntWithOddEq(0), 0) is True


class TimeoutThat:
    def __init__(self, action):
        self.action = action

    def __float__(self):
        self.action()
        return 5.0


def test_a_timeout_whose_float_writes_makes_the_wait_return_at_once():
    """Held: __float__ runs before the wait starts: its write is news."""
    rec = SeqRecord(x="q")
    seq = rec.sequence
    start = time.monotonic()
    assert rec.wait(seq, TimeoutThat(lambda: rec.update(x=1))) is True
    assert time.monotonic() - start < WOKEN


def test_a_timeout_whose_float_takes_the_write_lock_gets_runtime_error():
    """Held: a __float__ that leaves the calling thread holding the lock
    makes wait() raise (it could never be woken) instead of deadlocking."""
    lock = SeqLock()
    try:
        with pytest.raises(RuntimeError, match="holds the write lock"):
            lock.wait(lock.sequence, TimeoutThat(lock.acquire_write))
    finally:
        lock.release_write()


def test_a_timeout_whose_float_raises_raises_before_any_wait():
    """Held: the error of __float__ comes out at once, for wait() and for
    wait_async() (at the call, not at the first await)."""
    lock = SeqLock()

    def boom():
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        lock.wait(lock.sequence, TimeoutThat(boom))
    with pytest.raises(ZeroDivisionError):
        lock.wait_async(lock.sequence, TimeoutThat(boom))


# ---- threads, owners, memory -------------------------------------------------


@pytest.mark.timeout(60)
def test_a_thousand_waiting_threads_are_all_woken_by_one_write():
    """Held: 1000 threads asleep on one lock all return True after one
    write, well before their nap."""
    lock = SeqLock()
    seq = lock.sequence
    old_size = threading.stack_size(256 * 1024)
    try:
        results = []
        threads = [threading.Thread(target=lambda: results.append(lock.wait(seq, LONG)))
                   for _ in range(1000)]
        for t in threads:
            t.start()
    finally:
        threading.stack_size(old_size)
    time.sleep(0.5)
    with lock:
        pass
    for t in threads:
        t.join(LONG)
    assert len(results) == 1000 and all(results)


@pytest.mark.timeout(30)
def test_a_waiter_keeps_its_record_alive_after_the_last_other_reference_goes():
    """Held: del of the only name of a record another thread waits on (in
    wait() and in a wait_async thread) frees nothing under them."""
    import gc
    import weakref

    rec = SeqRecord(x="q")
    seq = rec.sequence
    waiter = rec._waiter(seq, LONG)
    t1, box1 = in_thread(rec.wait, seq, 1.0)
    t2, box2 = in_thread(waiter.wait)
    ref = weakref.ref(rec)
    del rec
    gc.collect()
    time.sleep(0.1)
    assert ref() is not None
    ref().update(x=1)
    t1.join(LONG)
    t2.join(LONG)
    assert box1[0][:2] == ("ok", True) and box2[0][:2] == ("ok", True)
    del waiter, t1, t2
    gc.collect()
    assert ref() is None


@pytest.mark.timeout(30)
def test_shared_memory_cannot_be_closed_under_a_waiter():
    """Held: the record holds its buffer, so SharedMemory.close() is refused
    (BufferError) instead of unmapping the count a waiter sleeps on."""
    from multiprocessing import shared_memory

    shm = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(x="q"))
    try:
        rec = SeqRecord.create(shm.buf, x="q")
        waiter, box = in_thread(rec.wait, rec.sequence, LONG)
        time.sleep(0.1)
        with pytest.raises(BufferError):
            shm.close()
        rec.update(x=1)
        waiter.join(LONG)
        assert box[0][:2] == ("ok", True)
        del rec, waiter, box
    finally:
        shm.close()
        shm.unlink()


@pytest.mark.timeout(60)
def test_a_child_forked_while_another_thread_waits_can_wait_and_be_woken():
    """Held: fork() while a thread sleeps in wait(); the child (without
    that thread) waits on the same lock and is woken by its own writer;
    the parent's waiter is woken by the parent's write."""
    lock = SeqLock()
    seq = lock.sequence
    waiter, box = in_thread(lock.wait, seq, LONG)
    time.sleep(0.1)

    def child():
        timer = threading.Timer(0.1, lambda: lock.__enter__() and lock.__exit__(None, None, None))
        timer.start()
        start = time.monotonic()
        woken = lock.wait(seq, LONG)
        timer.join()
        return woken and time.monotonic() - start < 0.1 + WOKEN

    code, report = in_forked_child(child)
    assert code == 0, report
    assert not box
    with lock:
        pass
    waiter.join(LONG)
    assert box[0][:2] == ("ok", True)


NAMESPACE_WAITER_SCRIPT = """
import os, sys, time
from record_helpers import open_shared_record
assert os.getpid() == 1
rec = open_shared_record(sys.argv[1], x="q")
seq = rec.sequence
print("ready", flush=True)
woken = rec.wait(seq, 20)
print("woken", woken, rec.read(), time.monotonic(), flush=True)
"""


@pytest.mark.timeout(60)
def test_a_waiter_in_another_pid_namespace_is_woken_by_a_writer_outside():
    """Held: the futex is shared (not PRIVATE), keyed by the page, so a
    waiter as pid 1 of its own namespace wakes for a writer outside."""
    require_pid_namespaces()
    from multiprocessing import shared_memory

    shm = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(x="q"))
    try:
        rec = SeqRecord.create(shm.buf, x="q")
        with PythonProcess(NAMESPACE_WAITER_SCRIPT, shm.name, pid_namespace=True) as child:
            child.expect("ready")
            time.sleep(0.2)
            written_at = time.monotonic()
            rec.update(x=42)
            line = child.expect("woken", timeout=10)
            code, out = child.finish()
        assert code == 0, out
        _, woken, values, when = line.split(" ", 3)
        assert woken == "True" and values == "(42,)"
        assert float(when) - written_at < WOKEN
        del rec
    finally:
        shm.close()
        shm.unlink()


@pytest.mark.timeout(30)
def test_wait_inside_a_read_function_cannot_hang_the_reader():
    """Held: a read function that waits for news (timeout) while writers
    run: read() ends, through a locked pass whose wait raises or times
    out, never a hang."""
    lock = SeqLock(max_retries=1)
    stop = threading.Event()

    def writer():
        while not stop.is_set():
            with lock:
                pass
            time.sleep(0.001)

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(5):
            try:
                lock.read(lambda: lock.wait(lock.sequence, 0.05))
            except RuntimeError:
                pass
    finally:
        stop.set()
        t.join()
