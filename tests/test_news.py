"""Readers that wait for news: wait(), read_versioned(), changes(), and the
asyncio forms, on both types, across threads and processes.

Timing appears only as generous deadlines that tell a wake-up from a hang
or from a waiter's nap (a lost wake-up would surface as a return after
the 1 s nap or at the timeout); no test asserts how fast anything is.
"""
from __future__ import annotations

import asyncio
import functools
import math
import signal
import struct
import subprocess
import sys
import sysconfig
import threading
import time

import pytest

from seqlock_py import SeqLock, SeqRecord, _news
from process_helpers import PythonProcess
from workers import SHORT, no_waiter_thread_left, run_threads, start_in_thread, until, waiter_threads, watcher_starts

# A wake-up arrives well within this; a waiter's nap (1 s) or the tests'
# long timeouts (LONG) would not.
WOKEN = 0.5
LONG = 30.0


class Subject:
    """A SeqLock guarding a dict, or a SeqRecord: the same operations."""

    def __init__(self, kind):
        self.kind = kind
        if kind == "SeqLock":
            self.obj = SeqLock()
            self.state = {"x": 0}
        else:
            self.obj = SeqRecord(x="q")

    def write(self, x):
        if self.kind == "SeqLock":
            with self.obj:
                self.state["x"] = x
        else:
            self.obj.update(x=x)

    def read_versioned(self):
        """(sequence, x)"""
        if self.kind == "SeqLock":
            return self.obj.read_versioned(self.state.get, "x")
        seq, (x,) = self.obj.read_versioned()
        return seq, x


@pytest.fixture(params=["SeqLock", "SeqRecord"])
def subject(request):
    return Subject(request.param)


def write_later(subject, x, delay=0.05):
    timer = threading.Timer(delay, subject.write, (x,))
    timer.start()
    return timer


# ---- wait() ----------------------------------------------------------------


def test_wait_returns_false_when_the_timeout_passes_without_a_write(subject):
    seq, _ = subject.read_versioned()
    start = time.monotonic()
    assert subject.obj.wait(seq, 0.05) is False
    assert time.monotonic() - start >= 0.05


def test_wait_with_timeout_zero_only_looks(subject):
    seq, _ = subject.read_versioned()
    assert subject.obj.wait(seq, 0) is False
    subject.write(1)
    assert subject.obj.wait(seq, 0) is True


def test_wait_returns_true_at_once_when_a_write_ended_since_seq(subject):
    seq, _ = subject.read_versioned()
    subject.write(1)
    assert subject.obj.wait(seq) is True
    assert subject.obj.wait(seq, timeout=0) is True


def test_a_write_by_another_thread_wakes_a_waiter(subject):
    seq, _ = subject.read_versioned()
    timer = write_later(subject, 7)
    start = time.monotonic()
    assert subject.obj.wait(seq, LONG) is True
    waited = time.monotonic() - start
    timer.join()
    assert waited < WOKEN
    assert subject.read_versioned() == (seq + 2, 7)


def test_a_write_wakes_a_waiter_in_a_thread_that_is_not_the_main_one(subject):
    seq, _ = subject.read_versioned()
    timer = write_later(subject, 7, delay=0.1)

    def waiter(_):
        start = time.monotonic()
        return subject.obj.wait(seq, LONG), time.monotonic() - start

    [(woken, waited)] = run_threads(1, waiter)
    timer.join()
    assert woken and waited < WOKEN


def test_a_write_wakes_every_waiter(subject):
    seq, _ = subject.read_versioned()
    timer = write_later(subject, 1, delay=0.1)
    results = run_threads(4, lambda _: subject.obj.wait(seq, LONG))
    timer.join()
    assert results == [True] * 4


def test_wait_ignores_a_section_that_is_still_open(subject):
    seq, _ = subject.read_versioned()
    inside, leave = threading.Event(), threading.Event()

    def writer():
        if subject.kind == "SeqLock":
            with subject.obj:
                inside.set()
                leave.wait(LONG)
        else:
            with subject.obj.write() as w:
                w.x = 5
                inside.set()
                leave.wait(LONG)

    t = threading.Thread(target=writer)
    t.start()
    try:
        assert inside.wait(LONG)
        assert subject.obj.wait(seq, 0.05) is False
        assert subject.obj.wait(subject.obj.sequence, 0.05) is False
    finally:
        leave.set()
        t.join()
    assert subject.obj.wait(seq, 0) is True


