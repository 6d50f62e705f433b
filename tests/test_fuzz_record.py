"""The shared-record fuzz test's harness and its corpus (issue 17).

- the harness sees each failure it is there to see (planted in children
  that abort, hang, overrun a bound, write outside the record), and sees
  none on an untouched record;
- every case in tests/fuzz_corpus/ (what the fuzzer found: crashes, hangs,
  calls past their timeout, writes outside the buffer, unclear errors) is
  replayed, one test per file: each must keep every promise;
- with SEQLOCK_FUZZ_SECONDS set, a fuzz run of that many seconds
  (tools/test runs the driver itself, as its own step:
  tests/fuzz_record_driver.py).

Each case runs its roles in fresh interpreters (tests/fuzz_record.py), so
a crash fails the test instead of killing pytest.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import fuzz_record as fr

pytestmark = pytest.mark.thread_unsafe  # child processes and a shared file

CORPUS = sorted(fr.CORPUS_DIR.glob("*.json"))
FIELDS = {"n": "q", "x": "d", "flag": "?", "arr": "16d"}


def _explain(result):
    out = [fr.describe(result)]
    for f in result["failures"]:
        if f.get("stderr"):
            out.append(f"--- {f['role']}#{f['index']} stderr (tail):\n{f['stderr'][-1500:]}")
        if f.get("traceback"):
            out.append(f"--- {f['role']}#{f['index']} traceback:\n{f['traceback']}")
    return "\n".join(out)


def test_harness_sees_an_abort_a_hang_an_overrun_and_a_write_outside():
    case = {"fields": FIELDS, "writes": [], "duration": 0.2, "timeout": 0.1,
            "roles": ["selftest-oob", "selftest-abort", "selftest-hang", "selftest-overtime"]}
    result = fr.run_case(case)
    kinds = {(f["role"], f["kind"]) for f in fr.failed(result)}
    assert kinds == {
        ("any", "oob"), ("selftest-abort", "crash"), ("selftest-hang", "hang"),
        ("selftest-overtime", "overtime"),
    }, _explain(result)
    assert result["oob"] == [(-1, 0), (fr.geometry(FIELDS)[4] + 5, fr.geometry(FIELDS)[4] + 6)]
    (hang,) = [f for f in result["failures"] if f["kind"] == "hang"]
    assert hang["call"] == "wait"


def test_harness_finds_nothing_wrong_with_an_untouched_record():
    case = {"fields": FIELDS, "writes": [], "duration": 0.4, "timeout": 0.1,
            "roles": ["reader", {"role": "reader", "readonly": True}, "writer", "waiter"]}
    result = fr.run_case(case)
    assert not result["failures"], _explain(result)
    reports = {r["role"]: r["report"] for r in result["roles"]}
    assert all(r["attach"] == "ok" for r in reports.values())
    assert reports["reader"]["calls"]["read"] > 0
    assert reports["writer"]["calls"]["write"] > 0
    assert reports["waiter"]["calls"]["wait_async"] > 0


@pytest.mark.skipif(not CORPUS, reason="the corpus is empty")
@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_case_keeps_every_promise(path: Path):
    """A case the fuzzer once found breaking a promise (its "found" says
    how, where and on which interpreter): no crash, no hang, no call past
    its timeout, no byte written outside the record, no unclear error.
    A writer's crash while a co-tenant rewrites its beacon is allowed."""
    data = fr.load_corpus_file(path)
    for _ in range(int(os.environ.get("SEQLOCK_FUZZ_REPLAYS", "1"))):
        result = fr.run_case(data["case"])
        if fr.failed(result):
            found = "\n".join(f"  {f['kind']}: {f['role']} [{f['mode']}] {f['detail']}"
                              for f in data["found"].get("failures", []))
            pytest.fail(f"{path.name} (found on {data['found'].get('interpreter')}):\n{found}\n"
                        f"now:\n{_explain(result)}", pytrace=False)


@pytest.mark.skipif(not float(os.environ.get("SEQLOCK_FUZZ_SECONDS") or 0),
                    reason="set SEQLOCK_FUZZ_SECONDS for a fuzz run (tools/test runs "
                           "tests/fuzz_record_driver.py as its own step)")
def test_fuzz_for_a_bounded_time(tmp_path, capsys):
    import fuzz_record_driver

    seconds = float(os.environ["SEQLOCK_FUZZ_SECONDS"])
    with capsys.disabled():  # the counts, as the driver prints them
        stats, saved = fuzz_record_driver.run(seconds, corpus_out=tmp_path)
    assert stats.cases > 0
    assert stats.failures() == 0, f"new cases in {tmp_path}: {[p.name for p in saved]}"
