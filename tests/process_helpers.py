"""Running test code in another process, always with a deadline.

Three ways, for the scenarios that threads cannot show:

- ``in_forked_child(check)``: ``os.fork()`` and run ``check()`` in the
  child, which inherits this process's objects (and their locks);
- ``run_python(code)`` / ``PythonProcess(code)``: a fresh interpreter that
  imports the same seqlock_py build as the tests (for code that may crash
  the interpreter, or must run beside the test);
- the same with ``pid_namespace=True``: the interpreter runs as pid 1 of a
  new PID namespace (``unshare --pid --fork``), so its thread ids mean
  nothing outside it.  Call ``require_pid_namespaces()`` first: it skips
  the test where namespaces are refused (not root, no unshare).

A child that cannot set up its scenario (e.g. the kernel refuses a write
to /proc) exits with ``SKIP_EXIT`` after printing the reason; the helpers
turn that into a skip of the calling test.  Every wait has a deadline: a
child still running at it is killed and the test fails ("hang").
"""
from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
import traceback
import uuid
import warnings
from pathlib import Path

import pytest

import seqlock_py

#: How long a child may run before it counts as hung.
CHILD_TIMEOUT = 30.0

#: Exit status of a child that could not set up its scenario (a skip).
SKIP_EXIT = 77


# ---- forked children ----


def in_forked_child(check, *, timeout=CHILD_TIMEOUT, before_fork=None):
    """Run ``check()`` in a forked child and return ``(exit code, report)``.

    ``before_fork()``, if given, runs immediately before the fork, after
    everything else that could give up the GIL.

    The child exits 0 if check() returns a true value, 1 if it returns a
    false one (its repr is the report), 2 if it raises (the traceback is
    the report).  A child still running after ``timeout`` seconds is
    killed and the calling test fails.
    """
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12+ warns that forking a process with threads may
        # deadlock the child; these tests fork with threads on purpose.
        warnings.simplefilter("ignore", DeprecationWarning)
        if before_fork is not None:
            before_fork()
        pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code, report = 2, "check() did not finish"
        try:
            os.close(read_end)
            result = check()
            code, report = (0, "") if result else (1, f"check() returned {result!r}")
        except BaseException:
            report = traceback.format_exc()
        finally:
            try:
                os.write(write_end, report.encode()[-8000:])  # fits a pipe
            finally:
                os._exit(code)
    os.close(write_end)
    try:
        code = wait_for_pid(pid, timeout)
        return code, _read_all(read_end)
    finally:
        os.close(read_end)


# A child script (argv[1]: a SharedMemory block of fields a, b, total): hold
# a write section, half-written (a set, b and total not yet), from
# the time it prints "ready" until it reads a line on stdin; exit 0 only
# if the section then completed without error.  With argv[2], the
# section is written by a new thread whose id in the namespace is that
# number (chosen by the test so that it names no thread outside).
HOLD_A_SECTION_SCRIPT = """
import os, sys, threading, traceback
from record_helpers import open_shared_record
from process_helpers import run_in_thread_with_id

assert os.getpid() == 1, f"not pid 1 of a new namespace: {os.getpid()}"
rec = open_shared_record(sys.argv[1], a="q", b="q", total="q")
completed = []

def hold():
    try:
        with rec.write() as w:
            w.a = 10  # half a write: a + b != total until the end
            print("ready", threading.get_native_id(), flush=True)
            sys.stdin.readline()
            w.b = 20
            w.total = 30
        completed.append(True)
    except BaseException:
        traceback.print_exc()

if len(sys.argv) > 2:
    run_in_thread_with_id(hold, int(sys.argv[2]))
else:
    hold()
sys.exit(0 if completed else 1)
"""


def next_pid_will_be(pid):
    """In a child script running in its own PID namespace: make the next
    thread or process created there get id ``pid`` (ns_last_pid); exit 77,
    which skips the test, where that is refused."""
    try:
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
    except OSError as exc:
        print("cannot choose the next pid:", exc, flush=True)
        sys.exit(77)


def run_in_thread_with_id(fn, tid):
    """In a child script: run fn() in a new thread whose id (in this PID
    namespace) is tid; see next_pid_will_be()."""
    import threading

    next_pid_will_be(tid)
    thread = threading.Thread(target=fn)
    thread.start()
    thread.join()