def test_a_rolled_back_section_counts_as_a_write():
    rec = SeqRecord(x="q")
    seq, before = rec.read_versioned()
    with pytest.raises(ZeroDivisionError):
        with rec.write() as w:
            w.x = 1
            1 / 0
    assert rec.wait(seq, 0) is True
    assert rec.read_versioned() == (seq + 2, before)


def test_wait_while_this_thread_holds_the_write_lock_raises(subject):
    if subject.kind == "SeqLock":
        section = subject.obj.write()
    else:
        section = subject.obj.write()
    with section:
        with pytest.raises(RuntimeError, match="holds the write lock"):
            subject.obj.wait(subject.obj.sequence)
        with pytest.raises(RuntimeError, match="holds the write lock"):
            subject.obj.wait(subject.obj.sequence, 0.01)
    subject.write(1)
    assert subject.obj.wait(0, 0) is True


def test_waiting_thread_uses_almost_no_cpu_and_lets_other_threads_run(subject):
    """The waiter sleeps on a futex: its thread's CPU time stays a sliver
    of the wall time (a polling or spinning waiter would use about all of
    it), while this thread keeps computing."""
    seq, _ = subject.read_versioned()
    period = 0.5
    cpu = []

    def waiter():
        before = time.thread_time()
        cpu.append(subject.obj.wait(seq, period))
        cpu.append(time.thread_time() - before)

    t = threading.Thread(target=waiter)
    t.start()
    spins = 0
    while t.is_alive():
        spins += 1
        sum(range(100))
    t.join()
    woken, used = cpu
    assert woken is False
    assert spins > 1000
    assert used < period / 10, f"the waiter used {used:.3f} s of CPU in {period} s"


def test_ctrl_c_interrupts_a_main_thread_waiting_for_a_write(subject):
    assert threading.current_thread() is threading.main_thread()
    # Python's own Ctrl-C handler, whatever the test run inherited, and a
    # finite wait: a lost signal fails here, saying what the thread had.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    seq, _ = subject.read_versioned()
    timer = threading.Timer(0.2, signal.pthread_kill,
                            (threading.main_thread().ident, signal.SIGINT))
    timer.start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            subject.obj.wait(seq, 10)
            pytest.fail(f"wait() returned without a write or Ctrl-C (signals "
                        f"blocked in this thread: {sorted(blocked)})")
    finally:
        timer.join()
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - start < WOKEN
    subject.write(1)
    assert subject.obj.wait(seq, 0) is True


@pytest.mark.parametrize("seq, error", [
    (-1, ValueError), (-(2**70), ValueError), (2**64, OverflowError),
    ("0", TypeError), (1.0, TypeError), (None, TypeError),
])
def test_wait_rejects_what_is_not_a_sequence_number(subject, seq, error):
    with pytest.raises(error):
        subject.obj.wait(seq, 0)


@pytest.mark.parametrize("timeout, error", [
    (-2, ValueError), (math.nan, ValueError), ("1", TypeError),
    (1e300, OverflowError),
])
def test_wait_rejects_a_bad_timeout(subject, timeout, error):
    with pytest.raises(error):
        subject.obj.wait(0, timeout)


def test_wait_takes_seq_and_timeout_by_keyword(subject):
    assert subject.obj.wait(seq=0, timeout=0) is False


def test_wait_for_any_other_sequence_returns_at_once(subject):
    """seq names a state; any other even count is news, even a seq the
    lock never had (2**64 - 1 is the largest accepted)."""
    assert subject.obj.wait(2**64 - 1, timeout=0) is True
    assert subject.obj.wait(5) is True


# ---- read_versioned() --------------------------------------------------------


