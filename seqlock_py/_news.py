"""Readers that wait for news: the iterator and asyncio forms.

``SeqLock`` and ``SeqRecord`` check their arguments in C and hand over
to these functions; ``RingReader.wait_async()`` waits here on its ring
(``seqlock_py._ring``).  An owner is anything with ``_news_sequence``
(its lock's count), ``_news_since(seq)`` (``wait(seq, 0)``) and
``_weak_waiter()``.  ``wait()`` sleeps on the lock's sequence word (a
futex) with the GIL released; an event loop cannot.  So every awaited
wait on one lock or record, from any event loop of this process, leaves
its future with that owner's watch, and one watcher thread per owner
sleeps on the futex for all of them (``_WeakWaiter.next()``, naps of
1 s): after each write it answers every future the write concerns, with
one ``loop.call_soon_threadsafe`` per event loop.  A wait's timeout is
its loop's timer; cancelling the await withdraws the future.  2,000
pending waits on one record are one thread, not 2,000.

The watcher runs no code of its callers: the C layer hands over every
argument converted (seq a plain int, the timeout None or seconds as a
float), and the watch keeps event loops and futures by id(), so neither
their __hash__ nor their __eq__ runs in it.  Only a loop's
call_soon_threadsafe does (outside the lock): a loop that cannot be
called is left unanswered, and the others are answered all the same.
Whatever goes wrong inside the watcher, it first unregisters its watch:
the next wait_async on the owner starts a new one.

A watch holds its owner only while a wait is pending.  Once the last is
answered (or withdrawn) it lets go of the owner, before the answers
reach their loops, and the watcher stays asleep on the owner's count for
the next wait_async, up to ``_STAY`` seconds or ``_STAY_WRITES`` writes:
a consumer that awaits in a loop then only leaves its future, no thread
is handed anything (handing each wait to a lingering thread cost a
wake-up of it, 40-70 us of CPU, per wake; starting one, 200-450 us).
That sleep holds no reference (``_WeakWaiter``, src/_seqlock/unheld.h):
the owner's deallocation wakes it and waits the few microseconds it takes
to leave, so the last ``del`` of a record still releases its buffer at
once (``SharedMemory.close()`` right after it works).  A watch whose
stay ended lets its thread linger, holding nothing, for ``_LINGER``
seconds for another owner's first wait.  A wait registered after the
watcher woke is answered only by a count read after it (``fresh``, then
``pending``): the count the sleep ended at may be older than its seq.

The watcher is not a daemon thread (an isolated subinterpreter refuses
those).  At interpreter shutdown every watcher is stopped and its waits
answered False before threads are joined, so none holds the exit up; a
fork's child starts its own.
"""

from __future__ import annotations

import copy
import os
import threading
import time
from collections.abc import AsyncIterator, Generator, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio


def changes(record: Any, timeout: float | None) -> Iterator[tuple[int, tuple[Any, ...]]]:
    """SeqRecord.changes(): the current snapshot, then one per write."""
    return _OneThreadAtATime(_changes(record, timeout))


class _OneThreadAtATime(Iterator[Any]):
    """A generator that two threads cannot run at once: the second gets
    ValueError, as a generator gives it under the GIL.  The free-threaded
    build does not serialise a generator's frame: two threads in next()
    on one plain generator crash the interpreter."""

    __slots__ = ("_gen", "_busy")

    def __init__(self, gen: Generator[Any, None, None]) -> None:
        self._gen = gen
        self._busy = threading.Lock()

    def __iter__(self) -> _OneThreadAtATime:
        return self

    def __next__(self) -> Any:
        if not self._busy.acquire(blocking=False):
            raise ValueError("generator already executing")
        try:
            return next(self._gen)
        finally:
            self._busy.release()

    def close(self) -> None:
        if not self._busy.acquire(blocking=False):
            raise ValueError("generator already executing")
        try:
            self._gen.close()
        finally:
            self._busy.release()


