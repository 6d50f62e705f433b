"""Rings that own named shared memory: SeqRing.create_shared() and
attach_shared(), as SeqRecord's.  The creator's close() unlinks the block;
an opener reads the capacity and the layout from the block, and its exit,
with or without close(), never unlinks it."""
from __future__ import annotations

import time
import typing

import pytest

from process_helpers import PythonProcess, run_python, shm_block_fixture, shm_exists
from seqlock_py import SeqRing
from record_helpers import OVERWRITE_WHILE_IN_USE
from workers import LONG


name = shm_block_fixture("seqlock_test_ring")
exists = shm_exists


class Tick(typing.NamedTuple):
    price: float
    size: int


OPENER = """
import sys
from seqlock_py import SeqRing
ring = SeqRing.attach_shared(sys.argv[1])
reader = ring.reader(oldest=True)
print("ring", ring.capacity, ring.fields, [(s, tuple(e)) for s, e in reader.poll()])
if sys.argv[2] == "close":
    ring.close()
"""


def test_create_shared_makes_a_block_that_close_unlinks(name):
    ring = SeqRing.create_shared(name, 8, price="d", size="q")
    assert exists(name)
    ring.close()
    assert not exists(name)


def test_a_with_block_closes_and_unlinks_the_creators_ring(name):
    with SeqRing.create_shared(name, 8, Tick) as ring:
        ring.append(price=1.5, size=2)
    assert ring.closed and not exists(name)


def test_attach_shared_reads_capacity_and_layout_from_the_block(name):
    with SeqRing.create_shared(name, 8, price="d", size="q") as ring:
        ring.append(price=1.5, size=2)
        ring.append(price=2.5, size=3)
        code, out = run_python(OPENER, name, "close")
        assert code == 0, out
        assert "ring 8 ('price', 'size') [(0, (1.5, 2)), (1, (2.5, 3))]" in out


def test_an_openers_exit_without_close_leaves_the_block(name):
    with SeqRing.create_shared(name, 8, price="d", size="q") as ring:
        code, out = run_python(OPENER, name, "exit")
        assert code == 0, out
        assert "Exception ignored" not in out
        assert exists(name)
        ring.append(price=1.0, size=1)  # the block is still the ring's
    assert not exists(name)


def test_attach_shared_with_a_namedtuple_gives_its_entries(name):
    with SeqRing.create_shared(name, 4, Tick) as ring, \
            SeqRing.attach_shared(name, Tick) as opened:
        reader = opened.reader()
        ring.append(price=3.0, size=7)
        [(seq, tick)] = reader.poll()
        assert seq == 0 and type(tick) is Tick and tick == Tick(3.0, 7)


def test_an_openers_close_leaves_the_block_to_the_creator(name):
    with SeqRing.create_shared(name, 4, x="d") as ring:
        SeqRing.attach_shared(name).close()
        assert exists(name)
        assert ring.append(x=1.0) == 0


def test_create_shared_of_an_existing_name_raises_file_exists_error(name):
    with SeqRing.create_shared(name, 4, x="d"):
        with pytest.raises(FileExistsError):
            SeqRing.create_shared(name, 4, x="d")


def test_attach_shared_of_a_missing_name_raises_file_not_found_error(name):
    with pytest.raises(FileNotFoundError):
        SeqRing.attach_shared(name)


def test_create_shared_without_a_capacity_raises_type_error(name):
    with pytest.raises(TypeError, match="the capacity"):
        SeqRing.create_shared(name)
    assert not exists(name)


def test_create_shared_of_a_bad_capacity_leaves_no_block(name):
    with pytest.raises((ValueError, OverflowError)):
        SeqRing.create_shared(name, 0, x="d")
    assert not exists(name)


def test_attach_shared_of_a_records_block_raises_value_error(name):
    from seqlock_py import SeqRecord

    with SeqRecord.create_shared(name, x="d"):
        with pytest.raises(ValueError):
            SeqRing.attach_shared(name)


def test_a_name_with_a_null_character_raises_value_error():
    with pytest.raises(ValueError, match="null"):
        SeqRing.create_shared("ring\0other", 4, x="d")


