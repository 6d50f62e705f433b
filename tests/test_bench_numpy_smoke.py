"""benchmarks/bench_numpy.py --quick runs to the end and writes well-formed
JSON with every part's contenders.

No timing is asserted: the numbers depend on the machine and its load.
"""

import math

import pytest

from process_helpers import run_benchmark_quick

pytest.importorskip("numpy")


@pytest.mark.timeout(120)
def test_bench_numpy_quick_writes_json(tmp_path):
    _, result, stdout = run_benchmark_quick("bench_numpy.py", tmp_path)
    contenders = {
        "copy": {"np.copyto under threading.Lock", "rec.update(state=ndarray)",
                 "w.state = ndarray in rec.write()"},
        "writer": {"SharedMemory + multiprocessing.Lock + pack_into",
                   "rec.update(v=ndarray)", "rec.update(v=list)"},
        "field": {"rec.read_into(whole record)", "rec.read_into(out, field='state')"},
        "small": {"empty C call", "rec.update() of 5 fields"},
    }
    for part, names in contenders.items():
        assert set(result[part]) == names
        for cell in result[part].values():
            assert cell["ns"] > 0 and math.isfinite(cell["ratio"])
    assert all(c["writes_per_s"] > 0 for c in result["writer"].values())
    assert "## small" in stdout
