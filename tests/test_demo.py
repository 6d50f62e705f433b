"""python -m seqlock_py runs in each mode and reports consistent snapshots."""

import subprocess
from pathlib import Path
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


def test_demo_from_a_source_checkout_says_how_to_run_it(tmp_path):
    """python -m seqlock_py in a checkout imports its unbuilt source folder:
    the error names the folder and the two ways out, not a bare
    ModuleNotFoundError ("-S": no site-packages, as for a user whose
    installed seqlock_py sits behind the checkout on sys.path)."""
    import seqlock_py

    package = tmp_path / "seqlock_py"
    package.mkdir()
    for source in ("__init__.py", "__main__.py", "demo.py"):
        (package / source).write_text(
            (Path(seqlock_py.__file__).parent / source).read_text())
    (tmp_path / "setup.py").write_text("")
    done = subprocess.run([sys.executable, "-S", "-m", "seqlock_py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: seqlock_py was imported from "), last
    assert str(package) in last and "python -P -m seqlock_py" in last
    assert "pip install -e ." in last