def _changes(record: Any, timeout: float | None) -> Generator[tuple[int, tuple[Any, ...]], None, None]:
    seq, values = record.read_versioned()
    yield seq, values
    while record.wait(seq, timeout):
        seq, values = record.read_versioned()
        yield seq, values


# ---- wait_async: one watcher thread per lock or record ----

#: A watch's futures: id(future) -> (seq, loop, future), by id so that no
#: caller's __hash__ or __eq__ runs in the watcher.
_Waits = dict[int, tuple[int, "asyncio.AbstractEventLoop", "asyncio.Future[bool]"]]
#: Futures to answer: id(loop) -> (loop, futures).
_Answers = dict[int, tuple["asyncio.AbstractEventLoop", list["asyncio.Future[bool]"]]]


class _Watch:
    """The pending awaited waits on one owner, and the thread that sleeps
    for them.  Every field is guarded by _lock."""

    __slots__ = ("key", "owner", "waiter", "thread", "pending", "fresh", "until", "idle_writes", "nap")

    def __init__(self, owner: Any) -> None:
        self.key = id(owner)  # in _watches
        #: the owner while a wait is pending; None while none is (the
        #: watcher may stay asleep on it then, holding nothing)
        self.owner: Any = owner
        #: the watcher's sleeps: no reference to the owner (its
        #: deallocation wakes them and waits for them to leave); cancel()
        #: makes the watcher look once
        self.waiter = owner._weak_waiter()
        self.thread: threading.Thread | None = None
        #: the futures registered before the watcher's sleep began, so
        #: that the count it wakes at is newer than theirs ...
        self.pending: _Waits = {}
        #: ... and since: only a count read after them answers them
        self.fresh: _Waits = {}
        self.until: float | None = None  # none pending: when the watch ends
        self.idle_writes = 0  # writes the watcher woke for, none pending
        #: with waits pending, the watcher sleeps at most this long, then
        #: answers False those that waited all along (they look again): the
        #: nap of the wait that made the watch (a ring's waits all take one)
        self.nap: float | None = None


class _Watcher:
    """A watcher thread's hand-over point: the watch it serves (None while
    it lingers), and the lock it lingers on (released to give it a watch,
    or to stop it).  Guarded by _lock."""

    __slots__ = ("thread", "watch", "wake")

    def __init__(self, watch: _Watch) -> None:
        self.thread: threading.Thread | None = None
        self.watch: _Watch | None = watch
        self.wake = threading.Lock()


#: How long, and for how many writes, a watcher whose last wait has been
#: answered stays asleep on its owner (holding nothing) for the next
#: wait_async, before its watch ends.
_STAY = 0.05
_STAY_WRITES = 16
#: How long a watcher with nothing to watch waits for another owner's
#: first wait_async before its thread ends, in seconds.
_LINGER = 10.0
#: A watcher thread's name while it watches an owner (its waits pending,
#: or staying for the next), and while it lingers between owners.  Not
#: renamed per wake-up: a name costs a Python call to set.
_SERVING = "seqlock_py wait_async"
_LINGERING = "seqlock_py wait_async (lingering)"

_lock = threading.Lock()
#: The watch of each owner with a watcher, by id(owner).  A watch holds
#: its owner only while a wait is pending: one whose owner was freed
#: stays here until its watcher leaves (waiter.is_for() tells it from the
#: watch of a new object with the same id).
_watches: dict[int, _Watch] = {}
#: Watchers lingering, the last to start lingering last.
_idle: list[_Watcher] = []
_stopping = False  # the interpreter shuts down: no new watcher
_stop_at_exit_registered = False


