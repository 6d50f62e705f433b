"""Typed records: a record's layout from a typing.NamedTuple class, whose
read() returns instances of that class.

One behaviour per test; the test names read as the specification.
"""

from __future__ import annotations

import collections
import pickle
from multiprocessing import shared_memory
from typing import Annotated, Any, NamedTuple, Optional

import pytest

from process_helpers import PythonProcess
from seqlock_py import SeqRecord

pytestmark = pytest.mark.timeout(60)


class Pose(NamedTuple):
    x: float
    y: float
    n: int
    ok: bool


class Wide(NamedTuple):
    count: Annotated[int, "Q"]
    samples: Annotated[tuple[float, ...], "4d"]
    flag: bool


class Stringly(NamedTuple):  # quoted even without the __future__ import
    x: "float"
    v: "Annotated[tuple[float, ...], '2d']"


class WithDefault(NamedTuple):
    x: float
    ok: bool = True


class PoseWithNew(Pose):
    __slots__ = ()
    made = 0

    def __new__(cls, *args: Any) -> PoseWithNew:
        PoseWithNew.made += 1
        return super().__new__(cls, *args)


class PoseWithDict(Pose):  # no __slots__: instances have a __dict__
    pass


def test_a_namedtuple_class_declares_the_fields_in_order():
    rec = SeqRecord(Pose)
    assert rec.fields == ("x", "y", "n", "ok")
    assert rec.format == SeqRecord(x="d", y="d", n="q", ok="?").format


def test_read_returns_instances_of_the_declared_class():
    rec = SeqRecord(Pose)
    rec.update(x=1.0, y=2.0, n=3, ok=True)
    pose = rec.read()
    assert type(pose) is Pose and pose == Pose(1.0, 2.0, 3, True)
    assert pose.y == 2.0 and repr(pose) == "Pose(x=1.0, y=2.0, n=3, ok=True)"


def test_read_versioned_and_changes_give_the_declared_class():
    rec = SeqRecord(Pose)
    assert type(rec.read_versioned()[1]) is Pose
    assert type(next(iter(rec.changes(timeout=0)))[1]) is Pose


def test_a_typed_snapshot_pickles_as_the_declared_class():
    rec = SeqRecord(Pose)
    rec.update(n=5)
    back = pickle.loads(pickle.dumps(rec.read()))
    assert type(back) is Pose and back.n == 5


def test_read_does_not_call_the_classes_new():
    rec = SeqRecord(PoseWithNew)
    before = PoseWithNew.made
    pose = rec.read()
    assert type(pose) is PoseWithNew and PoseWithNew.made == before


def test_a_declared_class_whose_instances_have_a_dict_works_too():
    rec = SeqRecord(PoseWithDict)
    rec.update(x=4.0)
    pose = rec.read()
    assert type(pose) is PoseWithDict and pose.x == 4.0 and vars(pose) == {}


def test_update_and_write_sections_take_the_declared_names():
    rec = SeqRecord(Pose)
    rec.update(x=1.0, ok=True)
    with rec.write() as w:
        w.n += 2
        w.update(y=-1.0)
    assert rec.read() == Pose(1.0, -1.0, 2, True)


def test_annotated_gives_any_format_code_as_it_is():
    rec = SeqRecord(Wide)
    assert rec.format == SeqRecord(count="Q", samples="4d", flag="?").format
    rec.update(count=2**64 - 1, samples=[1, 2, 3, 4])
    assert rec.read() == Wide(2**64 - 1, (1.0, 2.0, 3.0, 4.0), False)


def test_string_annotations_are_resolved_in_the_classes_module():
    rec = SeqRecord(Stringly)
    assert rec.format == SeqRecord(x="d", v="2d").format


def test_defaults_are_allowed_and_not_applied():
    assert SeqRecord(WithDefault).read() == WithDefault(0.0, False)


def test_buffer_size_create_and_attach_take_the_class():
    size = SeqRecord.buffer_size(Pose)
    assert size == SeqRecord.buffer_size(x="d", y="d", n="q", ok="?")
    block = shared_memory.SharedMemory(create=True, size=size)
    try:
        writer = SeqRecord.create(block.buf, Pose)
        writer.update(x=3.0)
        reader = SeqRecord.attach(block.buf, Pose)
        assert reader.read() == Pose(3.0, 0.0, 0, False)
        assert type(SeqRecord.attach(block.buf).read()) is not Pose
        del writer, reader
    finally:
        block.close()
        block.unlink()