def test_read_versioned_gives_the_even_sequence_of_the_state_it_read(subject):
    assert subject.read_versioned() == (0, 0)
    subject.write(5)
    assert subject.read_versioned() == (2, 5)


def test_record_read_versioned_inside_an_open_section_gives_the_committed_state():
    rec = SeqRecord(x="q")
    rec.update(x=1)
    with rec.write() as w:
        w.x = 2
        assert rec.sequence == 3
        assert rec.read_versioned() == (2, (1,))


def test_seqlock_read_versioned_passes_arguments_and_returns_the_result():
    lock = SeqLock()
    assert lock.read_versioned(divmod, 7, 2) == (0, (3, 1))
    assert lock.read_versioned(dict, a=1) == (0, {"a": 1})
    with pytest.raises(TypeError, match="read_versioned"):
        lock.read_versioned()
    with pytest.raises(TypeError, match="callable"):
        lock.read_versioned(3)


@pytest.mark.timeout(60)
def test_versioned_snapshots_match_their_version_under_a_flat_out_writer(subject):
    """The k-th write stores x = k, so the state with sequence 2k has x = k:
    every (sequence, value) pair a reader gets must satisfy it."""
    stop = threading.Event()
    written = []

    def writer():
        k = 0
        while not stop.is_set():
            k += 1
            subject.write(k)
        written.append(k)

    t = threading.Thread(target=writer)
    t.start()
    pairs = 0
    mismatched = []
    deadline = time.monotonic() + 1.0
    try:
        while time.monotonic() < deadline:
            seq, x = subject.read_versioned()
            pairs += 1
            if seq % 2 or x != seq // 2:
                mismatched.append((seq, x))
    finally:
        stop.set()
        t.join()
    assert written[0] > 100 and pairs > 1000
    assert mismatched == []


# ---- changes() ---------------------------------------------------------------


def test_changes_starts_with_the_current_snapshot():
    rec = SeqRecord(x="q")
    rec.update(x=3)
    assert next(rec.changes(timeout=0)) == (2, (3,))


def test_changes_ends_when_no_write_arrives_within_the_timeout():
    rec = SeqRecord(x="q")
    changes = rec.changes(timeout=0.05)
    assert next(changes) == (0, (0,))
    start = time.monotonic()
    with pytest.raises(StopIteration):
        next(changes)
    assert time.monotonic() - start >= 0.05
    rec.update(x=1)
    with pytest.raises(StopIteration):  # an ended iterator stays ended
        next(changes)


