"""Typed declarations: a record's fields from a ``typing.NamedTuple`` class.

``SeqRecord(Pose)``, ``SeqRecord.create(buf, Pose)``, ``attach(buf, Pose)``
and ``buffer_size(Pose)`` call ``fields_of(Pose)`` (the extension imports
this module on first use) and then build the record from the fields as if
they had been given as keywords; ``read()`` returns ``Pose`` instances.

Each field's annotation gives its format code: ``float`` is 'd' (float64),
``int`` 'q' (int64), ``bool`` '?'; ``Annotated[T, "code"]`` gives any other
code the record accepts (``Annotated[float, "f"]``, ``Annotated[tuple[float,
...], "16d"]``), passed through as it is: ``T`` is what a type checker sees,
the code is what the record stores.  Defaults are allowed but not applied:
a new record's fields are zero, as for keywords.
"""

from __future__ import annotations

import typing
from typing import Any

__all__ = ["fields_of"]

# Plain annotations and their codes (bool before int: exact types only).
_PLAIN: dict[Any, str] = {float: "d", int: "q", bool: "?"}

_HOW = ("use float ('d'), int ('q'), bool ('?'), or Annotated[T, \"code\"] "
        "for another format code, e.g. Annotated[float, \"f\"] or "
        "Annotated[tuple[float, ...], \"16d\"]")


def fields_of(decl: object) -> dict[str, str]:
    """The fields ``{name: code}``, in order, that a NamedTuple class
    declares; TypeError if decl is no such class or an annotation has no
    code."""
    fields = getattr(decl, "_fields", None) if isinstance(decl, type) else None
    if (not isinstance(decl, type) or not issubclass(decl, tuple)
            or not isinstance(fields, tuple)):
        raise TypeError(
            "SeqRecord takes fields as keywords (SeqRecord(x='d')) or a "
            "typing.NamedTuple class with annotated fields, not "
            f"{_describe(decl)}")
    name = decl.__qualname__
    try:
        hints = typing.get_type_hints(decl, include_extras=True)
    except Exception as exc:  # a string annotation naming nothing in reach
        raise TypeError(
            f"cannot resolve the annotations of {name} ({exc}): string "
            "annotations (from __future__ import annotations) are evaluated "
            f"in the globals of {decl.__module__!r}; names local to a "
            "function are not visible there") from exc
    codes: dict[str, str] = {}
    for field in fields:
        if not isinstance(field, str) or field not in hints:
            raise TypeError(
                f"{name}.{field} has no annotation (collections.namedtuple "
                "declares none: use typing.NamedTuple)")
        codes[field] = _code(name, field, hints[field])
    if not codes:
        raise TypeError(f"{name} has no fields: a record needs at least one")
    return codes


def _code(name: str, field: str, hint: Any) -> str:
    if typing.get_origin(hint) is typing.Annotated:
        found = [m for m in hint.__metadata__ if isinstance(m, str)]
        if len(found) != 1:
            raise TypeError(
                f"field {name}.{field}: Annotated[...] must carry one format "
                f"code string, found {len(found)} in {hint!r}")
        return found[0]
    if isinstance(hint, type) and hint in _PLAIN:
        return _PLAIN[hint]
    raise TypeError(
        f"field {name}.{field}: unsupported annotation {_describe(hint)}: "
        f"{_HOW}")


def _describe(obj: object) -> str:
    if isinstance(obj, type):
        return f"{obj.__module__}.{obj.__qualname__}" if obj.__module__ != "builtins" else obj.__qualname__
    return repr(obj)
