"""Type stubs for the seqlock_py._seqlock extension module."""

from collections.abc import Callable
from types import TracebackType
from typing import Any, ParamSpec, TypeVar, final

_P = ParamSpec("_P")
_T = TypeVar("_T")

@final
class SeqLock:
    """A sequence lock: writers serialise, readers take no lock."""

    def __new__(cls) -> SeqLock: ...
    @property
    def sequence(self) -> int:
        """Even while no writer is active, odd during a write; +2 per write."""
    def locked(self) -> bool:
        """True if some thread holds the write lock."""
    # writers
    def acquire_write(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the write lock (threading.Lock.acquire conventions)."""
    def release_write(self) -> None:
        """Release the write lock; RuntimeError if this thread holds none."""
    def write(self, timeout: float | None = None) -> WriteSection:
        """A context manager for one write section; TimeoutError on timeout."""
    def __enter__(self) -> SeqLock: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> bool: ...
    # readers
    def read(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Call fn until no write overlaps the call; return its result."""
    def read_begin(self) -> int:
        """Start a hand-written read; return the (even) sequence number."""
    def read_retry(self, seq: int, /) -> bool:
        """True if a write overlapped the read started with seq."""
    def __reduce__(self) -> Any: ...

@final
class WriteSection:
    """One write section of a SeqLock, made by SeqLock.write()."""

    def __enter__(self) -> SeqLock: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> bool: ...
