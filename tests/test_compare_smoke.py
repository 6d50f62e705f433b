"""benchmarks/compare.py --quick runs to the end and writes its JSON; with
matplotlib installed, --plot draws both PNGs from it.

No timing is asserted: the numbers depend on the machine and its load.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

COMPARE = Path(__file__).resolve().parent.parent / "benchmarks" / "compare.py"


@pytest.mark.timeout(120)
def test_compare_quick_writes_json_and_plots(tmp_path):
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, "-P", str(COMPARE), "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=100,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    ran = set(result["contenders"])
    assert {"SeqLock.read(fn)", "SeqRecord.read()", "SeqRecord.read_into()",
            "threading.Lock", "copy-on-write"} <= ran
    # every contender is either measured or listed as skipped
    assert len(ran) + len(result["skipped"]) == 11
    for entry in result["results"]:
        assert entry["reads_per_s"]["median"] > 0
        assert "ratio_to_lock" in entry and "write_latency_p99_us" in entry
    assert "SeqRecord.read()" in proc.stdout

    pytest.importorskip("matplotlib")
    proc = subprocess.run(
        [sys.executable, "-P", str(COMPARE), "--plot", str(out),
         "--outdir", str(tmp_path)],
        capture_output=True, text=True, timeout=100,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "throughput.png").stat().st_size > 0
    assert (tmp_path / "writer_latency.png").stat().st_size > 0
    assert "| SeqRecord.read() |" in proc.stdout