CREATE_AND_CLOSE = """
import sys, time
from seqlock_py import SeqRing
print("started", flush=True)
for _ in range(int(sys.argv[2])):
    ring = SeqRing.create_shared(sys.argv[1], 64, price="d", size="q")
    time.sleep(0.0005)  # a whole block for openers to find, too
    ring.close()
print("done", flush=True)
"""


def test_an_opener_racing_create_shared_finds_no_block_or_a_whole_one(name):
    # Found: as SeqRecord's; an opener retrying on FileNotFoundError got
    # "cannot mmap an empty file" and "holds no SeqRing (... create() it
    # first)".
    opened, failures = 0, []
    with PythonProcess(CREATE_AND_CLOSE, name, "200") as child:
        child.expect("started")
        deadline = time.monotonic() + LONG
        while child.proc.poll() is None and time.monotonic() < deadline:
            try:
                ring = SeqRing.attach_shared(name)
            except FileNotFoundError:
                continue
            except Exception as e:  # noqa: BLE001: every other error is the defect
                failures.append(f"{type(e).__name__}: {e}")
                continue
            opened += 1
            assert ring.capacity == 64 and ring.fields == ("price", "size")
            ring.close()
        code, out = child.finish()
    assert code == 0, out
    assert failures == [], f"{len(failures)} of the opens failed, first {failures[0]!r}"
    assert opened > 0


def test_attach_shared_of_a_block_that_holds_no_ring_says_so_and_never_to_create(name):
    from multiprocessing import shared_memory

    foreign = shared_memory.SharedMemory(name=name, create=True, size=4096)
    try:
        with pytest.raises(ValueError, match="holds no SeqRing") as caught:
            SeqRing.attach_shared(name)
        assert "create" not in str(caught.value)
    finally:
        foreign.close()
        foreign.unlink()


def test_create_shared_with_overwrite_says_it_takes_none_and_what_to_do(name):
    with pytest.raises(TypeError, match=r"takes no overwrite=.*unlink") as caught:
        SeqRing.create_shared(name, 4, x="d", overwrite=True)
    assert "format of field" not in str(caught.value)
    assert not exists(name)


# A child that cannot fill memory whatever it asks for: 4 GiB of address
# space, files (a shared memory block is one) of at most 1 GiB, a file
# too large an error rather than SIGXFSZ.  A regression then fails the
# test instead of filling the machine's RAM.
LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
# 4 GiB beyond what is mapped now (an ASan build has terabytes mapped).
mapped = [int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize:")][0]
resource.setrlimit(resource.RLIMIT_AS, (mapped + (4 << 30), mapped + (4 << 30)))
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 30, 1 << 30))
from seqlock_py import SeqRing
name, capacity = sys.argv[1], int(sys.argv[2])
print("size", SeqRing.buffer_size(capacity, x="d"))
try:
    SeqRing.create_shared(name, capacity, x="d").close()
except BaseException as e:
    print("raised", type(e).__name__, e)
"""


def test_create_shared_of_a_ring_larger_than_shared_memory_refuses_before_making_the_block(name):
    code, out = run_python(LIMITED, name, str(2**40))
    assert code == 0, out
    size = int(out.split("size ")[1].split()[0])
    assert "raised MemoryError" in out and f"{size} bytes" in out, out
    assert not exists(name)


def test_create_overwrite_over_a_ring_in_use_takes_its_lock_while_laying_it_out():
    """SeqRing.create(buf, n, overwrite=True) while another process
    appends and another polls: each create takes the ring's lock for the
    laying out, or is refused as in use; appenders never crash, readers
    see the ring rewound, never a torn entry.

    Seen (main 666f113, 3.11, 5 runs of 6): the appending process died of
    SIGSEGV (its robust mutex laid out anew while it held it)."""
    code, out = run_python(OVERWRITE_WHILE_IN_USE, "ring")
    assert code == 0, out
    assert out.count("exit status 0") == 2, out
    assert "writer torn 0 errors {}" in out and "reader torn 0 errors {}" in out, out
