"""benchmarks/bench_ring.py --quick runs to the end and writes well-formed
JSON: every part's contenders, each reader of the peers and bound parts
accounting for every entry (delivered or missed), a bounded reader never
given more than its max_entries a poll, a peer that is not installed
skipped with its reason, and the wake-up samples of both waiters.

No timing is asserted: the numbers depend on the machine and its load.
"""

import math

import pytest

from process_helpers import run_benchmark_quick

pytest.importorskip("numpy")

CONTENDERS = ("seqlock_py SeqRing", "zerochannel", "safe-shm")


@pytest.mark.timeout(180)
def test_bench_ring_quick_writes_json(tmp_path):
    _, result, stdout = run_benchmark_quick("bench_ring.py", tmp_path, timeout=170)
    assert set(result["append"]) == {
        "rec.update() of 5 fields", "ring.append() of 5 fields",
        "shared memory: rec.update()", "shared memory: ring.append()"}
    for cell in result["append"].values():
        assert cell["ns"] > 0 and math.isfinite(cell["rate_vs_update"])
    assert set(result["entry"]) == {
        "rec.read_into(out)", "rec.read()", "reader.poll() of 1000, per entry",
        "reader.poll() of 1 entry", "ring.read_last(1000, out=...), per row"}
    for cell in result["entry"].values():
        assert cell["ns"] > 0 and math.isfinite(cell["ratio"])

    peers = result["peers"]
    ran = {c["contender"] for c in peers["cells"]}
    assert ran | set(peers["skipped"]) == set(CONTENDERS)
    assert "seqlock_py SeqRing" in ran and not ran & set(peers["skipped"])
    for name, why in peers["skipped"].items():
        assert why and f"{name}: skipped" in stdout
    for cell in peers["cells"]:
        assert cell["accounted"]
        for row in cell["rounds"]:
            assert len(row["readers"]) == 2
            for r in row["readers"]:
                assert r["delivered"] > 0
                assert r["delivered"] + r["missed"] == row["appended"]

    bound = result["bound"]["cells"]
    assert [c["max_entries"] for c in bound] == [None, 1024, 256, 64, 16]
    for cell in bound:
        assert cell["accounted"]
        for row in cell["rounds"]:
            assert len(row["readers"]) == 2
            for r in row["readers"]:
                assert r["delivered"] + r["missed"] == row["appended"]
                assert 0 < r["polls"] and r["delivered"] <= r["polls"] * (cell["max_entries"] or 4096)
    assert "## bound" in stdout

    wake = result["wake"]["cells"]
    assert set(wake) == {"rec.wait(seq), rec.update()", "reader.wait(), ring.append()"}
    for cell in wake.values():
        assert cell["timeouts"] == 0
        assert 0 < cell["samples"] + cell["skipped"] <= 20
    assert "## wake" in stdout
