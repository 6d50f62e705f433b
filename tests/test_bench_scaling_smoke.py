"""benchmarks/bench_scaling.py --quick runs to the end and writes
well-formed JSON and a table: the local-work reference and every idiom
on both record kinds, each with its 1- and 2-thread rates and its ratio
to the reference; with --writer-hz, a writer that wrote.

No timing is asserted: the numbers depend on the machine and its load.
"""

import math

import pytest

from process_helpers import run_benchmark_quick

IDIOMS = ["read()", "read_into(buf)", "reader_into()", "snapshot attrs", "ring poll()", "ring poll_one()",
          "unpack, shared", "unpack, own"]
RECORDS = ["keywords", "NamedTuple"]


@pytest.mark.timeout(120)
def test_bench_scaling_quick_reports_every_idiom_on_both_record_kinds(tmp_path):
    _, result, stdout = run_benchmark_quick("bench_scaling.py", tmp_path, "--writer-hz", "200")
    local = result["local"]
    assert local["one"] > 0 and local["two"] > 0
    assert math.isfinite(local["scaling"]) and local["scaling"] > 0
    assert [(c["idiom"], c["record"]) for c in result["cases"]] == [
        (i, r) for i in IDIOMS for r in RECORDS]
    for c in result["cases"]:
        assert len(c["rounds"]) == 1
        assert all(r[k] > 0 for r in c["rounds"] for k in ("local_one", "local_two"))
        assert c["one"] > 0 and c["two"] > 0
        assert math.isfinite(c["vs_local"]) and c["vs_local"] > 0
        lo, hi = c["vs_local_spread"]
        assert lo <= c["vs_local"] <= hi
    assert result["writes"] > 0
    assert "| local work | - |" in stdout
    for i in IDIOMS:
        for r in RECORDS:
            assert f"| {i} | {r} |" in stdout
    assert result["table"] in stdout
