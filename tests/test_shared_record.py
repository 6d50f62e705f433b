"""Records that own named shared memory: SeqRecord.create_shared() and
attach_shared().  The creator's close() unlinks the block; an opener's
exit, with or without close(), never does (the resource tracker is kept
out of it); each test's processes are real ones."""
from __future__ import annotations

import os
import signal
import time

import pytest

from process_helpers import PythonProcess, run_python, shm_block_fixture, shm_exists
from seqlock_py import SeqRecord
from workers import LONG


name = shm_block_fixture("seqlock_test")
exists = shm_exists


OPENER = """
import sys
from seqlock_py import SeqRecord
rec = SeqRecord.attach_shared(sys.argv[1])
print("read", tuple(rec.read()), rec.fields)
if sys.argv[2] == "close":
    rec.close()
"""


@pytest.mark.parametrize("closes", ["close", "exit"])
def test_an_opener_process_ending_leaves_the_block_to_the_others(name, closes):
    with SeqRecord.create_shared(name, x="d", n="q") as rec:
        rec.update(x=2.5, n=7)
        code, out = run_python(OPENER, name, closes)
        assert code == 0, out
        assert "read (2.5, 7) ('x', 'n')" in out
        assert "Exception ignored" not in out and "leaked" not in out, out
        time.sleep(0.2)  # a tracker that would unlink does it at once
        assert exists(name)
        assert rec.read() == (2.5, 7)
        code, out = run_python(OPENER, name, "close")  # a new opener still finds it
        assert code == 0, out


def test_the_creators_close_unlinks_the_block(name):
    rec = SeqRecord.create_shared(name, x="d")
    assert exists(name)
    read = rec.read  # a bound method kept does not hold the block
    rec.close()
    assert not exists(name)
    with pytest.raises(ValueError):
        read()


def test_an_openers_close_leaves_the_block(name):
    with SeqRecord.create_shared(name, x="d") as creator:
        with SeqRecord.attach_shared(name) as opener:
            creator.update(x=4.0)
            assert opener.read() == (4.0,)
        assert opener.closed
        assert exists(name)
    assert not exists(name)


def test_create_shared_of_a_name_in_use_raises_file_exists_error(name):
    with SeqRecord.create_shared(name, x="d"):
        with pytest.raises(FileExistsError):
            SeqRecord.create_shared(name, x="d")
        assert exists(name)  # the failed create took nothing down


def test_attach_shared_of_a_missing_name_raises_file_not_found_error(name):
    with pytest.raises(FileNotFoundError):
        SeqRecord.attach_shared(name)


def test_attach_shared_with_other_fields_raises_and_maps_nothing(name):
    with SeqRecord.create_shared(name, x="d"):
        with pytest.raises(ValueError, match="other fields"):
            SeqRecord.attach_shared(name, y="q")


def test_create_shared_of_a_non_ascii_name_raises_value_error_and_leaves_no_block(name):
    # The resource tracker takes ASCII names only: SharedMemory() made the
    # block, then failed to register it, and nothing unlinked it.
    odd = name + "\u00e9"
    try:
        with pytest.raises(ValueError, match="ASCII"):
            SeqRecord.create_shared(odd, x="d")
        assert not exists(odd)
    finally:
        if exists(odd):
            os.unlink(os.path.join("/dev/shm", odd))


@pytest.mark.parametrize("method", ["create_shared", "attach_shared"])
def test_a_name_with_a_null_character_raises_value_error(name, method):
    # 3.11's shm_open() cut the name at the NUL: "a\0b" opened "a".
    with SeqRecord.create_shared(name, x="d"):
        with pytest.raises(ValueError, match="null"):
            getattr(SeqRecord, method)(name + "\0other", x="d")
        assert exists(name)


CREATOR = """
import os, sys
from seqlock_py import SeqRecord
rec = SeqRecord.create_shared(sys.argv[1], x="d")
rec.update(x=1.0)
print("created", flush=True)
if sys.argv[2] == "kill":
    sys.stdin.readline()
    os.kill(os.getpid(), 9)
"""


def test_a_creator_exiting_without_close_unlinks_at_its_exit(name):
    code, out = run_python(CREATOR, name, "exit")
    assert code == 0, out
    assert "Exception ignored" not in out, out
    assert not exists(name)


