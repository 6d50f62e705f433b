"""Readers that wait for news: the iterator and asyncio forms.

``SeqLock`` and ``SeqRecord`` check their arguments in C and hand over
to these functions.  ``wait()`` sleeps on the lock's sequence word (a
futex) with the GIL released; an event loop cannot, so each awaited wait
sleeps in a thread of its own, and cancelling the await cancels that
thread's wait (it returns at once).  A dedicated thread rather than the
loop's default executor: waits that may last for ever must not take the
few threads other ``run_in_executor`` calls need.  Not a daemon thread:
an isolated subinterpreter refuses those; instead, every wait still
pending when the interpreter shuts down is cancelled before threads are
joined, so none can hold the shutdown up.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Generator, Iterator
from typing import Any


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


# The waits whose threads run now, cancelled at shutdown (before the
# interpreter joins its threads: threading._register_atexit, which
# concurrent.futures uses for the same purpose).
_running: set[Any] = set()
_running_lock = threading.Lock()
_cancel_at_exit_registered = False


def _cancel_running_waits() -> None:
    with _running_lock:
        waiters = list(_running)
    for waiter in waiters:
        waiter.cancel()


def _start_wait_thread(waiter: Any, loop: asyncio.AbstractEventLoop, answer: asyncio.Future[bool]) -> None:
    global _cancel_at_exit_registered
    with _running_lock:
        if not _cancel_at_exit_registered:
            register_atexit = getattr(threading, "_register_atexit")
            register_atexit(_cancel_running_waits)
            _cancel_at_exit_registered = True
        _running.add(waiter)
    thread = threading.Thread(
        target=_wait_in_thread,
        args=(waiter, loop, answer),
        name="seqlock_py wait_async",
        daemon=False,
    )
    try:
        thread.start()
    except BaseException:
        with _running_lock:
            _running.discard(waiter)
        raise


async def wait_async(owner: Any, seq: int, timeout: float | None) -> bool:
    """owner.wait(seq, timeout) in a thread, awaited."""
    if owner.wait(seq, 0):
        return True
    if timeout is not None and timeout == 0:
        return False
    waiter = owner._waiter(seq, timeout)
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[bool] = loop.create_future()
    _start_wait_thread(waiter, loop, answer)
    try:
        return await answer
    finally:
        waiter.cancel()  # no-op once the wait has returned


def _wait_in_thread(waiter: Any, loop: asyncio.AbstractEventLoop, answer: asyncio.Future[bool]) -> None:
    try:
        result = waiter.wait()
    except BaseException as exc:  # delivered to the awaiting task
        outcome: tuple[str, Any] = ("set_exception", exc)
    else:
        outcome = ("set_result", result)
    finally:
        with _running_lock:
            _running.discard(waiter)
    try:
        loop.call_soon_threadsafe(_settle, answer, outcome)
    except RuntimeError:
        pass  # the loop has closed: nobody is awaiting any more


def _settle(answer: asyncio.Future[bool], outcome: tuple[str, Any]) -> None:
    if not answer.done():  # cancelled meanwhile
        method, value = outcome
        getattr(answer, method)(value)


async def changes_async(record: Any, timeout: float | None) -> AsyncIterator[tuple[int, tuple[Any, ...]]]:
    """SeqRecord.changes_async(): changes(), awaiting between writes."""
    seq, values = record.read_versioned()
    yield seq, values
    while await wait_async(record, seq, timeout):
        seq, values = record.read_versioned()
        yield seq, values
