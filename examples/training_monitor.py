"""A numpy training loop sharing its state with a monitor thread and a notebook.

The trainer keeps a 1,000-float parameter vector and publishes it with the
step and the loss after every step: one ``update()``, one copy of the
ndarray into the record (no tuple, no element-by-element conversion).  A
monitor thread in the same process reads the state into its own ndarray
(``read_into(out, field="state")``) and the whole record into a structured
array of ``rec.dtype`` for its plots.  An observer process, standing in for
a notebook kernel, attaches to the record by name, reads, and exits: its
exit must not unlink the block under the running trainer (the resource
tracker would, with a plain ``SharedMemory(name)`` on 3.11/3.12).

Every snapshot is one step's: ``state[0] == step`` and
``loss == 1 / (1 + step)``; the program checks that and exits 1 if not.

    python examples/training_monitor.py --steps 20000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading

import numpy as np

from seqlock_py import SeqRecord

STATE = 1000
FIELDS = dict(step="q", loss="d", state=f"{STATE}d")

OBSERVER = """
import sys
import numpy as np
from seqlock_py import SeqRecord
with SeqRecord.attach_shared(sys.argv[1]) as rec:        # the layout is in the block
    snap = np.empty((), rec.dtype)
    torn = 0
    for _ in range(int(sys.argv[2])):
        rec.read_into(snap)
        torn += snap["state"][0] != snap["step"] or snap["loss"] != 1 / (1 + snap["step"])
print(torn)
"""


def train(rec: SeqRecord, steps: int) -> None:
    rng = np.random.default_rng(1)
    state = rng.standard_normal(STATE)
    for step in range(1, steps + 1):
        state *= 0.999                                  # "a training step"
        state[0] = step
        rec.update(step=step, loss=1 / (1 + step), state=state)


def monitor(rec: SeqRecord, stop: threading.Event, counts: dict[str, int]) -> None:
    out = np.empty(STATE)                               # the monitor's own arrays
    snap = np.empty((), rec.dtype)
    reads = torn = 0
    while not stop.is_set():
        rec.read_into(out, field="state")               # one field, one snapshot
        rec.read_into(snap)                             # the whole record
        torn += snap["state"][0] != snap["step"] or snap["loss"] != 1 / (1 + snap["step"])
        reads += 1
    counts.update(monitor_reads=reads, monitor_torn=int(torn))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--observer-reads", type=int, default=2_000)
    args = parser.parse_args(argv)

    name = f"training-monitor-{os.getpid()}"
    with SeqRecord.create_shared(name, **FIELDS) as rec:    # unlinked at close
        rec.update(loss=1.0)                             # step 0's snapshot
        stop, counts = threading.Event(), {}
        watcher = threading.Thread(target=monitor, args=(rec, stop, counts))
        watcher.start()
        observer = subprocess.Popen(
            [sys.executable, "-P", "-c", OBSERVER, name, str(args.observer_reads)],
            stdout=subprocess.PIPE, text=True)
        train(rec, args.steps)
        out, _ = observer.communicate(timeout=120)
        train(rec, 10)                                   # the block outlived the observer
        stop.set()
        watcher.join()
    observer_torn = int(out.strip() or -1)
    print(f"{args.steps:,} steps, then 10 after the observer left; monitor {counts['monitor_reads']:,} reads, "
          f"{counts['monitor_torn']} torn; observer {args.observer_reads:,} reads, "
          f"{observer_torn} torn (exit {observer.returncode})")
    ok = counts["monitor_torn"] == 0 and observer_torn == 0 and observer.returncode == 0
    print("every snapshot was one step's" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