@pytest.mark.timeout(60)
def test_changes_yields_each_write_in_order_without_repeats():
    rec = SeqRecord(x="q")
    n = 50

    def writer():
        for k in range(1, n + 1):
            time.sleep(0.002)
            rec.update(x=k)

    t = threading.Thread(target=writer)
    t.start()
    seen = list(rec.changes(timeout=1.0))
    t.join()
    seqs = [seq for seq, _ in seen]
    assert seqs == sorted(set(seqs))
    assert all(x == seq // 2 for seq, (x,) in seen)
    assert seen[-1] == (2 * n, (n,))


def test_changes_skips_the_versions_a_slow_consumer_missed():
    rec = SeqRecord(x="q")
    changes = rec.changes(timeout=LONG)
    assert next(changes) == (0, (0,))
    for k in (1, 2, 3):
        rec.update(x=k)
    assert next(changes) == (6, (3,))  # (6 - 0) // 2 = 3 writes ended


def test_changes_takes_its_timeout_by_keyword_only_and_checks_it_at_once():
    rec = SeqRecord(x="q")
    with pytest.raises(TypeError):
        rec.changes(1.0)
    with pytest.raises(ValueError):
        rec.changes(timeout=-5)


# ---- across processes --------------------------------------------------------

CONSUMER_SCRIPT = """
import sys
from record_helpers import open_shared_record
rec = open_shared_record(sys.argv[1], x="q")
seen = []
for seq, (x,) in rec.changes(timeout=10):
    if not seen:
        print("ready", flush=True)
    seen.append((seq, x))
    if x == 3:
        break
print("seen", seen, flush=True)
"""

WRITER_SCRIPT = """
import sys
from record_helpers import open_shared_record
rec = open_shared_record(sys.argv[1], x="q")
print("ready", flush=True)
sys.stdin.readline()
rec.update(x=int(sys.argv[2]))
"""


class SharedRecord:
    """A record in multiprocessing.shared_memory, for the fixture."""

    def __init__(self):
        from multiprocessing import shared_memory
        self.shm = shared_memory.SharedMemory(
            create=True, size=SeqRecord.buffer_size(x="q"))
        self.name = self.shm.name
        self.rec = SeqRecord.create(self.shm.buf, x="q")

    def close(self):
        self.rec = None  # releases the buffer export before close()
        self.shm.close()
        self.shm.unlink()


@pytest.fixture
def shared_record():
    shared = SharedRecord()
    yield shared
    shared.close()


@pytest.mark.timeout(60)
def test_a_write_from_another_process_wakes_a_waiter_on_a_shared_record(shared_record):
    name, rec = shared_record.name, shared_record.rec
    seq, _ = rec.read_versioned()
    with PythonProcess(WRITER_SCRIPT, name, 42) as writer:
        writer.expect("ready")

        def tell_later():
            time.sleep(0.1)
            writer.tell("go")

        teller = threading.Thread(target=tell_later)
        teller.start()
        start = time.monotonic()
        woken = rec.wait(seq, LONG)
        waited = time.monotonic() - start
        teller.join()
        code, out = writer.finish()
    assert code == 0, out
    assert woken and waited < 0.1 + WOKEN
    assert rec.read_versioned() == (seq + 2, (42,))


@pytest.mark.timeout(60)
def test_a_write_from_another_process_answers_every_wait_async_on_a_shared_record(shared_record):
    """200 wait_async on a record in shared memory sleep on its watcher;
    a writer process's update() answers every one of them True."""
    name, rec = shared_record.name, shared_record.rec
    seq, _ = rec.read_versioned()

    async def main(writer):
        everything = asyncio.gather(*(rec.wait_async(seq, LONG) for _ in range(200)))
        while _news._pending_waits(rec) < 200:
            await asyncio.sleep(0.005)
        writer.tell("go")
        return await everything

    with PythonProcess(WRITER_SCRIPT, name, 42) as writer:
        writer.expect("ready")
        results = asyncio.run(main(writer))
        code, out = writer.finish()
    assert code == 0, out
    assert results.count(True) == 200
    assert rec.read_versioned() == (seq + 2, (42,))


@pytest.mark.timeout(60)
def test_a_consumer_in_another_process_sees_each_write_in_order(shared_record):
    name, rec = shared_record.name, shared_record.rec
    with PythonProcess(CONSUMER_SCRIPT, name) as consumer:
        consumer.expect("ready")
        for k in (1, 2, 3):
            time.sleep(0.05)
            rec.update(x=k)
        line = consumer.expect("seen")
        code, out = consumer.finish()
    assert code == 0, out
    assert line == "seen [(0, 0), (2, 1), (4, 2), (6, 3)]"


# ---- asyncio -----------------------------------------------------------------


async def ticking_while(awaitable):
    """Await awaitable while a ticker counts event-loop turns: the loop
    keeps running if the ticks keep coming."""
    ticks = 0
    stop = False

    async def ticker():
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0.005)

    task = asyncio.create_task(ticker())
    try:
        return await awaitable, ticks
    finally:
        stop = True
        await task


def test_wait_async_keeps_the_loop_running_until_a_write_wakes_it(subject):
    seq, _ = subject.read_versioned()

    async def main():
        loop = asyncio.get_running_loop()
        loop.call_later(0.2, functools.partial(threading.Thread(
            target=subject.write, args=(9,)).start))
        return await ticking_while(subject.obj.wait_async(seq, LONG))

    woken, ticks = asyncio.run(main())
    assert woken is True
    assert ticks >= 5
    assert subject.read_versioned() == (seq + 2, 9)
    assert no_waiter_thread_left(WOKEN)


