"""A writer process killed while it appends to a shared ring: its half
written entry is never delivered, the next append takes the lock over and
counts it in ring.recoveries, and the sequence numbers stay consecutive.

Each round starts a writer process that appends flat out entries of a
2 MB field (so a good part of its time is inside the copy under the lock),
kills it with SIGKILL at a random moment, and appends one entry itself.
A reader that polls after each kill (the dead writer's entry still half
written) and again after the next append checks every entry it is handed (each
holds one value throughout) and that sequence numbers run on without a
gap beyond what it counts missed.  Rounds go on until three kills landed
inside an append, or 60 rounds.
"""
from __future__ import annotations

import os
import random
import time
import uuid

import pytest

from process_helpers import PythonProcess
from workers import LONG
from seqlock_py import SeqRing

WORDS = 250_000

WRITER = """
import array, sys
from seqlock_py import SeqRing
ring = SeqRing.attach_shared(sys.argv[1])
words = int(sys.argv[2])
print("ready", flush=True)
tag = int(sys.argv[3])
while True:
    ring.append(tag=tag, big=array.array("d", [float(tag)]) * words)
    tag += 1
"""


def whole(entry):
    return entry.big[0] == entry.big[-1] == float(entry.tag) and set(entry.big) == {float(entry.tag)}


@pytest.mark.timeout(300)
def test_writers_killed_mid_append_never_deliver_a_half_written_entry():
    name = f"seqlock_test_ring_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    rng = random.Random(20)
    delivered = torn = disorder = rounds = 0
    with SeqRing.create_shared(name, 4, tag="q", big=f"{WORDS}d") as ring:
        reader = ring.reader(oldest=True)
        expected = 0
        while ring.recoveries < 3 and rounds < 60:
            rounds += 1
            with PythonProcess(WRITER, name, WORDS, rounds * 1_000_000) as writer:
                writer.expect("ready")
                time.sleep(rng.uniform(0.005, 0.05))
                writer.kill()
            for polled_after_append in (False, True):
                # First with the dead writer's entry still half written.
                if polled_after_append:
                    seq = ring.append(tag=-rounds, big=[float(-rounds)] * WORDS)
                for got, entry in reader.poll():
                    delivered += 1
                    torn += not whole(entry)
                    disorder += got < expected
                    expected = got + 1
            assert expected == seq + 1
        head = ring.head
        recoveries = ring.recoveries
        missed = reader.missed
    print(f"rounds {rounds}, recoveries {recoveries}, delivered {delivered}, "
          f"missed {missed}, head {head}, torn {torn}")
    assert torn == 0 and disorder == 0
    assert delivered + missed == head
    assert recoveries >= 1, f"no kill landed inside an append in {rounds} rounds"


# ---- a writer stopped (SIGSTOP) inside an append: hostile review of issue 20


def stop_inside_an_append(ring, writer, tries=2000):
    """SIGSTOP the writer process until it stops with its append open (the
    ring's count odd); True if it did within tries."""
    import signal

    for _ in range(tries):
        time.sleep(0.001)
        os.kill(writer.pid, signal.SIGSTOP)
        time.sleep(0.005)
        if ring._news_sequence & 1 and ring.head > 0:
            return True
        os.kill(writer.pid, signal.SIGCONT)
    return False


@pytest.mark.timeout(120)
def test_readers_never_wait_for_a_writer_stopped_mid_append():
    """Held (3.11, 3.13t): a writer stopped inside an append, its entry
    half written and its section open: poll() returns the entries before
    it (all whole), wait(0.05) returns False at its timeout, read_last()
    returns, and once the writer goes on every entry is delivered or
    counted missed."""
    pytest.importorskip("numpy")
    import signal

    name = f"seqlock_test_ring_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with SeqRing.create_shared(name, 4, tag="q", big=f"{WORDS}d") as ring:
        reader = ring.reader(oldest=True)
        with PythonProcess(WRITER, name, WORDS, 1) as writer:
            writer.expect("ready")
            assert stop_inside_an_append(ring, writer.proc), "never stopped inside an append"
            try:
                polled = reader.poll()
                waited = reader.wait(0.05)
                first, rows = ring.read_last(4)
            finally:
                os.kill(writer.proc.pid, signal.SIGCONT)
            assert polled and all(whole(entry) for _, entry in polled)
            assert waited is False
            assert len(rows) >= 1 and first + len(rows) == polled[-1][0] + 1
            delivered, torn = len(polled), 0
            past_the_stop = polled[-1][0] + 3    # fixed: the writer is flat out
            del polled, rows                     # 2 MB entries: keep counts only
            while reader.next_sequence < past_the_stop:
                reader.wait(LONG)
                for _, entry in reader.poll():
                    delivered += 1
                    torn += not whole(entry)
            writer.kill()
        assert torn == 0
        assert delivered + reader.missed == reader.next_sequence


@pytest.mark.timeout(120)
def test_an_append_waits_for_a_writer_stopped_mid_append_until_a_signal_handler_raises():
    """Held, and documented (docs/ring.md): appends serialise on the
    ring's lock, so another writer's append() waits as long as the
    stopped writer is stopped (append() has no timeout); a signal
    handler that raises ends the wait (Ctrl-C does), nothing appended."""
    import signal

    class Alarm(Exception):
        pass

    def alarm(signum, frame):
        raise Alarm

    name = f"seqlock_test_ring_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with SeqRing.create_shared(name, 4, tag="q", big=f"{WORDS}d") as ring:
        with PythonProcess(WRITER, name, WORDS, 1) as writer:
            writer.expect("ready")
            assert stop_inside_an_append(ring, writer.proc), "never stopped inside an append"
            head = ring.head
            previous = signal.signal(signal.SIGALRM, alarm)
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            try:
                with pytest.raises(Alarm):
                    ring.append(tag=-1)
                # Read while the writer is still stopped: once continued it
                # finishes its own append (CI, 3.13t: head 2, not 1).
                after = ring.head
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
                os.kill(writer.proc.pid, signal.SIGCONT)
            assert after == head
            writer.kill()
        assert ring.append(tag=-2) >= head
