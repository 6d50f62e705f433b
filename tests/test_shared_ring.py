"""Rings that own named shared memory: SeqRing.create_shared() and
attach_shared(), as SeqRecord's.  The creator's close() unlinks the block;
an opener reads the capacity and the layout from the block, and its exit,
with or without close(), never unlinks it."""
from __future__ import annotations

import typing

import pytest

from process_helpers import run_python, shm_block_fixture, shm_exists
from seqlock_py import SeqRing


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
