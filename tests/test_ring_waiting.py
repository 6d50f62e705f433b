"""Readers of a ring that wait: RingReader.wait() and wait_async().

Every awaited wait on one ring, whatever its reader and event loop, shares
the ring's one watcher thread ("seqlock_py wait_async", as a record's):
2,000 pending waits are one thread, one append answers them all, a cancel
or a timeout withdraws its registration at once, close() ends the waits
with ValueError, and an append in another process wakes them.  Thread
counts are counts, never times; every wait has a deadline.
"""
from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from decimal import Decimal

import pytest

from process_helpers import PythonProcess
from seqlock_py import SeqRing, _news
from workers import LONG, no_waiter_thread_left, os_threads, until, waiter_threads, watcher_starts

MANY = 2000


def small_ring():
    return SeqRing(8, n="q")


@pytest.mark.timeout(60)
def test_two_thousand_wait_async_on_one_ring_share_one_watcher_thread_and_all_wake():
    ring = small_ring()
    readers = [ring.reader() for _ in range(MANY)]
    before = os_threads()

    async def main():
        tasks = [asyncio.ensure_future(r.wait_async(LONG)) for r in readers]
        everything = asyncio.gather(*tasks)
        await until(lambda: _news._pending_waits(ring) == MANY)
        counted = os_threads(), len(waiter_threads())
        appender = threading.Thread(target=ring.append, kwargs={"n": 1})
        appender.start()
        results = await asyncio.wait_for(everything, LONG)
        appender.join()
        return counted, results

    (threads, watchers), results = asyncio.run(main())
    assert watchers == 1
    assert threads - before <= 1, f"{threads - before} threads for {MANY} waits"
    assert results.count(True) == MANY
    assert all(r.poll() == [(0, (1,))] for r in readers)
    assert _news._pending_waits(ring) == 0
    assert no_waiter_thread_left()


@pytest.mark.timeout(60)
def test_cancelling_wait_async_withdraws_every_registration_and_ends_the_watcher():
    ring = small_ring()

    async def main():
        tasks = [asyncio.ensure_future(ring.reader().wait_async(LONG)) for _ in range(100)]
        await until(lambda: _news._pending_waits(ring) == 100)
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        return sum(isinstance(r, asyncio.CancelledError) for r in results)

    assert asyncio.run(main()) == 100
    assert _news._pending_waits(ring) == 0
    assert no_waiter_thread_left()


def test_wait_async_that_times_out_returns_false_and_leaves_no_registration():
    ring = small_ring()
    assert asyncio.run(ring.reader().wait_async(0.05)) is False
    assert _news._pending_waits(ring) == 0
    assert no_waiter_thread_left()


def test_wait_async_returns_at_once_when_an_entry_is_unpolled():
    ring = small_ring()
    reader = ring.reader()
    ring.append(n=1)
    assert asyncio.run(reader.wait_async(0)) is True
    assert waiter_threads() == []


def test_wait_async_of_a_reader_past_an_earlier_append_still_waits_for_the_next():
    ring = small_ring()
    ring.append(n=1)
    reader = ring.reader()  # after the entry already there

    async def main():
        waiting = asyncio.ensure_future(reader.wait_async(LONG))
        await until(lambda: _news._pending_waits(ring) == 1)
        assert not waiting.done()
        ring.append(n=2)
        return await waiting

    assert asyncio.run(main()) is True
    assert reader.poll() == [(1, (2,))]


def test_wait_async_takes_a_timeout_of_minus_one_as_for_ever():
    """Issue 27, defect 6: -1 is "for ever", as wait(-1) and a record's
    wait_async(seq, -1) take it: the wait is answered by the append that
    comes later.  main: the raw -1 made a deadline in the past, False at
    once."""
    ring = small_ring()
    reader = ring.reader()

    async def main():
        waiting = asyncio.ensure_future(reader.wait_async(-1))
        await until(lambda: _news._pending_waits(ring) == 1)
        ring.append(n=1)
        return await asyncio.wait_for(waiting, LONG)

    assert asyncio.run(main()) is True