def answer_each_wait(subject, asked, count):
    """A thread that writes once each time the awaiting loop has asked
    (appended its seq to asked) and its wait is pending, count times: each
    write finds the loop asleep in its wait."""

    def writer():
        for i in range(count):
            deadline = time.monotonic() + LONG
            while not (len(asked) > i and _news._pending_waits(subject.obj) > 0) \
                    and time.monotonic() < deadline:
                time.sleep(0.0002)
            subject.write(i)

    thread = threading.Thread(target=writer)
    thread.start()
    return thread


def test_a_loop_of_wait_async_is_served_by_one_watcher_thread(subject, monkeypatch):
    """Each wake-up used to end the watcher and the next wait to start
    one: a thread per wake-up (200-450 us of CPU each).  Now the watcher
    lingers between watches."""
    asked = []
    writer = answer_each_wait(subject, asked, 300)
    started = watcher_starts(monkeypatch)

    async def main():
        seq, woken = subject.read_versioned()[0], 0
        for _ in range(300):
            asked.append(seq)
            woken += await subject.obj.wait_async(seq, LONG)
            seq = subject.read_versioned()[0]
        return woken

    assert asyncio.run(main()) == 300
    writer.join(LONG)
    assert len(started) <= 1  # none if a watcher lingered from an earlier test


def test_a_loop_of_wait_async_hands_no_wait_over_to_a_thread_after_the_first(subject, monkeypatch):
    """After each answer the watcher stays asleep on the owner, so the
    next wait_async only leaves its future: the first wait is handed to a
    thread (started, or lingering), the other 299 to none (each used to
    wake a lingering thread: 30-60 us of CPU per wake-up)."""
    asked = []
    writer = answer_each_wait(subject, asked, 300)
    handed = []
    start_watcher = _news._start_watcher
    monkeypatch.setattr(_news, "_start_watcher", lambda watch: handed.append(watch) or start_watcher(watch))
    monkeypatch.setattr(_news, "_STAY", LONG)  # however slow this machine is

    async def main():
        seq, woken = subject.read_versioned()[0], 0
        for _ in range(300):
            asked.append(seq)
            woken += await subject.obj.wait_async(seq, LONG)
            seq = subject.read_versioned()[0]
        return woken

    assert asyncio.run(main()) == 300
    writer.join(LONG)
    assert len(handed) == 1


def freed_without_a_collection(ref):
    """Whether ref's object is freed with its last reference, no garbage
    collection run.  At once with the GIL; on a free-threaded build, when
    another thread (the watcher) dropped a reference, the owning thread
    merges the counts at its next eval-breaker check (biased reference
    counting): a few bytecodes later."""
    if not sysconfig.get_config_var("Py_GIL_DISABLED"):
        return ref() is None
    deadline = time.monotonic() + WOKEN
    while ref() is not None and time.monotonic() < deadline:
        time.sleep(0.001)
    return ref() is None


def watched(owner):
    """Whether owner has a watch (its watcher serves or stays on it)."""
    with _news._lock:
        watch = _news._watches.get(id(owner))
        return watch is not None and watch.waiter.is_for(owner)


def test_a_watcher_staying_on_its_owner_holds_nothing_of_it(subject, monkeypatch):
    """Answered, the watcher stays asleep on the owner's count, holding
    no reference: the last del frees the owner at once (no collection),
    and the watcher, woken by the deallocation, lingers."""
    import weakref
    monkeypatch.setattr(_news, "_STAY", LONG)
    seq, _ = subject.read_versioned()
    threading.Timer(0.05, subject.write, args=(1,)).start()
    assert asyncio.run(subject.obj.wait_async(seq, LONG)) is True
    assert watched(subject.obj) and len(waiter_threads()) == 1
    owner = weakref.ref(subject.obj)
    subject.obj = None
    assert freed_without_a_collection(owner)
    assert no_waiter_thread_left(WOKEN)


