"""Named snapshots: what ``SeqRecord.read()`` returns for a record declared
with keywords (``SeqRecord(x="d", n="q")``).

A snapshot is a tuple (unpacking, indexing, ``==`` with a plain tuple and
hashing work as for a tuple) whose fields are also attributes: ``snap.x``.
Each layout gets one class, made once when a record is built (by the
extension, at this module's request) and cached by its field names; the
extension then allocates every snapshot as an instance of it, filling
the items as it fills a tuple's, so no Python code runs per read.

A field whose name begins and ends with two underscores gets no attribute
(those names are Python's: ``__class__``, ``__len__``...): read it by index
or ``rec[name]``.  Any other field name, even a keyword (``getattr(snap,
"class")``) or one that hides a tuple method (``count``, ``index``), is an
attribute, as in ``collections.namedtuple``.  A snapshot pickles as its
field names and values, and unpickles as a snapshot of the same names.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, ClassVar

from ._seqlock import _snapshot_class

__all__ = ["Snapshot"]


class Snapshot(tuple[Any, ...]):
    """One consistent snapshot of a SeqRecord: a tuple of the fields in
    order whose fields are also attributes (``snap.x``).  The base class of
    every layout's snapshot class (for isinstance and annotations)."""

    __module__ = "seqlock_py"

    __slots__ = ()
    # The field names, as namedtuple's _fields (a field called _fields
    # hides it: the methods below use __field_names__, which no field's
    # attribute can hide).
    _fields: ClassVar[tuple[str, ...]] = ()
    __field_names__: ClassVar[tuple[str, ...]] = ()

    def __repr__(self) -> str:
        names = type(self).__field_names__
        if len(names) != len(self):
            return f"Snapshot{tuple.__repr__(self)}"
        return "Snapshot(" + ", ".join(
            f"{name}={value!r}" for name, value in zip(names, self)) + ")"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self).__field_names__, tuple(self)))

    def _asdict(self) -> dict[str, Any]:
        """The fields as a dict of name to value (as read_dict() gives)."""
        return dict(zip(type(self).__field_names__, self))

    if TYPE_CHECKING:  # fields are attributes (of each layout's class)
        def __getattr__(self, name: str) -> Any: ...


@functools.lru_cache(maxsize=256)
def snapshot_class(names: tuple[str, ...]) -> type[Snapshot]:
    """The snapshot class of a record with these field names (one per
    names, made in C: its fields are read-only attributes and it frees its
    instances without Python's generic deallocation)."""
    cls: type[Snapshot] = _snapshot_class(Snapshot, names)
    return cls


def _rebuild(names: tuple[str, ...], values: tuple[Any, ...]) -> Snapshot:
    """A pickled snapshot, unpickled."""
    return snapshot_class(tuple(names))(values)
