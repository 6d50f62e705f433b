"""python -m seqlock_py runs in each mode and reports consistent snapshots."""

import subprocess
import sys

import pytest


def run_demo(*args):
    return subprocess.run(
        [sys.executable, "-P", "-m", "seqlock_py", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )


@pytest.mark.parametrize("mode", [[], ["--record"]], ids=["seqlock", "record"])
def test_demo_reports_only_consistent_snapshots(mode):
    done = run_demo("--duration", "0.3", "--readers", "2", *mode)
    assert done.returncode == 0, done.stderr
    assert "torn snapshots:                      0" in done.stdout
    assert "snapshot was consistent" in done.stdout


def test_demo_shows_readers_untouched_by_a_dead_writer_process():
    done = run_demo("--dead-writer")
    assert done.returncode == 0, done.stderr
    assert "readers are untouched" in done.stdout and "recoveries=0)" in done.stdout
    assert "recoveries=1, locked=False" in done.stdout


def test_demo_rejects_a_bad_duration():
    done = run_demo("--duration", "0")
    assert done.returncode == 2
    assert "--duration" in done.stderr