async def wait_async(owner: Any, seq: int, timeout: float | None, nap: float | None = None) -> bool:
    """owner.wait(seq, timeout), awaited: the owner's watcher answers.
    seq is a plain int and timeout None or a float (converted by the C
    layer): the watcher compares and hashes seq, and must run no caller's
    code.  nap: the watcher answers False once the wait has lasted a whole
    nap of that many seconds (of its own, no timer of the loop's) without
    news, so that the caller looks again (a ring's reader: _ring)."""
    global _running_loop
    if type(seq) is not int:
        raise TypeError(f"seq must be converted to a plain int first, not {type(seq).__name__}")
    if owner._news_since(seq):
        return True
    if timeout == 0:
        return False
    if _running_loop is None:
        import asyncio  # here: changes() alone should not import asyncio

        _running_loop = asyncio.get_running_loop
    loop = _running_loop()
    answer: asyncio.Future[bool] = loop.create_future()
    if not _register(owner, seq, loop, answer, nap):
        return True  # a write ended meanwhile
    timer = None if timeout is None else loop.call_later(timeout, _time_out, answer)
    closed = False
    woken = False
    try:
        woken = await answer
        return woken
    except GeneratorExit:
        closed = True
        raise
    finally:
        if timer is not None:
            timer.cancel()
        if woken:
            pass  # the watcher took it out to answer it: nothing to withdraw
        elif not closed:
            _withdraw(owner, answer)
        elif _lock.acquire(blocking=False):
            _lock.release()
            _withdraw(owner, answer)
        # Else closed never resumed (its loop gone), by the garbage
        # collector (answered already: garbage) inside a section of _lock,
        # maybe this thread's: waiting for _lock could be waiting for
        # ourselves.  A registration left behind is answered with the
        # next write, to a loop nobody runs.


#: asyncio.get_running_loop, once asyncio is imported (by the first wait_async).
_running_loop: Any = None


def _time_out(answer: asyncio.Future[bool]) -> None:
    if not answer.done():
        answer.set_result(False)


def _register(owner: Any, seq: int, loop: asyncio.AbstractEventLoop, answer: asyncio.Future[bool],
              nap: float | None = None) -> bool:
    """Leave answer with owner's watch, made now if it has none (with the
    wait's nap), starting its watcher if it has none; False if a write has
    ended since seq after all.  The look and the registration are one step
    under _lock, as the watcher's look at the count and its answers are: a
    write either is seen here or is seen by the watcher after this
    registration."""
    global _stop_at_exit_registered
    with _lock:
        if owner._news_since(seq):
            return False
        if _stopping:
            raise RuntimeError("can't wait_async at interpreter shutdown")
        if not _stop_at_exit_registered:
            # Before the interpreter joins its threads (concurrent.futures
            # uses the same hook for the same purpose).
            try:
                getattr(threading, "_register_atexit")(_stop_watchers)
            except RuntimeError:  # joined already: an atexit handler calls
                raise RuntimeError("can't wait_async at interpreter shutdown") from None
            _stop_at_exit_registered = True
        watch = _watches.get(id(owner))
        if watch is None or not watch.waiter.is_for(owner):
            # None, or a freed owner's whose watcher has not left yet.
            watch = _watches[id(owner)] = _Watch(owner)
            watch.nap = nap
        elif not watch.pending and not watch.fresh:
            # Its watcher stays asleep on the owner: no hand-over to a
            # thread, only the owner held again.
            watch.owner = owner
            watch.until = None
        watch.fresh[id(answer)] = (seq, loop, answer)
        if watch.thread is None:
            try:
                _start_watcher(watch)
            except BaseException:
                _discard(watch, answer)
                if not watch.pending and not watch.fresh:
                    _unregister(watch)
                    watch.owner = None  # the caller holds it: not the last
                raise
    return True


def _start_watcher(watch: _Watch) -> None:
    """Under _lock: a lingering watcher serves watch, else a new thread.
    Either takes _lock, which the caller holds, before it looks."""
    if _idle:
        watcher = _idle.pop()
        watcher.watch = watch
        watch.thread = watcher.thread
        if watcher.thread is not None:
            watcher.thread.name = _SERVING
        watcher.wake.release()
        return
    watcher = _Watcher(watch)
    thread = threading.Thread(target=_serve, args=(watcher,), name=_SERVING, daemon=False)
    watcher.thread = thread
    watcher.wake.acquire()  # held while the watcher serves
    thread.start()
    watch.thread = thread


