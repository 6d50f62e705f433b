"""Shared helpers for the seqlock_py test suite.

Thread tests follow one pattern (see STYLE.md, "Tests as a specification"):
workers start together behind a ``threading.Barrier``, a worker's exception
is re-raised in the test on join, and a worker that does not finish in time
fails the test instead of hanging it.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path

# ``python -m pytest`` run from the repository root puts the root first on
# sys.path, where the source package ``seqlock_py/`` (without its compiled
# extension) would shadow the installed build.  Test the installed build:
# drop the root from sys.path unless an in-place build sits in the checkout.
_ROOT = Path(__file__).resolve().parent.parent
if not any((_ROOT / "seqlock_py").glob("_seqlock*.so")):
    sys.path[:] = [
        p for p in sys.path if Path(p or os.curdir).resolve() != _ROOT
    ]
    for name in [m for m in sys.modules if m.split(".")[0] == "seqlock_py"]:
        del sys.modules[name]

import pytest  # noqa: E402

import seqlock_py  # noqa: E402

from workers import JOIN_TIMEOUT, WorkerError, run_threads  # noqa: E402,F401


@pytest.fixture(autouse=True)
def python_handles_ctrl_c():
    """Every test runs with Python's own SIGINT handler, and leaves it so.

    A test run may inherit SIGINT ignored (POSIX shells ignore it in
    commands they start in the background, and Python then keeps it
    ignored): the Ctrl-C tests would wait for a KeyboardInterrupt that
    never comes.  A test that leaves SIGINT changed fails."""
    import signal

    inherited = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
        left = signal.getsignal(signal.SIGINT)
        assert left is signal.default_int_handler, f"the test left SIGINT's handler {left!r}"
    finally:
        signal.signal(signal.SIGINT, inherited)


@contextlib.contextmanager
def held_by_another_thread(lock, *, timeout=JOIN_TIMEOUT, section=None):
    """Hold ``lock``'s write lock in a helper thread for the block's duration.

    The helper enters ``section()`` (default: ``lock`` itself, a SeqLock's
    ``with lock:``; a SeqRecord passes ``section=rec.write``).  Yields once
    the helper holds it; on exit the helper releases it and is joined, and
    any exception it raised is re-raised.
    """
    taken = threading.Event()
    release = threading.Event()
    error = []

    def holder():
        try:
            with (section() if section else lock):
                taken.set()
                if not release.wait(timeout):
                    raise WorkerError("holder was never told to release")
        except BaseException as exc:
            error.append(exc)
            taken.set()

    t = threading.Thread(target=holder, name="holder", daemon=True)
    t.start()
    try:
        assert taken.wait(timeout), "holder never took the write lock"
        if error:
            raise error[0]
        yield t
    finally:
        release.set()
        t.join(timeout)
    if t.is_alive():
        raise WorkerError("holder thread did not finish")
    if error:
        raise error[0]


def in_thread(fn, *args, timeout=JOIN_TIMEOUT, **kwargs):
    """Call fn(*args, **kwargs) in a fresh thread; return its result or re-raise."""
    return run_threads(1, lambda _: fn(*args, **kwargs), timeout=timeout)[0]


@pytest.fixture
def lock():
    return seqlock_py.SeqLock()


def report(record_property, **counts):
    """Report counts both in the JUnit properties and on stdout (-s or -rP)."""
    for key, value in counts.items():
        record_property(key, value)
    print(" ".join(f"{k}={v}" for k, v in counts.items()))


def run_in_fresh_interpreter(module, function, *, timeout=30, tmp_path):
    """Call ``module.function()`` (a module in tests/) in a new interpreter.

    For scenarios whose failure mode is a hang that no in-process timeout
    can break: a stop-the-world pause that never completes also stops the
    pytest-timeout signal handler.  Fails the calling test on a non-zero
    exit or if the child is still running after ``timeout`` seconds.
    """
    import subprocess

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parent)]
        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    code = f"import {module}; {module}.{function}(); print('ok')"
    try:
        proc = subprocess.run(
            [sys.executable, "-X", "faulthandler", "-W", "error", "-c", code],
            cwd=tmp_path,  # not the checkout: its seqlock_py/ has no extension
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"{module}.{function}() did not finish within {timeout} s "
            f"(deadlock?)\n{exc.stderr or ''}"
        )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (
        f"{module}.{function}() failed (exit {proc.returncode}):\n{proc.stderr}"
    )


# ---- pytest-run-parallel ----------------------------------------------------

# Under --parallel-threads (pytest-run-parallel, on the free-threaded
# build) every test runs in several threads at once, sharing its fixtures'
# objects: a test that counts a shared lock's or record's exact sequence
# cannot hold there, so it runs in one thread.  Tests that make their own
# objects, or check only invariants, run in all of them.
SHARED_OBJECT_FIXTURES = {"lock", "rec", "subject", "shared_record", "shm"}


def pytest_collection_modifyitems(config, items):
    if int(config.getoption("parallel_threads", 1) or 1) <= 1:
        return
    for item in items:
        shared = SHARED_OBJECT_FIXTURES & set(getattr(item, "fixturenames", ()))
        if shared and item.get_closest_marker("thread_unsafe") is None:
            item.add_marker(pytest.mark.thread_unsafe(
                reason=f"checks exact counts of a shared fixture object ({', '.join(sorted(shared))})"))
