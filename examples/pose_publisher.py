"""A robot's pose at 1 kHz, read by a planner, a UI and a logger thread.

The publisher thread writes the pose a thousand times a second.  The
planner takes a snapshot for every decision, flat out; the UI redraws at
60 Hz from the newest pose (it wants the latest, not every one); the
logger writes a line every 10 ms.  Nobody waits for anybody: the readers
never block the publisher, and the publisher never blocks them.

Every pose a reader sees is one the publisher wrote whole: y == 2 x,
heading == x / 1000 and stamp == x, always.  The program checks that on
every snapshot and exits 1 if one is torn.

    python examples/pose_publisher.py --seconds 2
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import NamedTuple

from seqlock_py import SeqRecord


class Pose(NamedTuple):
    stamp: int
    x: float
    y: float
    heading: float


def whole(pose: Pose) -> bool:
    return pose.y == 2 * pose.x and pose.heading == pose.x / 1000 and pose.stamp == pose.x


def publish(rec: SeqRecord[Pose], stop: threading.Event, rate_hz: float) -> int:
    period, stamp = 1 / rate_hz, 0
    next_at = time.monotonic()
    while not stop.is_set():
        stamp += 1
        x = float(stamp)
        rec.update(stamp=stamp, x=x, y=2 * x, heading=x / 1000)
        next_at += period
        pause = next_at - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    return stamp


def plan(rec: SeqRecord[Pose], stop: threading.Event, counts: dict[str, int]) -> None:
    read = rec.read                      # this thread's own bound method
    decisions = torn = 0
    while not stop.is_set():
        pose = read()                    # one snapshot per decision
        torn += not whole(pose)
        decisions += 1
    counts.update(planner_decisions=decisions, planner_torn=torn)


def draw(rec: SeqRecord[Pose], stop: threading.Event, counts: dict[str, int]) -> None:
    frames = torn = skipped = 0
    previous = None
    for seq, pose in rec.changes(timeout=0.5):   # the newest pose, asleep between
        if stop.is_set():
            break
        torn += not whole(pose)
        if previous is not None:
            skipped += (seq - previous) // 2 - 1  # poses newer ones replaced
        previous = seq
        frames += 1
        time.sleep(1 / 60)               # "rendering"
    counts.update(ui_frames=frames, ui_torn=torn, ui_skipped=skipped)


def log(rec: SeqRecord[Pose], stop: threading.Event, counts: dict[str, int]) -> None:
    lines = torn = 0
    while not stop.wait(0.01):
        seq, pose = rec.read_versioned()
        torn += not whole(pose)
        lines += 1
    counts.update(log_lines=lines, log_torn=torn)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rate", type=float, default=1000.0, help="poses per second")
    args = parser.parse_args(argv)

    rec = SeqRecord(Pose)
    stop = threading.Event()
    counts: dict[str, int] = {}
    readers = [threading.Thread(target=f, args=(rec, stop, counts), name=f.__name__)
               for f in (plan, draw, log)]
    for t in readers:
        t.start()
    published: list[int] = []
    publisher = threading.Thread(target=lambda: published.append(publish(rec, stop, args.rate)))
    publisher.start()
    time.sleep(args.seconds)
    stop.set()
    publisher.join()
    rec.update(stamp=0, x=0.0, y=0.0, heading=0.0)   # wakes the UI if it sleeps
    for t in readers:
        t.join()

    last = rec.read()
    print(f"published {published[0]:,} poses in {args.seconds:g} s; last {last}")
    for name, value in sorted(counts.items()):
        print(f"  {name:<20}{value:>12,}")
    torn = sum(v for k, v in counts.items() if k.endswith("_torn"))
    print("every pose every reader saw was whole" if torn == 0 else f"{torn} TORN poses")
    return 0 if torn == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
