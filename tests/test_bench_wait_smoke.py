"""benchmarks/bench_wait.py --quick runs to the end and writes well-formed
JSON (with a --baseline comparison, against this very build; the idle
part with its pipe-read reference; the many-async-waiters part: one
write answers all 50 on one watcher thread), and --table prints the
tables from it.

No timing is asserted: the numbers depend on the machine and its load.
"""

import math

import pytest

from process_helpers import THIS_BUILD, run_benchmark, run_benchmark_quick

CONTENDERS = ["rec.wait(seq)", "await rec.wait_async(seq)",
              "poll: sleep(0.001)", "Condition.wait() / notify_all()"]
KINDS = ["rec.update(x=v)", "with rec.write() as w: w.x = v"]


@pytest.mark.timeout(120)
def test_bench_wait_quick_writes_json_and_table(tmp_path):
    out, result, _ = run_benchmark_quick(
        "bench_wait.py", tmp_path, "--baseline", THIS_BUILD,
        "--baseline-label", "this build")
    assert {"loadavg_before", "loadavg_after"} <= set(result)

    cells = {(c["placement"], c["contender"], c["waiter"]): c
             for c in result["latency"]}
    for placement in ("thread", "process"):
        for name in CONTENDERS:
            for waiter in ("thread", "main"):
                cell = cells.pop((placement, name, waiter))
                assert len(cell["rounds"]) == 1
                assert 0 < cell["samples"] + cell["skipped"] <= 10
                assert cell["timeouts"] == 0
                assert 0 < cell["p50_us"] <= cell["p99_us"] <= cell["max_us"]
    assert not cells

    idle = {(c["contender"], c["waiter"]): c
            for c in result["idle"]["cells"]}
    assert set(idle) == {("rec.wait(seq, T)", "main"),
                         ("rec.wait(seq, T)", "thread"),
                         ("rec.wait(seq, T)", "process"),
                         ("await rec.wait_async(seq, T)", "main"),
                         ("await rec.wait_async(seq, T), settled", "main"),
                         ("os.read(pipe)", "main"),
                         ("os.read(pipe)", "thread"),
                         ("threading.Condition.wait(T)", "thread"),
                         ("poll: sleep(0.001)", "main"),
                         ("poll: sleep(0.001)", "thread")}
    for cell in idle.values():
        assert all(r["returned"] is False for r in cell["rounds"])
        assert cell["wall_s"] > 0 and cell["thread_cpu_s"] >= 0
        assert cell["process_switches_per_s"] >= 0

    many = result["many"]
    assert many["waiters"] == 50 and len(many["rounds"]) == 1
    assert many["woken_min"] == 50  # one write answered every wait
    assert many.get("extra_threads", 1) <= 1  # one watcher, not 50 threads
    assert 0 <= many["first_ms"] <= many["median_ms"] <= many["last_ms"]

    write = result["write"]
    assert write["kinds"] == KINDS
    assert {(e["kind"], e["waiters"]) for e in write["tight"]} == {
        (k, w) for k in KINDS for w in (0, 1, 4)}
    assert all(e["median"] > 0 for e in write["tight"])
    assert {(e["kind"], e["waiters"]) for e in write["paced"]} == {
        (k, w) for k in [*KINDS, "with cond: cond.notify_all()"]
        for w in (0, 1, 4)} | {("(the timer alone)", 0)}
    base = write["baseline"]
    assert base["rounds"] == 2 and base["old_label"] == "this build"
    assert set(base["ratio"]) == set(KINDS)
    assert all(math.isfinite(r["median"]) and r["median"] > 0
               for r in base["ratio"].values())

    table = run_benchmark("bench_wait.py", "--table", out)
    assert "| rec.wait(seq) | other thread |" in table
    assert "| `rec.wait(seq, T)` | process |" in table
    assert "| `os.read(pipe)` | thread |" in table
    assert "Many async waiters: 50 concurrent" in table
    assert "new/old" in table


@pytest.mark.timeout(200)
def test_bench_wakeups_quick_counts_wakes_cpu_and_threads(tmp_path):
    """benchmarks/bench_wakeups.py --quick, against this very build as its
    baseline: every case wakes, and a looping awaited wait starts at most
    one watcher thread (it lingers between wake-ups)."""
    _, result, stdout = run_benchmark_quick("bench_wakeups.py", tmp_path, "--baseline", THIS_BUILD,
                                            "--baseline-label", "this build again", timeout=180)
    assert "| await rec.wait_async(seq) |" in stdout
    for case, by_build in result["cases"].items():
        for label, rounds in by_build.items():
            for r in rounds:
                assert r["wakes"] > 0 and r["cpu_us_per_wake"] > 0, (case, label, r)
                if case.startswith(("await", "async for")):
                    assert r["threads_started"] <= 1, (case, label, r)