def test_a_creator_killed_leaves_the_unlink_to_its_resource_tracker(name):
    with PythonProcess(CREATOR, name, "kill") as child:
        child.expect("created")
        with SeqRecord.attach_shared(name) as opener:  # mapped: it survives the unlink
            child.tell("go")
            code, _ = child.finish()
            assert code == -signal.SIGKILL
            deadline = time.monotonic() + LONG
            while exists(name) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not exists(name)
            assert opener.read() == (1.0,)


def test_create_shared_and_attach_shared_take_a_namedtuple_declaration():
    from typing import NamedTuple

    class Pose(NamedTuple):
        x: float
        n: int

    name = f"seqlock-test-declared-{os.getpid()}"
    with SeqRecord.create_shared(name, Pose) as rec:
        rec.update(x=1.5, n=3)
        with SeqRecord.attach_shared(name, Pose) as other:
            assert other.read() == Pose(1.5, 3) and type(other.read()) is Pose
        with SeqRecord.attach_shared(name) as plain:
            assert plain.read().x == 1.5 and plain.fields == ("x", "n")


CREATE_AND_CLOSE = """
import sys, time
from seqlock_py import SeqRecord
print("started", flush=True)
for _ in range(int(sys.argv[2])):
    rec = SeqRecord.create_shared(sys.argv[1], x="d", n="q")
    time.sleep(0.0005)  # a whole block for openers to find, too
    rec.close()
print("done", flush=True)
"""


def test_an_opener_racing_create_shared_finds_no_block_or_a_whole_one(name):
    # Found: SharedMemory() makes the name (empty) before sizing it, and
    # create() lays the record out after: an opener that retried on
    # FileNotFoundError got "cannot mmap an empty file" or "holds no
    # SeqRecord (... create() it first)" in most of 200 creates.
    opened, failures = 0, []
    with PythonProcess(CREATE_AND_CLOSE, name, "200") as child:
        child.expect("started")
        deadline = time.monotonic() + LONG
        while child.proc.poll() is None and time.monotonic() < deadline:
            try:
                rec = SeqRecord.attach_shared(name)
            except FileNotFoundError:
                continue
            except Exception as e:  # noqa: BLE001: every other error is the defect
                failures.append(f"{type(e).__name__}: {e}")
                continue
            opened += 1
            assert rec.fields == ("x", "n")
            rec.close()
        code, out = child.finish()
    assert code == 0, out
    assert failures == [], f"{len(failures)} of the opens failed, first {failures[0]!r}"
    assert opened > 0


def _staging_blocks():
    return [f for f in os.listdir("/dev/shm") if f.startswith(f"seqlock_py_new_{os.getpid()}_")]


def test_create_shared_leaves_no_block_but_the_named_one(name):
    with SeqRecord.create_shared(name, x="d"):
        assert exists(name) and _staging_blocks() == []
        with pytest.raises(FileExistsError):
            SeqRecord.create_shared(name, x="d")
        assert _staging_blocks() == []
    with pytest.raises(ValueError, match="bad format"):
        SeqRecord.create_shared(name, x="no such format")
    assert not exists(name) and _staging_blocks() == []


def test_attach_shared_of_a_block_that_holds_no_record_says_so_and_never_to_create(name):
    from multiprocessing import shared_memory

    foreign = shared_memory.SharedMemory(name=name, create=True, size=4096)
    try:
        with pytest.raises(ValueError, match="holds no SeqRecord") as caught:
            SeqRecord.attach_shared(name)
        assert "create" not in str(caught.value)
    finally:
        foreign.close()
        foreign.unlink()


def test_attach_shared_of_an_empty_block_says_it_holds_no_record(name):
    os.close(os.open(os.path.join("/dev/shm", name), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600))
    with pytest.raises(ValueError, match="empty.*holds no SeqRecord"):
        SeqRecord.attach_shared(name)


def test_create_shared_with_overwrite_says_it_takes_none_and_what_to_do(name):
    with pytest.raises(TypeError, match=r"takes no overwrite=.*unlink") as caught:
        SeqRecord.create_shared(name, x="d", overwrite=True)
    assert "format of field" not in str(caught.value)
    assert not exists(name)
    with SeqRecord.create_shared(name, x="d") as rec:
        rec.update(x=1.5)
        with pytest.raises(TypeError, match="takes no overwrite="):
            SeqRecord.create_shared(name, x="d", overwrite=True)
        assert rec.read() == (1.5,) and exists(name)
