"""The four programs in examples/ run as users run them, briefly, and hold
their own invariants: every snapshot a reader saw was whole (each program
checks that itself and exits 1 if not), and the numbers they print show
the work was done."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

pytestmark = pytest.mark.skipif(not EXAMPLES.is_dir(), reason="no examples/ here")


def run(program: str, *args: str, timeout: float = 120) -> str:
    done = subprocess.run([sys.executable, "-P", str(EXAMPLES / program), *args],
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr
    return done.stdout


def number(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    assert found, (pattern, text)
    return int(found.group(1).replace(",", ""))


def test_the_pose_publishers_readers_see_only_whole_poses():
    out = run("pose_publisher.py", "--seconds", "1")
    assert "every pose every reader saw was whole" in out
    assert number(r"published ([\d,]+) poses", out) > 0
    assert number(r"planner_decisions\s+([\d,]+)", out) > 0
    assert number(r"ui_frames\s+([\d,]+)", out) > 0
    assert number(r"log_lines\s+([\d,]+)", out) > 0


def test_the_market_feeds_strategy_processes_react_to_every_tick_through_the_ring():
    out = run("market_feed.py", "--seconds", "1", "--strategies", "4")
    assert "every tick every strategy saw was whole" in out
    counts = re.findall(r"strategy \d: reacted to ([\d,]+) of ([\d,]+) ticks, missed 0,", out)
    assert len(counts) == 4, out
    # The ring holds 16,384 ticks, more than a second's: none is missed.
    assert all(seen == total for seen, total in counts), out


def test_the_stats_services_long_polls_are_answered_on_a_handful_of_threads():
    # Updates 2 s apart: every client's second poll waits for news even
    # where a round of 500 answers takes most of a second (a loaded machine
    # answered each poll late, with news already there: none parked).
    out = run("stats_service.py", "--clients", "500", "--seconds", "1", "--period", "2")
    assert "every answer was one consistent, newer snapshot" in out
    assert number(r"([\d,]+) long-poll answers", out) >= 500
    # The threads are counted while requests are parked in wait_async: the
    # main thread, the record's one watcher, never a thread per wait.
    assert number(r"(\d+) requests parked at once", out) > 1
    assert number(r"at most (\d+) threads", out) < 10


def test_the_training_loops_monitor_and_observer_see_only_whole_steps():
    pytest.importorskip("numpy")
    out = run("training_monitor.py", "--steps", "5000", "--observer-reads", "1000")
    assert "every snapshot was one step's" in out
    assert number(r"monitor ([\d,]+) reads", out) > 0