def test_a_watcher_staying_on_a_shared_record_lets_its_buffer_go_with_the_record(shared_record, monkeypatch):
    """The fixture's close() drops the record and closes the memory right
    after asyncio.run(): its export is released by then (BufferError
    otherwise), although the watcher stays asleep on its count."""
    monkeypatch.setattr(_news, "_STAY", LONG)
    rec = shared_record.rec
    seq, _ = rec.read_versioned()
    writer = threading.Timer(0.05, rec.update, kwargs={"x": 1})
    writer.start()
    assert asyncio.run(rec.wait_async(seq, LONG)) is True
    assert watched(rec)
    writer.join()
    del rec, writer  # (a Timer keeps its function, rec.update, for good)
    shared_record.close()  # as the fixture does
    shared_record.close = lambda: None


def test_a_watcher_stays_on_its_owner_for_a_while_only(subject, monkeypatch):
    """With no wait pending for _STAY seconds, its watch ends: it lingers,
    asleep on nothing, and no write wakes it."""
    monkeypatch.setattr(_news, "_STAY", 0.05)
    seq, _ = subject.read_versioned()
    threading.Timer(0.05, subject.write, args=(1,)).start()
    assert asyncio.run(subject.obj.wait_async(seq, LONG)) is True
    assert watched(subject.obj)
    deadline = time.monotonic() + LONG
    while watched(subject.obj) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not watched(subject.obj)


def test_a_watcher_leaves_its_owner_after_as_many_writes_with_no_wait_pending(subject, monkeypatch):
    """A writer that goes on after the last consumer left wakes the
    watcher staying on its owner _STAY_WRITES times at most."""
    monkeypatch.setattr(_news, "_STAY", LONG)
    seq, _ = subject.read_versioned()
    threading.Timer(0.05, subject.write, args=(1,)).start()
    assert asyncio.run(subject.obj.wait_async(seq, LONG)) is True
    assert watched(subject.obj)
    deadline = time.monotonic() + LONG
    while watched(subject.obj) and time.monotonic() < deadline:
        subject.write(2)
        time.sleep(0.002)
    assert not watched(subject.obj)


def test_a_lingering_watcher_holds_nothing_of_its_last_owner(subject):
    import weakref
    seq, _ = subject.read_versioned()
    threading.Timer(0.05, subject.write, args=(1,)).start()
    assert asyncio.run(subject.obj.wait_async(seq, LONG)) is True
    assert no_waiter_thread_left(WOKEN)
    owner = weakref.ref(subject.obj)
    subject.obj = None
    gc_collect_until(lambda: owner() is None)
    assert owner() is None


def gc_collect_until(condition):
    import gc
    deadline = time.monotonic() + WOKEN
    while not condition() and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.005)


def test_a_watcher_ends_once_it_has_lingered_long_enough(subject, monkeypatch):
    monkeypatch.setattr(_news, "_LINGER", 0.05)
    seq, _ = subject.read_versioned()
    threading.Timer(0.05, subject.write, args=(1,)).start()
    assert asyncio.run(subject.obj.wait_async(seq, LONG)) is True
    # Answered, it stays on the owner (_STAY), then lingers, then ends.
    mine = waiter_threads()
    assert len(mine) == 1
    mine[0].join(LONG)
    assert not mine[0].is_alive()


AT_EXIT = """
import asyncio, sys, threading, time
from seqlock_py import SeqRecord, _news
_news._LINGER = _news._STAY = 3600.0
if sys.argv[1] == "lingering":
    _news._STAY = 0.0
rec = SeqRecord(x="q")
threading.Timer(0.05, rec.update, kwargs={"x": 1}).start()
answer = asyncio.run(rec.wait_async(rec.sequence, 30))
name = _news._SERVING if sys.argv[1] == "staying" else _news._LINGERING
deadline = time.monotonic() + 30
while not any(t.name == name for t in threading.enumerate()) and time.monotonic() < deadline:
    time.sleep(0.01)
print(answer, [t.name for t in threading.enumerate() if t.name.startswith("seqlock_py")], flush=True)
"""


