"""benchmarks/bench_record.py runs to the end and prints its ratios.

No timing is asserted: the numbers depend on the machine and its load.
"""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_record.py"


@pytest.mark.timeout(60)
def test_bench_record_runs_and_prints_ratios(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-P", str(BENCH), "--seconds", "0.05",
         "--repeats", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=50,
    )
    assert proc.returncode == 0, proc.stderr
    ratio_lines = [line for line in proc.stdout.splitlines()
                   if line.startswith("ratio ")]
    for name in ("record_scaling/local_scaling", "read/Lock (2 threads)",
                 "read/copy-on-write (2 threads)", "read_into/locked() time",
                 "read/mp.Lock (2 processes)"):
        assert any(name in line for line in ratio_lines), name
    assert out.exists()
