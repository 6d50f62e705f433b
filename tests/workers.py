"""Thread workers and stress settings shared by the test files.

Workers start together behind a ``threading.Barrier``, a worker's exception
is re-raised in the test on join, and a worker that does not finish in time
fails the test instead of hanging it.

Stress tests run for ``stress_seconds(default)``: the default keeps the
suite short; ``SEQLOCK_STRESS_SCALE=120`` (tools/stress) makes every run 120
times longer.  ``SEQLOCK_STRESS_PIN`` pins stress threads to CPUs:
``apart`` puts readers and writers on different CPUs, ``together`` puts
them all on one; unset leaves placement to the scheduler.
"""
from __future__ import annotations

import os
import threading
import time

#: How long any helper waits for a thread before declaring a deadlock.
JOIN_TIMEOUT = 30.0

# Deadlines of the tests of waits (no test asserts how fast anything is):
#: a wake-up arrives well within this; a waiter's nap (1 s) would not;
WOKEN = 0.5
#: a wait that must not run out;
LONG = 20.0
#: the timeout of waits that failed by sleeping it out.
SHORT = 4.0


class WorkerError(Exception):
    """Raised in the test when a worker thread did not finish in time."""


def run_threads(n, target, *, timeout=JOIN_TIMEOUT):
    """Run ``target(i)`` for i in range(n), each in its own thread.

    The workers start together behind a Barrier.  Returns the targets'
    results in order.  Re-raises the first worker exception (the others are
    attached as notes); raises WorkerError if a worker is still running
    after ``timeout`` seconds.
    """
    barrier = threading.Barrier(n)
    results = [None] * n
    errors = [None] * n

    def worker(i):
        try:
            barrier.wait(timeout)
            results[i] = target(i)
        except BaseException as exc:  # re-raised in the test below
            errors[i] = exc
            barrier.abort()

    threads = [
        threading.Thread(target=worker, args=(i,), name=f"worker-{i}", daemon=True)
        for i in range(n)
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in threads if t.is_alive()]
    raised = [e for e in errors if e is not None]
    # A barrier broken by another worker's failure is a consequence, not a cause.
    causes = [e for e in raised if not isinstance(e, threading.BrokenBarrierError)]
    first = (causes or raised or [None])[0]
    if first is not None:
        for other in raised:
            if other is not first:
                first.add_note(f"another worker raised {other!r}")
        if stuck:
            first.add_note(f"still running: {stuck}")
        raise first
    if stuck:
        raise WorkerError(f"workers did not finish within {timeout} s: {stuck}")
    return results


def run_each(targets, *, timeout=JOIN_TIMEOUT):
    """run_threads() for a list of zero-argument callables."""
    return run_threads(len(targets), lambda i: targets[i](), timeout=timeout)


class Call:
    """``fn(*args)`` running in a daemon thread started at once.

    ``join()`` returns its result or re-raises its exception; a call still
    running after ``timeout`` seconds raises WorkerError instead of
    hanging the test.  ``done()`` tells whether it has finished.
    """

    def __init__(self, fn, *args):
        self._outcome = None
        self._thread = threading.Thread(target=self._run, args=(fn, args), daemon=True)
        self._thread.start()

    def _run(self, fn, args):
        try:
            self._outcome = (True, fn(*args))
        except BaseException as exc:  # re-raised by join()
            self._outcome = (False, exc)

    def done(self):
        return not self._thread.is_alive()

    def join(self, timeout=JOIN_TIMEOUT):
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise WorkerError(f"the call did not return within {timeout} s")
        ok, value = self._outcome
        if not ok:
            raise value
        return value


def start_in_thread(fn, *args):
    """Run ``fn(*args)`` in a daemon thread; return ``(thread, box)``, where
    box gets ``("ok", result, when)`` or ``("raised", exception, when)``
    (``when``: time.monotonic() at the return), for tests that check
    whether, and when, a wait in another thread ended."""
    box = []

    def run():
        try:
            box.append(("ok", fn(*args), time.monotonic()))
        except BaseException as exc:  # reported to the test
            box.append(("raised", exc, time.monotonic()))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def start_daemon(target, *args):
    """Start ``target(*args)`` in a daemon thread; return the thread."""
    t = threading.Thread(target=target, args=args, daemon=True)
    t.start()
    return t


def join_in_time(t, timeout=JOIN_TIMEOUT):
    """Join thread ``t``; fail the test if it is still running after
    ``timeout`` seconds."""
    t.join(timeout)
    assert not t.is_alive(), "thread hung"


def stress_seconds(default):
    """How long a stress run lasts: default times SEQLOCK_STRESS_SCALE."""
    return default * float(os.environ.get("SEQLOCK_STRESS_SCALE", "1"))


def pin(role):
    """Pin the calling thread for a stress run; role is "reader" or "writer"."""
    placement = os.environ.get("SEQLOCK_STRESS_PIN", "")
    if not placement or not hasattr(os, "sched_setaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    if placement == "together" or len(cpus) < 2:
        os.sched_setaffinity(0, {cpus[0]})
    elif placement == "apart":
        half = len(cpus) // 2
        os.sched_setaffinity(0, set(cpus[:half] if role == "writer" else cpus[half:]))
    else:
        raise ValueError(f"SEQLOCK_STRESS_PIN must be 'apart' or 'together', not {placement!r}")


# ---- the watcher thread of wait_async() (seqlock_py._news) ----


def waiter_threads():
    """The process's watcher threads of awaited waits that watch an owner
    now: its waits pending, or none but staying for the next (for
    _news._STAY, 50 ms), not those that linger between owners."""
    return [t for t in threading.enumerate() if t.name == "seqlock_py wait_async"]


def watcher_starts(monkeypatch):
    """A list of the watcher threads started from now on (for counting)."""
    from seqlock_py import _news

    started = []
    real_start = threading.Thread.start

    def start(thread, *args, **kwargs):
        if thread.name.startswith(_news._SERVING):
            started.append(thread)
        return real_start(thread, *args, **kwargs)

    monkeypatch.setattr(threading.Thread, "start", start)
    return started


def no_waiter_thread_left(within=5.0):
    """True once no watcher thread is left (waiting up to within s)."""
    deadline = time.monotonic() + within
    while waiter_threads() and time.monotonic() < deadline:
        time.sleep(0.005)
    return not waiter_threads()


def os_threads():
    """The process's threads, as the kernel counts them."""
    return len(os.listdir("/proc/self/task"))


async def until(condition):
    """Let the event loop run until condition() holds (or LONG passes)."""
    import asyncio

    deadline = time.monotonic() + LONG
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.005)
    assert condition()