@pytest.mark.parametrize("phase", ["staying", "lingering"])
def test_a_watcher_staying_or_lingering_does_not_hold_the_interpreter_exit_up(phase):
    """The watcher stays on its owner, or lingers, for an hour here: exit
    stops it at once."""
    with PythonProcess(AT_EXIT, phase) as child:
        line = child.expect("True", timeout=30)
        code, out = child.finish(timeout=30)
    name = _news._SERVING if phase == "staying" else _news._LINGERING
    assert line == f"True {[name]!r}", out
    assert code == 0, out


def test_wait_async_returns_false_at_its_timeout(subject):
    seq, _ = subject.read_versioned()
    woken, ticks = asyncio.run(ticking_while(subject.obj.wait_async(seq, 0.1)))
    assert woken is False and ticks >= 2
    assert no_waiter_thread_left(WOKEN)


def test_wait_async_returns_at_once_when_a_write_ended_since_seq(subject):
    seq, _ = subject.read_versioned()
    subject.write(1)
    assert asyncio.run(subject.obj.wait_async(seq)) is True
    assert asyncio.run(subject.obj.wait_async(seq + 2, timeout=0)) is False
    assert waiter_threads() == []


def test_cancelling_wait_async_leaves_no_thread_waiting(subject):
    seq, _ = subject.read_versioned()

    async def main():
        task = asyncio.create_task(subject.obj.wait_async(seq))
        await asyncio.sleep(0.05)
        assert len(waiter_threads()) == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert no_waiter_thread_left(WOKEN)
    assert subject.obj.wait(seq, 0) is False  # nothing was written


def test_wait_for_timeout_around_wait_async_leaves_no_thread_waiting(subject):
    seq, _ = subject.read_versioned()

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(subject.obj.wait_async(seq), 0.05)

    asyncio.run(main())
    assert no_waiter_thread_left(WOKEN)


def test_wait_async_and_changes_async_take_a_timeout_of_minus_one_as_for_ever():
    """timeout=-1 means no timeout, as for wait() and threading: the
    asyncio forms wait for the write 0.1 s later instead of taking -1 for
    an event-loop timer that has already run out."""
    rec = SeqRecord(x="q")

    async def main():
        loop = asyncio.get_running_loop()
        loop.call_later(0.1, lambda: rec.update(x=1))
        woken = await rec.wait_async(rec.sequence, -1)
        loop.call_later(0.1, lambda: rec.update(x=2))
        seen = []
        async for _, (x,) in rec.changes_async(timeout=-1):
            seen.append(x)
            if x == 2:
                break
        return woken, seen

    assert asyncio.run(main()) == (True, [1, 2])


def test_wait_async_checks_its_arguments_when_called(subject):
    with pytest.raises(ValueError):
        subject.obj.wait_async(-1)
    with pytest.raises(ValueError):
        subject.obj.wait_async(0, -3)
    with pytest.raises(TypeError):
        subject.obj.wait_async("0")


class SeqWhoseComparisonsRaise(int):
    """A sequence number whose == and != raise: the caller's code, which
    the watcher thread that answers every wait on the owner must never
    run."""

    def __eq__(self, other):
        raise ZeroDivisionError("seq.__eq__ ran")

    def __ne__(self, other):
        raise ZeroDivisionError("seq.__ne__ ran")

    __hash__ = int.__hash__


def test_wait_async_takes_an_int_subclass_seq_by_its_value(subject):
    """Issue 27, defect 5: seq is converted to a plain int when
    wait_async() is called, so a write answers the wait True.  main: the
    watcher ran the subclass's __ne__, died of it, and the wait got no
    answer (timed out here)."""
    seq, _ = subject.read_versioned()

    async def main():
        waiting = asyncio.ensure_future(
            subject.obj.wait_async(SeqWhoseComparisonsRaise(seq), LONG))
        await until(lambda: _news._pending_waits(subject.obj) == 1)
        write_later(subject, 1, delay=0)
        return await asyncio.wait_for(waiting, SHORT)

    assert asyncio.run(main()) is True