def test_wait_async_takes_a_decimal_timeout_as_wait_does():
    """Issue 27, defect 6: the timeout is converted as wait()'s is (any
    number float() takes): a Decimal times out with False.  main: the raw
    Decimal was added to a float, TypeError."""
    reader = small_ring().reader()
    assert reader.wait(Decimal("0.05")) is False
    assert asyncio.run(reader.wait_async(Decimal("0.05"))) is False


@pytest.mark.timeout(60)
def test_close_ends_a_pending_wait_async_with_value_error():
    ring = small_ring()
    reader = ring.reader()

    async def main():
        waiting = asyncio.ensure_future(reader.wait_async(LONG))
        await until(lambda: _news._pending_waits(ring) == 1)
        closer = threading.Thread(target=ring.close)
        closer.start()
        try:
            return await asyncio.wait_for(asyncio.gather(waiting, return_exceptions=True), LONG)
        finally:
            closer.join(LONG)

    [outcome] = asyncio.run(main())
    assert isinstance(outcome, ValueError) and "closed" in str(outcome)
    assert ring.closed
    assert no_waiter_thread_left()


APPENDER = """
import sys
from seqlock_py import SeqRing
with SeqRing.attach_shared(sys.argv[1]) as ring:
    print("ready", flush=True)
    sys.stdin.readline()
    ring.append(n=7)
print("appended", flush=True)
"""


@pytest.mark.timeout(60)
def test_wait_async_is_woken_by_an_append_in_another_process():
    name = f"seqlock_test_ring_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with SeqRing.create_shared(name, 8, n="q") as ring:
        reader = ring.reader()
        with PythonProcess(APPENDER, name) as child:
            child.expect("ready")

            async def main():
                waiting = asyncio.ensure_future(reader.wait_async(LONG))
                await until(lambda: _news._pending_waits(ring) == 1)
                child.tell("go")
                return await waiting

            assert asyncio.run(main()) is True
            child.expect("appended")
            code, out = child.finish()
            assert code == 0, out
        assert reader.poll() == [(0, (7,))]


def test_readers_of_two_rings_wait_on_one_watcher_each():
    first, second = small_ring(), small_ring()
    a, b = first.reader(), second.reader()

    async def main():
        waits = [asyncio.ensure_future(r.wait_async(LONG)) for r in (a, b)]
        await until(lambda: _news._pending_waits() == 2)
        watchers = len(waiter_threads())
        first.append(n=1)
        done = await asyncio.wait_for(waits[0], LONG)
        still_waiting = not waits[1].done()
        second.append(n=2)
        return watchers, done, still_waiting, await asyncio.wait_for(waits[1], LONG)

    assert asyncio.run(main()) == (2, True, True, True)


FINALISED_UNDER_THE_LOCK = """
import asyncio, gc, os, time
from seqlock_py import SeqRing, _news
gc.disable()
ring = SeqRing(8, n="q")
loop = asyncio.new_event_loop()
loop.create_task(ring.reader().wait_async())
loop.run_until_complete(asyncio.sleep(0.05))  # registered, never resumed
loop.close()
del loop
ring.append(n=1)  # answered, to a closed loop: the task is now garbage
deadline = time.monotonic() + 10
while _news._pending_waits(ring) and time.monotonic() < deadline:
    time.sleep(0.01)
with _news._lock:  # as inside a registration's allocations
    gc.collect()
print("collected", flush=True)
# Not the interpreter's exit: CPython 3.13.15t spends 20 s in it after any
# task was left pending on a closed event loop (asyncio alone does it).
os._exit(0)
"""


@pytest.mark.timeout(60)
def test_a_wait_async_finalised_by_the_gc_under_the_watchers_lock_does_not_deadlock():
    """Failed (hostile review of issue 20): a wait_async() left pending on
    an event loop closed under it becomes garbage once an append answers
    it; when the garbage collector finalised its coroutine inside one of
    _news's own sections (any allocation under _news._lock: a registration
    starting a watcher thread, on any thread), the coroutine's finally
    took _news._lock again and that thread hung for good, and every
    wait_async of the process after it (records' too)."""
    with PythonProcess(FINALISED_UNDER_THE_LOCK) as child:
        child.expect("collected", timeout=LONG)
        code, out = child.finish()
    assert code == 0, out


