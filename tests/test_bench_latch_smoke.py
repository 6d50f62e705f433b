"""benchmarks/bench_latch.py --quick runs to the end and writes well-formed
JSON; with matplotlib installed, --plot draws reader_latency.png from it.

No timing is asserted: the numbers depend on the machine and its load.
"""

import math

import pytest

from process_helpers import run_benchmark, run_benchmark_quick


@pytest.mark.timeout(120)
def test_bench_latch_quick_writes_json_and_plots(tmp_path):
    out, result, _ = run_benchmark_quick("bench_latch.py", tmp_path)
    cells = {(c["placement"], c["contender"], c["hold_ms"]): c
             for c in result["latency"]}
    names = {"thread": ["SeqRecord.read()", "SeqLock.read(fn), dict",
                        "threading.Lock"],
             "process": ["SeqRecord.read()", "multiprocessing.Lock"]}
    for placement, contenders in names.items():
        for name in contenders:
            for hold in (0.1, 1.0, 10.0):
                cell = cells.pop((placement, name, hold))
                assert cell["reads"] > 0 and len(cell["rounds"]) == 1
                assert 0 < cell["p50_us"] <= cell["p99_us"] <= cell["max_us"]
                assert cell["sections"] > 0
    assert not cells
    assert set(result["latency_na"]) == {"SeqLock.read(fn), dict",
                                         "threading.Lock"}

    ratios = result["cost"]["ratio_to_locked"]
    assert {"rec.read()", "rec.read_into(buf)"} <= set(ratios)
    assert all(math.isfinite(r["median"]) and r["median"] > 0
               for r in ratios.values())

    write = result["write"]
    assert {(e["kind"], e["floats"]) for e in write["ns"]} == {
        (k, s) for k in write["kinds"] for s in (1, 8, 64, 512, 4096)}
    assert set(write["slope"]) == set(write["kinds"])

    pytest.importorskip("matplotlib")
    table = run_benchmark("bench_latch.py", "--plot", out,
                          "--outdir", tmp_path)
    assert (tmp_path / "reader_latency.png").stat().st_size > 0
    assert "| SeqRecord.read() | process |" in table
    assert "n/a (threads only)" in table