def test_a_wait_async_after_one_whose_seq_compares_by_raising_is_answered_by_a_write(subject):
    """Issue 27, defect 5: a wait whose seq's comparisons raise leaves the
    owner's watcher working: the next wait_async on the owner is answered
    by a write.  main: the watcher died in its clean-up and left its watch
    registered, so no later wait_async on the owner was answered (timed
    out here)."""
    seq, _ = subject.read_versioned()

    async def main():
        hostile = await subject.obj.wait_async(SeqWhoseComparisonsRaise(seq), 0.2)
        waiting = asyncio.ensure_future(subject.obj.wait_async(seq, LONG))
        await until(lambda: _news._pending_waits(subject.obj) == 1)
        write_later(subject, 1, delay=0)
        return hostile, await asyncio.wait_for(waiting, SHORT)

    assert asyncio.run(main()) == (False, True)
    assert no_waiter_thread_left(WOKEN)


def test_changes_async_yields_the_writes_in_order_and_ends_at_its_timeout():
    """The newest state each time, in order, never repeated, ending with the
    last write; two writes 50 ms apart may come as one on a loaded machine
    (changes() delivers the newest state, not every change)."""
    rec = SeqRecord(x="q")

    async def main():
        loop = asyncio.get_running_loop()
        for k, delay in ((1, 0.05), (2, 0.1), (3, 0.15)):
            loop.call_later(delay, functools.partial(rec.update, x=k))
        return [item async for item in rec.changes_async(timeout=0.5)]

    seen = asyncio.run(main())
    seqs = [seq for seq, _ in seen]
    assert seqs == sorted(set(seqs))
    assert all(x == seq // 2 for seq, (x,) in seen)
    assert seen[0] == (0, (0,)) and seen[-1] == (6, (3,))
    assert no_waiter_thread_left(WOKEN)


def test_changes_async_checks_its_timeout_when_called():
    rec = SeqRecord(x="q")
    with pytest.raises(ValueError):
        rec.changes_async(timeout=-2)
    with pytest.raises(TypeError):
        rec.changes_async(1.0)


def test_breaking_out_of_changes_async_leaves_no_thread_waiting():
    rec = SeqRecord(x="q")

    async def main():
        async for seq, _ in rec.changes_async():
            break
        return seq

    assert asyncio.run(main()) == 0
    assert no_waiter_thread_left(WOKEN)


# ---- as a property -------------------------------------------------------------

from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.sampled_from(["update", "rollback"]), max_size=12),
       seq=st.integers(min_value=0, max_value=40))
def test_wait_without_timeout_looks_exactly_at_whether_the_state_is_another(ops, seq):
    """With no section open, wait(seq, 0) is True exactly when seq is not
    the current count, and read_versioned() names the current count."""
    rec = SeqRecord(x="q")
    for k, op in enumerate(ops):
        if op == "update":
            rec.update(x=k)
        else:
            with pytest.raises(KeyError):
                with rec.write() as w:
                    w.x = -1
                    raise KeyError
    assert rec.read_versioned()[0] == rec.sequence == 2 * len(ops)
    assert rec.wait(seq, 0) is (seq != rec.sequence)


# ---- sequence numbers at the edges of the count ------------------------------


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
    waiter, box = start_in_thread(rec.wait, start, SHORT)
    time.sleep(0.2)  # asleep on the odd count
    ended_at = time.monotonic()
    section.__exit__(None, None, None)
    waiter.join(LONG)
    assert box and box[0][:2] == ("ok", True), box
    assert box[0][2] - ended_at < WOKEN
    assert rec.read_versioned() == ((start + 2) % 2**64, (1,))


# ---- a wait inside a read function ------------------------------------------


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


def test_a_first_changes_call_imports_nothing():
    """changes() and wait() import no module at their first call: on the GIL
    build an import in one thread, while another runs C calls flat out,
    waits a switch interval for each of its GIL hand-overs (a first
    changes() took a second on 3.11 beside a thread reading in a loop)."""
    code = """
import sys
import seqlock_py
rec = seqlock_py.SeqRecord(x="d")
before = set(sys.modules)
seq, _ = next(rec.changes(timeout=0))
rec.wait(seq, 0)
print(sorted(set(sys.modules) - before), "asyncio" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.split() == ["[]", "False"], done.stdout + done.stderr