def wait_for_pid(pid, timeout):
    """Reap child ``pid``; return its exit code (negative: killed by that
    signal).  Kill it and fail the test if it runs past ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the forked child did not finish within {timeout} s (hang)")
        time.sleep(0.01)


def describe_exit(code):
    """'exit 1', or 'killed by SIGSEGV' for a negative exit code."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"


def _read_all(fd):
    chunks = []
    while select.select([fd], [], [], 0)[0]:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


# ---- fresh interpreters ----


def package_root():
    """The directory whose seqlock_py/ the tests import: the in-place build
    or the installed package, whichever this process uses."""
    return os.path.dirname(os.path.dirname(seqlock_py.__file__))


def python_command(code, *args, pid_namespace=False):
    """argv running ``code`` (with ``args`` as sys.argv[1:]) in a fresh
    interpreter; with pid_namespace, as pid 1 of a new PID namespace
    (killed with it if ``unshare`` is killed)."""
    argv = [sys.executable, "-X", "faulthandler", "-c", code, *map(str, args)]
    if pid_namespace:
        argv = [shutil.which("unshare") or "unshare", "--pid", "--fork", "--kill-child", *argv]
    return argv


def child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [package_root(), str(Path(__file__).resolve().parent)]
        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    return env


class PythonProcess:
    """A fresh interpreter running ``code`` beside the test.

    ``expect(word)`` waits for a line of its stdout starting with word (its
    readiness signal); ``tell(line)`` writes a line to its stdin (its go
    signal); ``finish()`` closes its stdin and waits for it to exit.  Both fail the
    test at their deadline, killing the child.  Use as a context manager:
    leaving the block kills a child still running.
    """

    def __init__(self, code, *args, pid_namespace=False, cwd=None):
        self.argv = python_command(code, *args, pid_namespace=pid_namespace)
        self.proc = subprocess.Popen(
            self.argv,
            bufsize=0,  # unbuffered: select() in expect() sees every line
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(),
            cwd=cwd or "/",  # not a checkout: its seqlock_py/ may lack the build
        )
        self.lines = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if not stream.closed:
                stream.close()

    def tell(self, line):
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def expect(self, word, timeout=CHILD_TIMEOUT):
        """Wait for a stdout line starting with ``word``; return the line.
        A child that exits first, or skips, ends the test accordingly."""
        deadline = time.monotonic() + timeout
        out = self.proc.stdout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._fail(f"no {word!r} line within {timeout} s")
            if select.select([out], [], [], left)[0]:
                line = out.readline().decode(errors="replace")
                if not line:  # EOF: the child exited
                    self.finish()
                    self._fail(f"exited before printing {word!r}")
                self.lines.append(line)
                if line.startswith(word):
                    return line.strip()

    def finish(self, timeout=CHILD_TIMEOUT):
        """Wait for the child to exit; return ``(exit code, stdout+stderr)``.
        A child that skipped its scenario skips the test."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._fail(f"did not exit within {timeout} s (hang)")
        text = "".join(self.lines) + out.decode(errors="replace") + err.decode(errors="replace")
        if self.proc.returncode == SKIP_EXIT:
            pytest.skip(f"the child could not set up the scenario: {text.strip()}")
        return self.proc.returncode, text

    def _fail(self, why):
        self.kill()
        pytest.fail(f"child process: {why}\n{''.join(self.lines)}")


def run_python(code, *args, timeout=CHILD_TIMEOUT, pid_namespace=False):
    """Run ``code`` in a fresh interpreter to the end; return ``(exit code,
    output)``.  Fails the test if it runs past ``timeout``; skips it if the
    child skipped its scenario."""
    with PythonProcess(code, *args, pid_namespace=pid_namespace) as child:
        return child.finish(timeout)


# ---- PID namespaces ----


def require_pid_namespaces():
    """Skip the calling test unless this process may create PID namespaces
    (checked by doing it: root, an unshare binary, a kernel that allows it)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs the unshare command (util-linux)")
    try:
        probe = subprocess.run(
            ["unshare", "--pid", "--fork", "--kill-child", "true"],
            capture_output=True, text=True, timeout=CHILD_TIMEOUT,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot create a PID namespace: {exc}")
    if probe.returncode != 0:
        pytest.skip(f"cannot create a PID namespace (needs root): {probe.stderr.strip()}")


def free_pid_number():
    """A pid number no process or thread uses in this PID namespace now,
    high enough that this namespace will not reach it for a long while."""
    with open("/proc/sys/kernel/pid_max") as f:
        pid_max = int(f.read())
    for n in range(pid_max - 100, 300, -1):
        if not os.path.exists(f"/proc/{n}"):
            return n
    pytest.skip("no free pid number")


def run_isolated(code, *args, env=None, timeout=CHILD_TIMEOUT):
    """Run ``code`` in a fresh interpreter (cwd /) with extra environment
    ``env``; return ``(exit code, output)``, or ``(None, output)`` if it was
    still running at ``timeout`` (then it is killed).  For children whose
    hang is the failure to report (assert_clean_exit() names it)."""
    full_env = child_env()
    full_env.update(env or {})
    try:
        proc = subprocess.run(
            python_command(code, *args), env=full_env, cwd="/",
            capture_output=True, text=True, timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        parts = [p.decode(errors="replace") if isinstance(p, bytes) else p
                 for p in (exc.stdout, exc.stderr) if p]
        return None, "".join(parts)
    return proc.returncode, proc.stdout + proc.stderr


def run_plain(code, *args, faulthandler=False, timeout=CHILD_TIMEOUT):
    """Run ``code`` in a fresh interpreter WITHOUT -X faulthandler (unless
    asked): ``(exit code, output)``; a child still running at ``timeout``
    is killed and the test fails."""
    argv = [sys.executable] + (["-X", "faulthandler"] if faulthandler else []) + ["-c", code, *map(str, args)]
    try:
        proc = subprocess.run(argv, env=child_env(), cwd="/", capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the child was still running after {timeout} s (hang): {exc.stdout!r} {exc.stderr!r}")
    return proc.returncode, proc.stdout + proc.stderr


def assert_clean_exit(outcome, what):
    """``outcome`` is run_python()'s or run_isolated()'s (exit code,
    output): fail unless the child exited 0 after printing a line that
    starts with "ok" (an exit code None: it was still running at its
    deadline)."""
    code, output = outcome
    assert code is not None, f"{what}: still running at its deadline (hang)\n{output}"
    lines = [line.strip() for line in output.splitlines()]
    assert code == 0 and any(line.startswith("ok") for line in lines), (
        f"{what}: {describe_exit(code)}\n{output[-3000:]}"
    )
    return output


# ---- the benchmarks' smoke tests ----


#: The folder holding the seqlock_py build under test (a benchmark's
#: --old / --baseline build: this build against itself).
THIS_BUILD = Path(seqlock_py.__file__).resolve().parents[1]


def run_benchmark(script, *args, timeout=100):
    """Run benchmarks/<script> with args in a fresh interpreter (-P: the
    installed build); return its stdout, failing the test on a nonzero
    exit."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / script
    proc = subprocess.run([sys.executable, "-P", str(path), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def run_benchmark_quick(script, tmp_path, *args, timeout=100):
    """run_benchmark(script, "--quick", "--json" <a file in tmp_path>,
    *args); return (that file's path, the result read back, stdout).  The
    result must start as every benchmark's does (benchmarks/harness.py's
    result_head() and result_tail())."""
    import json

    out = tmp_path / (Path(script).stem + ".json")
    stdout = run_benchmark(script, "--quick", "--json", out, *args,
                           timeout=timeout)
    result = json.loads(out.read_text())
    assert {"interpreter", "machine", "load_before",
            "load_after"} <= set(result)
    return out, result, stdout


# ---- named shared-memory blocks ----

def shm_block_fixture(prefix):
    """A fixture giving each test a fresh name for a named shared-memory
    block, whose file in /dev/shm is removed after the test if still there."""
    import pytest

    @pytest.fixture
    def name():
        block = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        yield block
        path = os.path.join("/dev/shm", block)
        if os.path.exists(path):
            os.unlink(path)
    return name


def shm_exists(name):
    """Whether the named shared-memory block's file exists."""
    return os.path.exists(os.path.join("/dev/shm", name))