SHUTDOWN_WITH_A_PENDING_WAIT = """
import asyncio, threading, time
from seqlock_py import SeqRecord, SeqRing, _news
ring, rec = SeqRing(8, n="q"), SeqRecord(n="q")
def loop_thread():
    async def main():
        answers = await asyncio.gather(rec.wait_async(rec.sequence), ring.reader().wait_async(),
                                       return_exceptions=True)
        print("answers", [a if isinstance(a, bool) else repr(a) for a in answers], flush=True)
    asyncio.run(main())
threading.Thread(target=loop_thread).start()  # not a daemon: joined at exit
while _news._pending_waits() < 2:
    time.sleep(0.01)
print("exiting", flush=True)
"""


@pytest.mark.timeout(60)
def test_a_wait_async_pending_at_interpreter_shutdown_returns_false_as_a_records_does():
    """Failed (hostile review of issue 20): at shutdown the watcher answers
    every pending wait False; a record's wait_async() returned False, a
    ring reader's looked again (its nap had ended, it thought) and raised
    RuntimeError("can't wait_async at interpreter shutdown") into the
    task of a loop thread the interpreter was joining."""
    with PythonProcess(SHUTDOWN_WITH_A_PENDING_WAIT) as child:
        child.expect("exiting", timeout=LONG)
        code, out = child.finish()
    assert code == 0, out
    assert "answers [False, False]" in out, out


STORM_APPENDER = """
import sys, time
from seqlock_py import SeqRing
with SeqRing.attach_shared(sys.argv[1]) as ring:
    print("ready", flush=True)
    end, k = time.monotonic() + float(sys.argv[2]), 0
    while time.monotonic() < end:
        k += 1
        ring.append(x=k, y=-k)
        if k % 4 == 0:
            time.sleep(0.001)
print("appended", k, flush=True)
"""


@pytest.mark.timeout(120)
def test_wait_async_storm_on_three_loops_with_cancels_and_timeouts_delivers_every_entry_or_counts_it():
    """Held (hostile review of issue 20; 3.11 and 3.13t): 900 tasks on 3
    event loops in 3 threads, each with its own reader, wait (no timeout,
    timeouts, wait_for timeouts, cancels at random moments) and poll
    while another process appends for 3 s: every task's delivered +
    missed equals the entries since its start, none torn, and no wait is
    left registered and no watcher left once they end."""
    import collections
    import random

    name = f"seqlock_test_ring_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    stats = collections.Counter()
    counting = threading.Lock()
    done = threading.Event()

    with SeqRing.create_shared(name, 64, x="q", y="q") as ring:

        def run_loop(index):
            async def task(n):
                rng = random.Random(index * 1000 + n)
                reader = ring.reader(oldest=True)
                start, seen, torn = reader.next_sequence, 0, 0
                kinds = collections.Counter()

                def take():
                    nonlocal seen, torn
                    for seq, e in reader.poll():
                        seen += 1
                        torn += e.y != -e.x or e.x != seq + 1

                while not done.is_set():
                    kind = rng.randrange(4)
                    if kind == 0:
                        kinds[await reader.wait_async(rng.choice([None, 0, 0.001, 0.05]))] += 1
                    elif kind == 1:
                        take()  # so that the wait has to wait
                        waiting = asyncio.ensure_future(reader.wait_async())
                        await asyncio.sleep(rng.random() * 0.003)
                        waiting.cancel()
                        try:
                            await waiting
                        except asyncio.CancelledError:
                            kinds["cancelled"] += 1
                    elif kind == 2:
                        try:
                            await asyncio.wait_for(reader.wait_async(), rng.random() * 0.01)
                        except asyncio.TimeoutError:
                            kinds["timed out"] += 1
                    else:
                        take()
                take()
                with counting:
                    stats.update(kinds)
                    stats["tasks"] += 1
                    stats["seen"] += seen
                    stats["torn"] += torn
                    stats["exact"] += seen + reader.missed == reader.next_sequence - start

            async def main():
                await asyncio.gather(*(task(n) for n in range(300)))

            asyncio.run(main())

        with PythonProcess(STORM_APPENDER, name, 3.0) as child:
            child.expect("ready")
            threads = [threading.Thread(target=run_loop, args=(i,)) for i in range(3)]
            for t in threads:
                t.start()
            child.expect("appended", timeout=LONG)
            code, out = child.finish()
        assert code == 0, out
        done.set()
        # Wake the untimed waits: appends until every loop has ended.
        deadline = time.monotonic() + LONG
        while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
            k = ring.head + 1
            ring.append(x=k, y=-k)
            time.sleep(0.02)
        for t in threads:
            t.join(LONG)
        assert not any(t.is_alive() for t in threads)
        print(dict(stats))
        assert stats["tasks"] == stats["exact"] == 900
        assert stats["torn"] == 0 and stats["seen"] > 0
        assert stats[True] > 0 and stats["cancelled"] + stats["timed out"] + stats[False] > 0
        assert _news._pending_waits(ring) == 0
    assert no_waiter_thread_left()


