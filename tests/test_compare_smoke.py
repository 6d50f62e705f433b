"""benchmarks/compare.py --quick runs every part to the end and writes its
JSON; --idioms runs the idiom contenders alone; with matplotlib installed,
--plot draws the PNGs and prints the README tables from it.

No timing is asserted: the numbers depend on the machine and its load.
"""

import json
import sys
from pathlib import Path

import pytest

from process_helpers import run_benchmark, run_benchmark_quick

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import compare  # noqa: E402


@pytest.mark.timeout(180)
def test_compare_quick_writes_json_and_plots(tmp_path):
    out, result, stdout = run_benchmark_quick("compare.py", tmp_path,
                                              timeout=150)
    assert result["parts"] == ["threads", "single", "procs"]
    ran = set(result["contenders"])
    assert {"SeqLock.read(fn)", compare.READ_BOUND, compare.INTO_BOUND,
            "threading.Lock", "copy-on-write"} <= ran
    assert set(compare.IDIOMS) <= ran
    assert result["idioms"] == compare.IDIOMS
    # every contender is either measured or listed as skipped
    assert len(ran) + len(result["skipped"]) == len(compare.CONTENDERS)
    for entry in result["results"]:
        assert entry["reads_per_s"]["median"] > 0
        assert "ratio_to_lock" in entry and "write_latency_p99_us" in entry
        has_ref = compare.CONTENDERS[entry["contender"]]["ref"] is not None
        assert ("ratio_to_bound" in entry) == has_ref
    assert set(result["single"]["ns"]) == {
        "rec.locked()", "callable(buf)", "rec.get('nope')",
        "rec.read_into(bytearray)", "rec.read_into(array('d'))",
        "fresh.read_into(bytearray)", "rec.read()"}
    assert set(result["procs"]["reads_per_s"]) == set(compare.PROC_CONTENDERS)
    assert set(compare.TARGETS) <= set(result["ratios"])
    assert len(result["load_rounds"]) == result["repeats"]
    assert compare.READ_BOUND in stdout
    for name in compare.TARGETS:
        assert any(line.startswith(f"ratio {name}")
                   for line in stdout.splitlines()), name

    pytest.importorskip("matplotlib")
    tables = run_benchmark("compare.py", "--plot", out, "--outdir", tmp_path,
                           timeout=150)
    for png in ("throughput.png", "writer_latency.png", "idioms.png"):
        assert (tmp_path / png).stat().st_size > 0
    assert f"| {compare.READ_BOUND} |" in tables
    assert "| SeqRecord.read(): global rec.read() |" in tables
    assert "| `rec.read_into(bytearray)` |" in tables
    assert "| `multiprocessing.Lock` |" in tables
    assert "| read / threading.Lock (2 threads) | >= 4 |" in tables


def test_contender_names_can_be_listed_on_the_command_line():
    # --contenders takes a comma-separated list
    assert not [n for n in compare.CONTENDERS if "," in n]


@pytest.mark.timeout(120)
def test_compare_idioms_alone(tmp_path):
    _, result, _ = run_benchmark_quick(
        "compare.py", tmp_path, "--idioms", "--parts", "threads",
        "--sizes", "4", "--writers", "1khz", timeout=150)
    assert set(result["contenders"]) == set(compare.IDIOMS) | {"threading.Lock"}
    assert "single" not in result and "procs" not in result
    assert {(e["contender"], e["threads"]) for e in result["results"]} == {
        (n, k) for n in result["contenders"] for k in (1, 2)}


@pytest.mark.timeout(120)
def test_ab_pairs_two_interpreters(tmp_path):
    # The same interpreter as A and B: only the JSON's shape is checked.
    out = tmp_path / "ab.json"
    run_benchmark("ab.py", "--a", sys.executable, "--b", sys.executable,
                  "--pairs", "2", "--json", out, "--", "--parts", "threads",
                  "--sizes", "4", "--writers", "1khz", "--threads", "2",
                  "--repeats", "1", "--seconds", "0.01",
                  "--contenders", compare.READ_BOUND)
    result = json.loads(out.read_text())
    assert result["pairs"] == 2 and len(result["samples"]) == 2
    assert [p["order"] for p in result["samples"]] == [["a", "b"], ["b", "a"]]
    assert set(result["summary"]) == {f"{compare.READ_BOUND} x2",
                                      "threading.Lock x2"}
    for s in result["summary"].values():
        assert s["ratio"] > 0 and len(s["ratio_95"]) == 2
