"""tools/callgrind-budget runs to the end under valgrind and prints a row
for each call, the passed/failed line tools/test counts, and its --json
result (small N: the figures are not checked, only their shape).

Skipped where valgrind is not installed.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "callgrind-budget"
CALLS = ["empty loop", "empty call", "read_into", "reader_into", "read", "read (NamedTuple)",
         "update", "append", "poll", "poll_one"]


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
@pytest.mark.skipif("asan" in os.environ.get("LD_PRELOAD", ""),
                    reason="valgrind cannot run a process with AddressSanitizer preloaded")
@pytest.mark.timeout(600)
def test_callgrind_budget_prints_a_row_for_each_call(tmp_path):
    out = tmp_path / "callgrind.json"
    proc = subprocess.run([sys.executable, "-P", str(TOOL), "--n", "200", "--json", str(out)],
                          capture_output=True, text=True, timeout=590)
    # Exit status 1 means over a ceiling: with N this small the per-call
    # figures carry the start-up's noise, so only the shape is checked.
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    for call in CALLS:
        assert f"\n| {call} | " in proc.stdout, call
    assert proc.stdout.rstrip().splitlines()[-1].endswith(" failed, 0 skipped")
    result = json.loads(out.read_text())
    assert list(result["calls"]) == CALLS
    for call, row in result["calls"].items():
        assert row["iteration"] > 0 and row["status"], call
