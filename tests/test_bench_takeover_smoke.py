"""benchmarks/bench_takeover.py --quick runs to the end and writes
well-formed JSON (this very build against itself as the "old" one), and
--table prints the tables from it.

No timing is asserted: the numbers depend on the machine and its load.
Only that every kill was classified, every next writer went on writing
(no hang) and found the record consistent.
"""

import json
import math
from pathlib import Path

import pytest

from process_helpers import run_benchmark

import seqlock_py

CASES = ["update/contend", "section/contend", "hold/contend", "update/alone"]
STATES = {"free", "beacon", "gap 1", "gap 2", "other"}


def run(*args):
    return run_benchmark("bench_takeover.py", *args)


@pytest.mark.timeout(120)
def test_bench_takeover_quick_writes_json_and_table(tmp_path):
    out = tmp_path / "takeover.json"
    build = Path(seqlock_py.__file__).resolve().parents[1]
    run("--quick", "--json", str(out), "--old", str(build),
        "--old-label", "this build")
    result = json.loads(out.read_text())
    assert {"interpreter", "machine", "load_before", "load_after",
            "others_cpu", "builds", "seed"} <= set(result)
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

    table = run("--table", str(out))
    assert "| victim's loop | build | kills | free |" in table
    assert "old (this build)" in table
    assert "By state at the kill" in table