def _serve(watcher: _Watcher) -> None:
    """A watcher thread: serve each watch it is given, lingering between
    them, until none comes for _LINGER seconds or the interpreter shuts
    down."""
    watch = watcher.watch
    try:
        while watch is not None:
            if not _watch(watch, watcher):
                return  # stopped: no lingering
            # Lingering (listed as idle since its watch ended, so that a
            # wait_async made as its last answers land finds it), or given
            # a watch already, or stopped (its watch None).
            given = watcher.wake.acquire(timeout=_LINGER)
            with _lock:
                if not given:
                    if watcher in _idle:
                        _idle.remove(watcher)
                        return
                    watcher.wake.acquire()  # released as the nap ended
                watch = watcher.watch
    except BaseException:
        with _lock:  # a watch given to a thread that fails goes on
            if watcher in _idle:
                _idle.remove(watcher)
            elif watcher.watch is not None and watcher.watch is not watch:
                given_watch, watcher.watch = watcher.watch, None
                given_watch.thread = None
                _start_watcher(given_watch)
        raise


def _withdraw(owner: Any, answer: asyncio.Future[bool]) -> None:
    """Forget answer (timed out, cancelled, or already answered: then a
    no-op); the last one gone, the watch lets go of the owner, and the
    watcher is woken to begin its stay."""
    with _lock:
        watch = _watches.get(id(owner))
        if watch is None or not _discard(watch, answer) or watch.pending or watch.fresh:
            return
        watch.owner = None  # the caller holds it: not the last reference
        watch.waiter.cancel()


def _discard(watch: _Watch, answer: asyncio.Future[bool]) -> bool:
    # answer is alive (the caller holds it), so no other future has its id.
    key = id(answer)
    return watch.fresh.pop(key, None) is not None or watch.pending.pop(key, None) is not None


def _take(waits: _Waits, keep: int | None, into: _Answers) -> None:
    """Move into `into`, by loop, the futures of waits (a watch's pending
    or fresh) but those waiting since keep."""
    kept = None
    for key, entry in waits.items():
        seq, loop, answer = entry
        if seq == keep:
            if kept is None:
                kept = {}
            kept[key] = entry
            continue
        batch = into.get(id(loop))
        if batch is None:
            into[id(loop)] = (loop, [answer])
        else:
            batch[1].append(answer)
    waits.clear()
    if kept is not None:
        waits.update(kept)


def _watch(watch: _Watch, watcher: _Watcher) -> bool:
    """Serve watch until it ends; True if the watcher then lingers (it is
    listed as idle), False if it stops (the interpreter shuts down)."""
    try:
        answers, outcome, owner, lingers = _watch_until_it_ends(watch, watcher)
    except BaseException as exc:
        # Its own clean-up failed: leave no dead watch, answer what can
        # be answered, and let threading.excepthook report the failure.
        with _lock:
            answers, owner = _end_watch(watch)
        owner = None
        _deliver(answers, exc.with_traceback(None))
        raise
    # Let go of the owner outside _lock (its deallocation may run code),
    # before the answers land: the tasks answered last may then release
    # its buffer at once (SharedMemory.close()).
    owner = None
    _deliver(answers, outcome)
    return lingers