def test_a_loop_of_reader_wait_async_is_served_by_one_watcher_thread(monkeypatch):
    """As a record's: the watcher stays on the ring between wake-ups, so
    neither a thread starts nor a lingering one is handed the next wait
    per wake-up (only the first wait is handed over)."""
    monkeypatch.setattr(_news, "_STAY", LONG)  # however slow this machine is
    handed = []
    start_watcher = _news._start_watcher
    monkeypatch.setattr(_news, "_start_watcher", lambda watch: handed.append(watch) or start_watcher(watch))
    ring = small_ring()
    reader = ring.reader()
    asked = []

    def writer():
        for i in range(300):
            deadline = time.monotonic() + LONG
            while not (len(asked) > i and _news._pending_waits(ring) > 0) and time.monotonic() < deadline:
                time.sleep(0.0002)
            ring.append(n=i)

    appender = threading.Thread(target=writer)
    appender.start()
    started = watcher_starts(monkeypatch)

    async def main():
        seen = []
        for i in range(300):
            asked.append(i)
            assert await reader.wait_async(LONG)
            seen += [entry.n for _, entry in reader.poll()]
        return seen

    assert asyncio.run(main()) == list(range(300))
    appender.join(LONG)
    assert len(started) <= 1
    assert len(handed) == 1


def head_offset(capacity, **fields):
    """Where a ring's head word lies in its buffer: the one word an
    append turns from 0 to 1 (the count goes to 2, the entry's stamp to 2)."""
    import struct

    scratch = bytearray(SeqRing.buffer_size(capacity, **fields))
    ring = SeqRing.create(scratch, capacity, **fields)
    before = bytes(scratch)
    ring.append(**{name: 7 for name in fields})
    ring.close()
    found = [off for off in range(0, len(scratch) - 7, 8)
             if struct.unpack_from("<Q", before, off)[0] == 0 and struct.unpack_from("<Q", scratch, off)[0] == 1]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.timeout(60)
def test_a_ring_wait_async_looks_again_after_a_nap_with_no_news(monkeypatch):
    """A writer that died after storing head, before closing its section,
    moved no count: no write wakes the watcher.  It answers the wait
    False after a nap of its own (_ring._NAP), the reader looks again and
    finds the entry; no timer of the event loop's is set per wait (one
    per wait-up cost about a tenth of a wake-up)."""
    import struct

    from seqlock_py import _ring

    monkeypatch.setattr(_ring, "_NAP", 0.05)
    offset = head_offset(8, n="q")
    buf = bytearray(SeqRing.buffer_size(8, n="q"))
    ring = SeqRing.create(buf, 8, n="q")
    reader = ring.reader()
    timers = []
    call_later = asyncio.BaseEventLoop.call_later
    monkeypatch.setattr(asyncio.BaseEventLoop, "call_later",
                        lambda loop, *args, **kwargs: timers.append(args) or call_later(loop, *args, **kwargs))

    async def main():
        waiting = asyncio.ensure_future(reader.wait_async())
        await until(lambda: _news._pending_waits(ring) == 1)
        count = ring._news_sequence
        struct.pack_into("<Q", buf, offset, 1)  # head, as the dead writer left it
        answer = await waiting
        return answer, count == ring._news_sequence

    assert asyncio.run(main()) == (True, True)
    assert [args for args in timers if args[1] is _news._time_out] == []
    ring.close()
