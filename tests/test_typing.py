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
    into = rec.reader_into(buf)
    sequence = into()
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


TYPED = textwrap.dedent(
    """
    from typing import Annotated, NamedTuple
    from seqlock_py import SeqRecord, Snapshot

    class Pose(NamedTuple):
        x: float
        n: int
        v: Annotated[tuple[float, ...], "4d"]

    rec = SeqRecord(Pose)
    reveal_type(rec.read())
    reveal_type(rec.read().x)
    reveal_type(rec.read_versioned())
    for _, pose in rec.changes(timeout=0):
        reveal_type(pose)
    plain = SeqRecord(x="d", n="q")
    reveal_type(plain.read())
    reveal_type(plain.read().x)
    buf = bytearray(SeqRecord.buffer_size(Pose))
    reveal_type(SeqRecord.create(buf, Pose, overwrite=True).read())
    reveal_type(SeqRecord.attach(buf, Pose).read())
    reveal_type(SeqRecord.attach(buf).read())

    def annotated(r: SeqRecord[Pose], s: SeqRecord) -> tuple[float, Snapshot]:
        return r.read().x, s.read()

    async def consume() -> None:
        async for _, later in rec.changes_async(timeout=0.1):
            reveal_type(later)
    """
)

# (as mypy 1.x and 2.x print them once "builtins." is dropped)
POSE = "tuple[float, int, tuple[float, ...], fallback=typed.Pose]"
REVEALED = [
    POSE,
    "float",
    f"tuple[int, {POSE}]",
    POSE,
    "seqlock_py._snapshot.Snapshot",
    "Any",
    POSE,
    POSE,
    "seqlock_py._snapshot.Snapshot",
    POSE,
]

TYPED_MISUSE = textwrap.dedent(
    """
    from typing import NamedTuple
    from seqlock_py import SeqRecord

    class Pose(NamedTuple):
        x: float

    rec = SeqRecord(Pose)
    rec.read().y
    wrong: Pose = SeqRecord(x="d").read()
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


def test_a_typed_record_reveals_the_declared_class(tmp_path):
    (tmp_path / "typed.py").write_text(TYPED)
    done = mypy("--strict", "typed.py", cwd=tmp_path)
    revealed = [line.split('Revealed type is "', 1)[1].rstrip('"').replace("builtins.", "")
                for line in done.stdout.splitlines() if "Revealed type is" in line]
    assert revealed == REVEALED, done.stdout
    assert "error" not in done.stdout, done.stdout


def test_a_typed_records_snapshot_has_only_the_declared_fields(tmp_path):
    (tmp_path / "typed_misuse.py").write_text(TYPED_MISUSE)
    done = mypy("--strict", "typed_misuse.py", cwd=tmp_path)
    assert '"Pose" has no attribute "y"' in done.stdout, done.stdout
    assert "Incompatible types in assignment" in done.stdout, done.stdout
