"""Processes for lock_free_reads_at_scale.ipynb: readers that attach to a
SeqRecord in shared memory and read it flat out, checking every snapshot,
and a feeder that writes it now and then for a consumer to wait on.

A separate module because multiprocessing's "spawn" start method imports the
target function by name in the child, which cannot reach a notebook cell.
"""

import sys
import time
from multiprocessing import shared_memory

from seqlock_py import SeqRecord


def attach(name):
    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, track=False)
    return shared_memory.SharedMemory(name=name)


def reader(shm_name, fields, seconds, barrier, results):
    """Read for `seconds`; put (reads, torn snapshots, read_retries)."""
    shm = attach(shm_name)
    rec = SeqRecord.attach(shm.buf, **fields)
    read = rec.read
    reads = torn = 0
    barrier.wait()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for _ in range(200):
            snap = read()
            if snap[1] != snap[0] + 1.0 or snap[2] != 2.0 * snap[0]:
                torn += 1
        reads += 200
    results.put((reads, torn, rec.read_retries))
    del rec, read
    shm.close()


def raw_reader(shm_name, seconds, barrier, results):
    """The same over three plain doubles in shared memory, no lock."""
    shm = attach(shm_name)
    mv = shm.buf.cast("d")
    reads = torn = 0
    barrier.wait()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for _ in range(200):
            snap = (mv[0], mv[1], mv[2])
            if snap[1] != snap[0] + 1.0 or snap[2] != 2.0 * snap[0]:
                torn += 1
        reads += 200
    results.put((reads, torn, 0))
    mv.release()
    shm.close()


def feeder(shm_name, fields, writes, period, barrier):
    """Write `writes` times, `period` seconds apart: price and volume, and
    the time of the write (time.monotonic_ns(), one clock for every process
    of the machine) in `stamp`, so the consumer can time its wake-up."""
    shm = attach(shm_name)
    rec = SeqRecord.attach(shm.buf, **fields)
    barrier.wait()
    for volume in range(1, writes + 1):
        time.sleep(period)
        with rec.write() as w:
            w.price = 100.0 + volume
            w.volume = volume
            w.stamp = time.monotonic_ns()   # the section ends right after
    del rec, w
    shm.close()