def _watch_until_it_ends(watch: _Watch, watcher: _Watcher) -> tuple[_Answers, bool | BaseException, Any, bool]:
    """The watcher's loop.  After each write it answers the waits the
    write concerns; with none left it lets go of the owner and stays
    asleep on it (the waiter holds nothing) for the next wait_async, up to
    _STAY seconds or _STAY_WRITES writes, or until the owner is freed.
    Returns what is still pending as the watch ends, the answer it gets,
    the owner to let go of (outside _lock) and whether it lingers."""
    seq = 0  # the count the watcher sleeps after (a wait pends first)
    now: int | None = None  # the count the last sleep ended at
    nap_ends: float | None = None  # when the last sleep's nap (watch.nap) ended
    let_go: Any = None
    answers: _Answers = {}
    naps_over: _Answers = {}
    try:
        while True:
            answers = {}
            naps_over = {}
            with _lock:
                if _stopping:
                    answers, owner, lingers = _retire(watch, watcher)
                    return answers, False, owner, lingers
                if now is not None:
                    seq = now
                    if watch.pending:  # registered before it: a write ended since theirs
                        _take(watch.pending, now, answers)
                elif nap_ends is not None and watch.pending and time.monotonic() >= nap_ends:
                    # A whole nap with no news: they look again (answered
                    # False), before those registered since join them.
                    _take(watch.pending, None, naps_over)
                if watch.pending or watch.fresh:
                    # The waits for any state but the newest committed one
                    # are answered: a write has ended since theirs.
                    count = watch.owner._news_sequence
                    if count % 2 == 0:
                        if watch.pending:
                            _take(watch.pending, count, answers)
                        fresh = watch.fresh
                        if len(fresh) == 1 and not answers:
                            # The usual case, one task awaiting in a loop:
                            # _take() inline (on 3.13t a call costs as much).
                            (since, loop, answer), = fresh.values()
                            if since != count:
                                answers[id(loop)] = (loop, [answer])
                                fresh.clear()
                        elif fresh:
                            _take(fresh, count, answers)
                    if watch.fresh:  # pending from now: the sleep comes after them
                        watch.pending.update(watch.fresh)
                        watch.fresh.clear()
                    seq = count  # odd: until the open section's end
                timeout = None
                if not watch.pending:
                    if watch.owner is not None:  # answered the last
                        let_go, watch.owner = watch.owner, None
                    if watch.until is None:
                        timeout = _STAY
                        watch.until = time.monotonic() + timeout
                        watch.idle_writes = 0
                    else:
                        timeout = watch.until - time.monotonic()
                        if now is not None:
                            watch.idle_writes += 1
                    if timeout <= 0 or watch.idle_writes > _STAY_WRITES:
                        _, owner, lingers = _retire(watch, watcher)
                        _deliver(naps_over, False)
                        return answers, True, let_go, lingers
                    nap_ends = None
                elif watch.nap is not None:
                    timeout = watch.nap
                    nap_ends = time.monotonic() + timeout
                waiter = watch.waiter
            let_go = None  # outside _lock: its deallocation may run code
            for loop, futures in answers.values():  # _deliver(answers, True), inline
                try:
                    loop.call_soon_threadsafe(_settle_futures, futures, True)
                except Exception:
                    pass  # as _deliver()
            if naps_over:
                _deliver(naps_over, False)
            # Wakes when a write ends after seq (odd: the open section's
            # end), when cancelled (the last wait left, shutdown), when the
            # owner is closed or freed (ValueError), or at timeout.
            now = waiter.next(seq, timeout)
    except BaseException as exc:  # the owner's error is every waiter's
        let_go = None
        _deliver(answers, True)  # those taken before it was raised
        _deliver(naps_over, False)
        with _lock:
            answers, owner, lingers = _retire(watch, watcher)
        return answers, exc.with_traceback(None), owner, lingers  # (its frames hold the owner)


def _retire(watch: _Watch, watcher: _Watcher) -> tuple[_Answers, Any, bool]:
    """Under _lock: the watch ends (_end_watch()); the watcher lingers
    unless the interpreter shuts down (listed as idle before the last
    answers land, so that a wait_async they make finds it)."""
    answers, owner = _end_watch(watch)
    if _stopping:
        return answers, owner, False
    watcher.watch = None
    if watcher.thread is not None:
        watcher.thread.name = _LINGERING
    _idle.append(watcher)
    return answers, owner, True