def test_create_takes_overwrite_with_the_class():
    block = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(Pose))
    try:
        SeqRecord.create(block.buf, Pose).update(x=1.0)
        with pytest.raises(ValueError, match="already holds"):
            SeqRecord.create(block.buf, Pose)
        assert SeqRecord.create(block.buf, Pose, overwrite=True).read().x == 0.0
    finally:
        block.close()
        block.unlink()


def test_attach_with_a_class_of_other_fields_is_refused():
    block = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(Pose))
    try:
        rec = SeqRecord.create(block.buf, Pose)
        with pytest.raises(ValueError, match="other fields"):
            SeqRecord.attach(block.buf, WithDefault)
        del rec
    finally:
        block.close()
        block.unlink()


CHILD = """
import sys
from multiprocessing import resource_tracker, shared_memory
from typing import NamedTuple
from seqlock_py import SeqRecord

class Pose(NamedTuple):
    x: float
    y: float
    n: int
    ok: bool

block = shared_memory.SharedMemory(name=sys.argv[1])
resource_tracker.unregister(block._name, "shared_memory")
rec = SeqRecord.attach(block.buf, Pose)
pose = rec.read()
print("read", type(pose).__name__, pose.x, pose.n, pose.ok, flush=True)
rec.update(y=pose.x * 2)
del rec, pose
block.close()
"""


def test_a_child_process_attaches_with_the_class():
    block = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(Pose))
    try:
        rec = SeqRecord.create(block.buf, Pose)
        rec.update(x=1.25, n=7, ok=True)
        with PythonProcess(CHILD, block.name) as child:
            assert child.expect("read").split() == ["read", "Pose", "1.25", "7", "True"]
            code, out = child.finish()
        assert code == 0, out
        assert rec.read() == Pose(1.25, 2.5, 7, True)
        del rec
    finally:
        block.close()
        block.unlink()


@pytest.mark.parametrize("decl", [
    int, tuple, object, 5, "Pose", Pose(0.0, 0.0, 0, False), NamedTuple,
    collections.namedtuple("Plain", "x y"),
], ids=repr)
def test_what_is_no_namedtuple_class_is_refused(decl):
    with pytest.raises(TypeError, match="NamedTuple|annotation"):
        SeqRecord(decl)


class Texty(NamedTuple):
    s: str


class Listy(NamedTuple):
    v: list[float]


class Maybe(NamedTuple):
    x: Optional[float]


class Nested(NamedTuple):
    p: Pose


class NoCode(NamedTuple):
    x: Annotated[float, 3]


class TwoCodes(NamedTuple):
    x: Annotated[float, "d", "f"]


@pytest.mark.parametrize("decl", [Texty, Listy, Maybe, Nested, NoCode, TwoCodes],
                         ids=lambda c: c.__name__)
def test_an_annotation_without_a_format_code_is_refused(decl):
    with pytest.raises(TypeError, match=f"{decl.__name__}\\.\\w+"):
        SeqRecord(decl)


def test_an_unresolvable_string_annotation_is_refused():
    class Local(NamedTuple):
        x: "Undefined"  # noqa: F821

    with pytest.raises(TypeError, match="cannot resolve the annotations of"):
        SeqRecord(Local)


def test_an_unknown_code_in_annotated_gets_the_layouts_error():
    class Odd(NamedTuple):
        x: Annotated[float, "z"]

    with pytest.raises(ValueError, match="bad format 'z' for field 'x'"):
        SeqRecord(Odd)


@pytest.mark.parametrize("call", [
    lambda: SeqRecord(Pose, x="d"),
    lambda: SeqRecord.buffer_size(Pose, x="d"),
    lambda: SeqRecord.create(bytearray(4096), Pose, x="d"),
    lambda: SeqRecord.attach(bytearray(4096), Pose, x="d"),
], ids=["SeqRecord", "buffer_size", "create", "attach"])
def test_a_class_and_keyword_fields_together_are_refused(call):
    with pytest.raises(TypeError, match="not both"):
        call()


def test_evaluated_annotations_work_as_string_ones_do():
    # This file's annotations are strings (from __future__ import
    # annotations); the functional form gives evaluated ones.
    Functional = NamedTuple("Functional", [("x", float), ("v", Annotated[tuple[int, ...], "3q"])])
    rec = SeqRecord(Functional)
    assert rec.format == SeqRecord(x="d", v="3q").format
    assert type(rec.read()) is Functional
