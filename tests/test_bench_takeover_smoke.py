"""benchmarks/bench_takeover.py --quick runs to the end and writes
well-formed JSON (this very build against itself as the "old" one), and
--table prints the tables from it.

No timing is asserted: the numbers depend on the machine and its load.
Only that every kill was classified, every next writer went on writing
(no hang) and found the record consistent.
"""

import math

import pytest

from process_helpers import THIS_BUILD, run_benchmark, run_benchmark_quick

CASES = ["update/contend", "section/contend", "hold/contend", "update/alone"]
STATES = {"free", "beacon", "gap 1", "gap 2", "other"}


@pytest.mark.timeout(120)
def test_bench_takeover_quick_writes_json_and_table(tmp_path):
    out, result, _ = run_benchmark_quick(
        "bench_takeover.py", tmp_path, "--old", THIS_BUILD,
        "--old-label", "this build")
    assert {"others_cpu", "builds", "seed"} <= set(result)
    assert result["cases"] == CASES
    assert [b["side"] for b in result["builds"]] == ["old", "new"]
    assert result["builds"][0]["label"] == "this build"

    for case in CASES:
        for side in ("old", "new"):
            rows = result["rows"][case][side]
            assert len(rows) == result["kills"] == 3
            for row in rows:
                assert row["state"] in STATES
                assert "hang" not in row and "inconsistent" not in row
                assert math.isfinite(row["takeover_ms"])
                assert row["takeover_ms"] >= 0
                assert row["stop_to_kill_us"] > 0
            s = result["summary"][case][side]
            assert s["kills"] == 3
            assert s["hangs"] == s["inconsistent"] == 0
            assert sum(s["classes"].values()) == 3
            assert 0 <= s["slow"] <= 3
            a = s["all"]
            assert a["n"] == 3
            assert 0 <= a["p50_ms"] <= a["p99_ms"] <= a["max_ms"]

    table = run_benchmark("bench_takeover.py", "--table", out)
    assert "| victim's loop | build | kills | free |" in table
    assert "old (this build)" in table
    assert "By state at the kill" in table
