"""seqlock_py: sequence locks for Python.

A seqlock protects a small amount of frequently read state.  Writers
serialise on a lock and bump a sequence counter before and after their
update; readers take no lock and write nothing to it: they note the
counter, copy the state, and retry if a write overlapped.  (On a
free-threaded build a call through a name all threads share still writes
the object's reference count: bind ``read = rec.read`` in each reader
thread for reads that scale with cores.)
"""

import functools as _functools
from typing import Any as _Any, Callable as _Callable

try:
    from ._seqlock import ReaderInto, RingReader, SeqLock, SeqRecord, SeqRing, _reassert_bus_guard
except ModuleNotFoundError as _missing:
    if _missing.name != __name__ + "._seqlock":
        raise
    from pathlib import Path as _Path

    _here = _Path(__file__).resolve().parent
    if (_here.parent / "setup.py").is_file():
        _hint = (f"seqlock_py was imported from {_here}, a source checkout whose C "
                 "extension is not built (Python puts the current directory first "
                 "on sys.path). Run from another directory to use the installed "
                 "seqlock_py (or add -P: python -P -m seqlock_py), or build it "
                 "here: pip install -e .")
    else:
        _hint = (f"seqlock_py's C extension (seqlock_py._seqlock) is missing from "
                 f"{_here}: reinstall seqlock_py")
    raise ModuleNotFoundError(_hint, name=_missing.name) from None
from ._snapshot import Snapshot
# Imported now, not at a record's first changes() or wait_async(): an
# import in a thread while another thread runs C calls flat out waits a
# switch interval (5 ms) for each of its many GIL hand-overs (one per file
# system call), which made a first changes() take a second on 3.11.
from . import _news  # noqa: F401

__all__ = ["ReaderInto", "RingReader", "SeqLock", "SeqRecord", "SeqRing", "Snapshot"]
__version__ = "0.1.0"


def _keep_bus_guard(change: _Callable[..., _Any]) -> _Callable[..., _Any]:
    """faulthandler's `change`, after which the SIGBUS handler guarding
    readers of records in files (a truncated file: OSError, not a crash)
    is put back in place: faulthandler.disable() restores the handler it
    found, which may predate seqlock_py's."""

    @_functools.wraps(change)
    def changed(*args: _Any, **kwargs: _Any) -> _Any:
        try:
            return change(*args, **kwargs)
        finally:
            _reassert_bus_guard()

    changed.__seqlock_py_wrapped__ = True  # type: ignore[attr-defined]
    return changed


def _wrap_faulthandler() -> None:
    try:
        import faulthandler
    except ImportError:  # an isolated subinterpreter: none to change there
        return
    for name in ("enable", "disable", "register", "unregister"):
        change = getattr(faulthandler, name, None)
        if change is not None and not getattr(change, "__seqlock_py_wrapped__", False):
            setattr(faulthandler, name, _keep_bus_guard(change))


_wrap_faulthandler()
