"""The type stubs match the extension (mypy's stubtest) and type-check
ordinary use under mypy --strict."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mypy")

HERE = Path(__file__).resolve().parent

USE = textwrap.dedent(
    """
    from seqlock_py import SeqLock, SeqRecord

    lock = SeqLock(max_retries=4)
    with lock.write(timeout=1.0) as held:
        assert held is lock
    pair: tuple[int, int] = lock.read(lambda a, b: (a, b), 1, b=2)
    seq: int = lock.read_begin()
    again: bool = lock.read_retry(seq)
    taken: bool = lock.acquire_write(blocking=False)

    rec = SeqRecord(x="d", n="q", v="4d")
    rec.update(x=1.0, n=2)
    with rec.write() as w:
        w.x = 2.0
        w.update(n=3)
    snapshot: tuple[object, ...] = rec.read()
    buf = bytearray(rec.nbytes)
    sequence: int = rec.read_into(buf)
    fields: tuple[str, ...] = rec.fields

    version, values = rec.read_versioned()
    changed: bool = rec.wait(version, timeout=0.0)
    for version, values in rec.changes(timeout=0.0):
        pass
    lock_version, result = lock.read_versioned(len, "abc")
    length: int = result
    changed = lock.wait(lock_version, 0)

    async def consume() -> None:
        woken: bool = await rec.wait_async(version, timeout=0.1)
        woken = await lock.wait_async(lock_version)
        async for version2, values2 in rec.changes_async(timeout=0.1):
            pass
    """
)

MISUSE = textwrap.dedent(
    """
    from seqlock_py import SeqLock

    lock = SeqLock()
    lock.read_retry("0")
    """
)


def mypy(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir=/dev/null", *args],
        capture_output=True, text=True, cwd=cwd, timeout=300,
    )


def test_stubs_match_the_runtime_module(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "seqlock_py._seqlock",
         "--allowlist", str(HERE / "stubtest_allowlist.txt")],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_ordinary_use_type_checks_strictly(tmp_path):
    (tmp_path / "use.py").write_text(USE)
    done = mypy("--strict", "use.py", cwd=tmp_path)
    assert done.returncode == 0, done.stdout


def test_stubs_reject_a_wrong_argument_type(tmp_path):
    (tmp_path / "misuse.py").write_text(MISUSE)
    done = mypy("misuse.py", cwd=tmp_path)
    assert done.returncode == 1 and "read_retry" in done.stdout, done.stdout


def test_the_packages_python_modules_type_check_strictly(tmp_path):
    done = mypy("--strict", "-p", "seqlock_py", cwd=tmp_path)
    assert done.returncode == 0, done.stdout
