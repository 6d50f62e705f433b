"""benchmarks/bench_shared_reads.py --quick runs to the end and writes
well-formed JSON and its tables: every case (small and large record,
flat-out and 1 kHz writer, 1 and 2 reader processes) for each of
seqlock_py's readers, each reader process having read; safe-shm's rows and
the headline ratios where safe-shm is installed, its reason printed where
it is not.

No timing is asserted: the numbers depend on the machine and its load.
"""

import importlib.util
import math

import pytest

from process_helpers import run_benchmark_quick

SEQ_READERS = ["seqlock_py read_into(buf)", "seqlock_py reader_into(buf)",
               "seqlock_py read()"]
LOAD = "safe-shm load()"
CASES = [(rec, w, n) for rec in ("small", "large") for w in ("flat out", "1 kHz")
         for n in (1, 2)]


@pytest.mark.timeout(180)
def test_bench_shared_reads_quick_reports_every_case(tmp_path):
    _, result, stdout = run_benchmark_quick("bench_shared_reads.py", tmp_path,
                                            timeout=170)
    peer = importlib.util.find_spec("safe_shm_py") is not None
    readers = SEQ_READERS + ([LOAD] if peer else [])
    assert sorted((c["record"], c["writer"], c["readers"], c["reader"])
                  for c in result["cells"]) == sorted(
        (*case, r) for case in CASES for r in readers)
    for c in result["cells"]:
        (run,) = c["rounds"]
        assert len(run["readers"]) == c["readers"]
        assert all(r["reads"] > 0 and r["cpu_s"] > 0 for r in run["readers"])
        assert c["per_s"] > 0 and c["cpu_ns"] > 0 and c["writer_per_s"] > 0
        if c["reader"] != LOAD:
            assert math.isfinite(c["retries_per_read"]) and c["retries_per_read"] >= 0
            assert c["fallbacks"] >= 0
        assert ("vs_load" in c) == peer

    assert len(result["flat_vs_paced"]) == 4 * len(readers)
    assert all(math.isfinite(f["ratio"]) and f["ratio"] > 0
               for f in result["flat_vs_paced"])
    if peer:
        assert not result["skipped"]
        assert [(h["record"], h["writer"], h["readers"])
                for h in result["headline"]] == CASES
        for h in result["headline"]:
            lo, hi = h["spread"]
            assert lo <= h["ratio"] <= hi and h["ratio"] > 0
            assert (h["goal"] is not None) == (h["writer"] == "flat out")
        assert "| small | flat out | 1 |" in stdout
    else:
        assert result["headline"] == []
        assert "safe-shm: skipped" in stdout and result["skipped"]["safe-shm"]
    assert result["table"] in stdout
