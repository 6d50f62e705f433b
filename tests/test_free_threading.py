"""On a free-threaded build, importing seqlock_py keeps the GIL disabled,
and reading writes no reference count that every reader thread shares.

The import checks run in a fresh interpreter, with PYTHON_GIL unset and no
``-X gil`` option, from a directory where only the installed package is
importable: an extension that did not declare Py_mod_gil would re-enable
the GIL on import and emit a RuntimeWarning saying so.
"""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import threading
import typing

import pytest

pytestmark = pytest.mark.skipif(
    not sysconfig.get_config_var("Py_GIL_DISABLED"),
    reason="needs a free-threaded (3.13t) interpreter",
)


def run_fresh(code, *options, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    return subprocess.run(
        [sys.executable, *options, "-c", code],
        cwd=tmp_path,  # not the checkout: its seqlock_py/ has no extension
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_interpreter_starts_with_the_gil_disabled(tmp_path):
    proc = run_fresh("import sys; print(sys._is_gil_enabled())", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_importing_seqlock_py_leaves_the_gil_disabled(tmp_path):
    code = (
        "import sys, seqlock_py\n"
        "lock = seqlock_py.SeqLock()\n"
        "with lock: pass\n"
        "print(sys._is_gil_enabled(), lock.read(lambda: lock.sequence))\n"
    )
    proc = run_fresh(code, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False 2"


def test_importing_seqlock_py_emits_no_gil_warning_under_w_error(tmp_path):
    proc = run_fresh(
        "import sys, seqlock_py; print(sys._is_gil_enabled())",
        "-W", "error", tmp_path=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "GIL" not in proc.stderr and "RuntimeWarning" not in proc.stderr
    assert proc.stdout.strip() == "False"


@pytest.mark.skipif(
    bool(os.environ.get("PYTHON_GIL") or sys._xoptions.get("gil")),
    reason="the GIL was configured explicitly for this run",
)
def test_this_test_process_runs_with_the_gil_disabled():
    import seqlock_py  # noqa: F401  (already imported by conftest)

    assert sys._is_gil_enabled() is False


# ---- what a read writes: nothing every reader thread shares ----


class Pose(typing.NamedTuple):
    x: float
    y: float


def _keyword_record():
    from seqlock_py import SeqRecord

    return SeqRecord(x="d", y="d").read


def _typed_record():
    from seqlock_py import SeqRecord

    return SeqRecord(Pose).read


def _ring_entry():
    from seqlock_py import SeqRing

    ring = SeqRing(4, x="d", y="d")
    reader = ring.reader()

    def read():
        ring.append(x=1.0)
        return reader.poll()[0][1]

    return read


@pytest.mark.parametrize(
    "reads", [_keyword_record, _typed_record, _ring_entry], ids=["keywords", "NamedTuple", "ring entry"]
)
def test_a_snapshots_class_count_stands_still_across_reads_in_another_thread(reads):
    # Each snapshot holds its class; if holding it wrote the class's
    # reference count (one word shared by every reader thread), readers in
    # two threads would do no more reads than one.  Counted, not timed.
    read = reads()
    counts = []

    def reader():
        kept = [read() for _ in range(1000)]
        cls = type(kept[0])
        before = sys.getrefcount(cls)
        kept += [read() for _ in range(10000)]
        counts.append((before, sys.getrefcount(cls), len(kept)))

    t = threading.Thread(target=reader)
    t.start()
    t.join()
    (before, after, held), = counts
    assert held == 11000 and after == before, (
        f"{held} snapshots held moved their class's count from {before} to {after}"
    )