def _end_watch(watch: _Watch) -> tuple[_Answers, Any]:
    """Under _lock: the watcher leaves; return what was still pending and
    the owner, which the caller lets go of outside _lock.  The watch is
    nobody's first (the next wait starts a new one), so that nothing
    failing after it leaves a watch nobody watches."""
    _unregister(watch)
    answers: _Answers = {}
    _take(watch.pending, None, answers)
    _take(watch.fresh, None, answers)
    owner, watch.owner = watch.owner, None
    return answers, owner


def _unregister(watch: _Watch) -> None:
    """Under _lock: the watch has no watcher and is no owner's any more
    (the next wait_async on its owner starts a new one).  Cannot fail."""
    watch.thread = None
    if _watches.get(watch.key) is watch:
        del _watches[watch.key]


def _deliver(answers: _Answers, outcome: bool | BaseException) -> None:
    """One call_soon_threadsafe per loop: its futures get outcome."""
    for loop, futures in answers.values():
        try:
            loop.call_soon_threadsafe(_settle_futures, futures, outcome)
        except Exception:
            # Closed (RuntimeError: nobody awaits any more), or a loop
            # that cannot be called: the others are answered all the same.
            pass


def _settle_futures(futures: list[asyncio.Future[bool]], outcome: bool | BaseException) -> None:
    for answer in futures:
        if answer.done():  # cancelled or timed out meanwhile
            continue
        if isinstance(outcome, BaseException):
            answer.set_exception(_own_copy(outcome))
        else:
            answer.set_result(outcome)


def _own_copy(exc: BaseException) -> BaseException:
    """A copy for each task that raises it (its traceback is its own)."""
    try:
        return copy.copy(exc)
    except Exception:
        return exc


def _stop_watchers() -> None:
    """At interpreter shutdown: every watcher answers its waits False and
    ends.  A cancel can land while a watcher falls asleep (then it is seen
    at its nap's end, 1 s): so cancel again until it has gone."""
    global _stopping
    with _lock:
        _stopping = True
        stopping = [(watch.thread, watch.waiter) for watch in _watches.values()]
        while _idle:
            _idle.pop().wake.release()  # its watch None: it ends
    for thread, waiter in stopping:
        while thread is not None and thread.is_alive():
            waiter.cancel()
            thread.join(0.05)


def _forget_watchers_in_child() -> None:
    """After fork(): only the forking thread exists, so no watcher; _lock
    may have been held by one.  Start a watcher afresh for what is pending
    (a loop of the forking thread may still await it)."""
    global _lock
    _lock = threading.Lock()
    _idle.clear()  # their threads are the parent's
    for key, watch in list(_watches.items()):
        watch.thread = None
        if not watch.pending and not watch.fresh:
            del _watches[key]
            continue
        try:
            _start_watcher(watch)
        except RuntimeError:
            pass  # the next wait_async on the owner starts it


def _pending_waits(owner: Any = None) -> int:
    """The futures waiting with owner's watcher (all watchers' if None):
    for tests."""
    with _lock:
        if owner is None:
            return sum(len(watch.pending) + len(watch.fresh) for watch in _watches.values())
        watch = _watches.get(id(owner))
        if watch is None or not watch.waiter.is_for(owner):
            return 0
        return len(watch.pending) + len(watch.fresh)


if hasattr(os, "register_at_fork"):
    try:
        os.register_at_fork(after_in_child=_forget_watchers_in_child)
    except RuntimeError:
        pass  # not in this (sub)interpreter: it cannot fork either


async def changes_async(record: Any, timeout: float | None) -> AsyncIterator[tuple[int, tuple[Any, ...]]]:
    """SeqRecord.changes_async(): changes(), awaiting between writes."""
    seq, values = record.read_versioned()
    yield seq, values
    while await wait_async(record, seq, timeout):
        seq, values = record.read_versioned()
        yield seq, values
