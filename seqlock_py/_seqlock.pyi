"""Type stubs for the seqlock_py._seqlock extension module."""

import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from types import TracebackType
from typing import Any, Generic, Literal, ParamSpec, final, overload

from typing_extensions import Buffer, TypeVar

from ._snapshot import Snapshot

_P = ParamSpec("_P")
_T = TypeVar("_T")
# What a record's read() returns: a named Snapshot for fields given as
# keywords, the declared class for SeqRecord(SomeNamedTuple).
_S = TypeVar("_S", bound=tuple[Any, ...], default=Snapshot, covariant=True)
_NT = TypeVar("_NT", bound=tuple[Any, ...])

@final
class SeqLock:
    """A sequence lock: writers serialise, readers take no lock."""

    def __new__(cls, *, max_retries: int = 16) -> SeqLock: ...
    max_retries: int
    """Overlapped runs read() retries lock-free before it locks writers out once."""
    @property
    def read_retries(self) -> int:
        """Runs of read()'s fn discarded because a write overlapped them."""
    @property
    def read_fallbacks(self) -> int:
        """Times read() ran out of retries and took the lock."""
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
    ) -> Literal[False]: ...
    # readers
    def read(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Call fn until no write overlaps the call; return its result."""
    def read_begin(self) -> int:
        """Start a hand-written read; return the (even) sequence number."""
    def read_retry(self, seq: int, /) -> bool:
        """True if a write overlapped the read started with seq."""
    def read_versioned(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> tuple[int, _T]:
        """As read(), returning (sequence, result): the (even) sequence of the state fn read."""
    # readers that wait for news
    def wait(self, seq: int, timeout: float | None = None) -> bool:
        """True once a write section has ended since the state seq names; False on timeout."""
    def wait_async(self, seq: int, timeout: float | None = None) -> Coroutine[Any, Any, bool]:
        """wait() as a coroutine that never blocks the event loop."""
    def _waiter(self, seq: int, timeout: float | None = None) -> _Waiter: ...
    def _news_since(self, seq: int, /) -> bool: ...
    def _weak_waiter(self) -> _WeakWaiter: ...
    @property
    def _news_sequence(self) -> int: ...
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
    ) -> Literal[False]: ...

# A field value: float for 'd', int for 'q'/'Q', bool for '?', a tuple for arrays.
_Value = Any

@final
class ReaderInto:
    """A record's reader bound to one buffer, checked once: SeqRecord.reader_into(buffer) hands out its bound method into."""
    @property
    def record(self) -> SeqRecord[Any]: ...
    @property
    def buffer(self) -> Buffer: ...
    def into(self) -> int:
        """Copy one consistent snapshot into the buffer; return its (even) sequence."""

@final
class SeqRecord(Generic[_S]):
    """Numeric fields held in C as a latch: snapshots never wait for a writer."""

    @overload
    def __new__(cls, declaration: type[_NT], /) -> SeqRecord[_NT]:
        """A record of a typing.NamedTuple class's annotated fields; read() returns that class."""
    @overload
    def __new__(cls, declaration: None = None, /, **fields: str) -> SeqRecord[Snapshot]: ...
    @overload
    @classmethod
    def create(cls, buffer: Buffer, declaration: type[_NT], /, *, overwrite: bool = False) -> SeqRecord[_NT]:
        """Lay out a new, zeroed record in a writable (shared) buffer; ValueError if it holds a record already, unless overwrite=True."""
    @overload
    @classmethod
    def create(cls, buffer: Buffer, declaration: None = None, /, **fields: str) -> SeqRecord[Snapshot]: ...
    @overload
    @classmethod
    def create(cls, buffer: Buffer, declaration: None = None, /, *, overwrite: bool, **fields: str) -> SeqRecord[Snapshot]: ...
    @overload
    @classmethod
    def attach(cls, buffer: Buffer, declaration: type[_NT], /) -> SeqRecord[_NT]:
        """Open a record create() laid out (a read-only buffer gives a read-only record); without fields, the layout the buffer holds; with them, ValueError if it differs."""
    @overload
    @classmethod
    def attach(cls, buffer: Buffer, declaration: None = None, /, **fields: str) -> SeqRecord[Snapshot]: ...
    @overload
    @classmethod
    def buffer_size(cls, declaration: type[tuple[Any, ...]], /) -> int:
        """Bytes of buffer create() needs for these fields."""
    @overload
    @classmethod
    def buffer_size(cls, declaration: None = None, /, **fields: str) -> int: ...
    @overload
    @classmethod
    def create_shared(cls, name: str, declaration: type[_NT], /) -> SeqRecord[_NT]:
        """create() in a new named shared memory block the record owns, named once laid out: close() closes and unlinks it; FileExistsError if the name exists."""
    @overload
    @classmethod
    def create_shared(cls, name: str, declaration: None = None, /, **fields: str) -> SeqRecord[Snapshot]: ...
    @overload
    @classmethod
    def attach_shared(cls, name: str, declaration: type[_NT], /) -> SeqRecord[_NT]:
        """attach() to create_shared()'s block, untracked by the resource tracker: close() closes the mapping only; FileNotFoundError if missing (or not yet laid out)."""
    @overload
    @classmethod
    def attach_shared(cls, name: str, declaration: None = None, /, **fields: str) -> SeqRecord[Snapshot]: ...
    def close(self) -> None:
        """Release the buffer; later calls raise ValueError; BufferError while a write section opened through it is open."""
    @property
    def closed(self) -> bool:
        """True once close() has been called."""
    def __enter__(self) -> SeqRecord[_S]: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> Literal[False]: ...
    def _close_with(self, closer: Callable[[], object], /) -> None: ...
    @property
    def fields(self) -> tuple[str, ...]:
        """Field names, in order."""
    @property
    def format(self) -> str:
        """Native struct format of a snapshot."""
    @property
    def dtype(self) -> Any:
        """A numpy structured dtype of a snapshot (numpy.dtype; imports numpy when asked)."""
    @property
    def nbytes(self) -> int:
        """Bytes in a snapshot: struct.calcsize(self.format)."""
    @property
    def sequence(self) -> int:
        """Odd while a write section is open; +2 per section (also a rolled-back one)."""
    @property
    def readonly(self) -> bool:
        """True if attached to memory this process may only read: update() and write() raise TypeError."""
    max_retries: int
    """Overlapped copies a read retries at full speed before it yields the CPU between copies (it never locks)."""
    @property
    def read_retries(self) -> int: ...
    @property
    def read_fallbacks(self) -> int: ...
    @property
    def recoveries(self) -> int:
        """Write sections discarded because their writer died inside them."""
    def locked(self) -> bool: ...
    def read(self) -> _S:
        """One consistent snapshot, fields in order (also attributes); never waits for a writer."""
    def read_versioned(self) -> tuple[int, _S]:
        """(sequence, values): one snapshot and the (even) sequence of exactly that state."""
    def read_dict(self) -> dict[str, _Value]:
        """One consistent snapshot as a dict."""
    def read_into(self, buffer: Buffer, /, *, field: str | None = None) -> int:
        """Copy a snapshot (or one array field's value) into buffer; return its (even) sequence."""
    def reader_into(self, buffer: Buffer, /, *, field: str | None = None) -> Callable[[], int]:
        """read_into(buffer, field=field) bound to the buffer, checked once: the fast form of a copying loop (ReaderInto.into, bound)."""
    def __getitem__(self, name: str, /) -> _Value: ...
    def get(self, name: str, default: Any = None, /) -> _Value:
        """One field's consistent value, or default for an unknown name."""
    def update(self, **values: _Value) -> None:
        """Set fields in one write section; nothing is written if any value is bad."""
    def write(self, timeout: float | None = None) -> RecordWriter:
        """A context manager for one multi-step write section."""
    # readers that wait for news
    def wait(self, seq: int, timeout: float | None = None) -> bool:
        """True once a write section has ended since the state seq names; False on timeout."""
    def wait_async(self, seq: int, timeout: float | None = None) -> Coroutine[Any, Any, bool]:
        """wait() as a coroutine that never blocks the event loop."""
    def changes(self, *, timeout: float | None = None) -> Iterator[tuple[int, _S]]:
        """(sequence, values): the current snapshot, then one per write; ends after timeout without one."""
    def changes_async(self, *, timeout: float | None = None) -> AsyncIterator[tuple[int, _S]]:
        """changes() for async for."""
    def _waiter(self, seq: int, timeout: float | None = None) -> _Waiter: ...
    def _news_since(self, seq: int, /) -> bool: ...
    def _weak_waiter(self) -> _WeakWaiter: ...
    @property
    def _news_sequence(self) -> int: ...
    def __reduce__(self) -> Any: ...

@final
class RecordWriter:
    """One write section of a SeqRecord; fields are attributes inside it."""

    def __enter__(self) -> RecordWriter: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> Literal[False]: ...
    def update(self, **values: _Value) -> None: ...
    def __getattr__(self, name: str) -> Any: ...
    def __setattr__(self, name: str, value: Any, /) -> None: ...

@final
class ArrayField:
    """An array field inside a write section."""

    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, index: int, /) -> Any: ...
    @overload
    def __getitem__(self, index: slice, /) -> tuple[Any, ...]: ...
    def __setitem__(self, index: int | slice, value: Any, /) -> None: ...
    def __iter__(self) -> Iterator[Any]: ...
    def tolist(self) -> list[Any]:
        """The field's value in this section as a list (nested lists for a shape)."""
    if sys.version_info >= (3, 12):  # the buffer protocol shows as a method from 3.12
        def __buffer__(self, flags: int, /) -> memoryview:
            """A writable view of the section's copy of the field (committed with the section)."""

@final
class SeqRing(Generic[_S]):
    """A broadcast ring of entries of one record layout: readers never wait, and count what they missed."""

    @overload
    def __new__(cls, capacity: int, declaration: type[_NT], /) -> SeqRing[_NT]:
        """A ring of capacity entries of a typing.NamedTuple class's fields; poll() returns that class; MemoryError (naming the bytes) beyond the machine's memory."""
    @overload
    def __new__(cls, capacity: int, declaration: None = None, /, **fields: str) -> SeqRing[Snapshot]: ...
    @overload
    @classmethod
    def buffer_size(cls, capacity: int, declaration: type[tuple[Any, ...]], /) -> int:
        """Bytes of buffer create() needs for capacity entries of these fields; OverflowError beyond a size_t."""
    @overload
    @classmethod
    def buffer_size(cls, capacity: int, declaration: None = None, /, **fields: str) -> int: ...
    @overload
    @classmethod
    def create(cls, buffer: Buffer, capacity: int, declaration: type[_NT], /, *, overwrite: bool = False) -> SeqRing[_NT]:
        """Lay out a new, empty ring in a writable (shared) buffer; ValueError if it holds a ring already, unless overwrite=True."""
    @overload
    @classmethod
    def create(cls, buffer: Buffer, capacity: int, declaration: None = None, /, **fields: str) -> SeqRing[Snapshot]: ...
    @overload
    @classmethod
    def create(cls, buffer: Buffer, capacity: int, declaration: None = None, /, *, overwrite: bool, **fields: str) -> SeqRing[Snapshot]: ...
    @overload
    @classmethod
    def attach(cls, buffer: Buffer, declaration: type[_NT], /) -> SeqRing[_NT]:
        """Open a ring create() laid out: capacity and (without fields) layout read from the buffer; a read-only buffer gives a read-only ring."""
    @overload
    @classmethod
    def attach(cls, buffer: Buffer, declaration: None = None, /, **fields: str) -> SeqRing[Snapshot]: ...
    @overload
    @classmethod
    def create_shared(cls, name: str, capacity: int, declaration: type[_NT], /) -> SeqRing[_NT]:
        """create() in a new named shared memory block the ring owns, named once laid out: close() closes and unlinks it; FileExistsError if the name exists; MemoryError beyond /dev/shm's free space."""
    @overload
    @classmethod
    def create_shared(cls, name: str, capacity: int, declaration: None = None, /, **fields: str) -> SeqRing[Snapshot]: ...
    @overload
    @classmethod
    def attach_shared(cls, name: str, declaration: type[_NT], /) -> SeqRing[_NT]:
        """attach() to create_shared()'s block, untracked by the resource tracker: close() closes the mapping only; FileNotFoundError if missing (or not yet laid out)."""
    @overload
    @classmethod
    def attach_shared(cls, name: str, declaration: None = None, /, **fields: str) -> SeqRing[Snapshot]: ...
    def append(self, **values: _Value) -> int:
        """Append one entry (fields not named are 0) and return its sequence number; TypeError on a read-only ring."""
    def reader(self, *, oldest: bool = False) -> RingReader[_S]:
        """A reader whose first entry is the next appended, or with oldest=True the oldest retained."""
    def read_last(self, n: int, /, out: Any = None) -> tuple[int, Any]:
        """(first, array): the newest entries, at most n, oldest first, as a numpy array of self.dtype; row i is entry first + i."""
    def close(self) -> None:
        """Release the buffer; later calls of the ring and its readers raise ValueError."""
    def _close_with(self, closer: Callable[[], object], /) -> None: ...
    def _waiter(self, seq: int, timeout: float | None = None) -> _Waiter: ...
    def _news_since(self, seq: int, /) -> bool: ...
    def _weak_waiter(self) -> _WeakWaiter: ...
    @property
    def _news_sequence(self) -> int: ...
    def __enter__(self) -> SeqRing[_S]: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc_value: BaseException | None, traceback: TracebackType | None, /
    ) -> Literal[False]: ...
    def __class_getitem__(cls, item: Any, /) -> Any: ...
    @property
    def head(self) -> int:
        """Entries ever appended: the sequence number of the next."""
    @property
    def capacity(self) -> int:
        """Entries the ring retains."""
    @property
    def recoveries(self) -> int:
        """Entries a dead writer left half written: discarded, never delivered."""
    @property
    def fields(self) -> tuple[str, ...]:
        """The field names, in order."""
    @property
    def format(self) -> str:
        """The native struct format of one entry."""
    @property
    def dtype(self) -> Any:
        """A numpy structured dtype of one entry (imports numpy)."""
    @property
    def nbytes(self) -> int:
        """Bytes in one entry."""
    @property
    def readonly(self) -> bool:
        """True if attached to memory this process may only read."""
    @property
    def closed(self) -> bool:
        """True once close() has been called."""

@final
class RingReader(Generic[_S]):
    """One reader of a SeqRing: its place and missed count are its own; one thread at a time."""

    def poll(self, max_entries: int | None = None) -> list[tuple[int, _S]]:
        """The entries appended since the last poll, in order, as (sequence, snapshot) pairs, at most max_entries of them if given; RuntimeError once the ring was seen rewound, and at every call after."""
    def poll_one(self) -> _S | None:
        """The next entry this reader has not polled (its sequence number is then next_sequence - 1), or None: poll(1) without the list and the pair."""
    def wait(self, timeout: float | None = None) -> bool:
        """True once an entry this reader has not polled is there (or the ring was rewound), False on timeout."""
    def wait_async(self, timeout: float | None = None) -> Coroutine[Any, Any, bool]:
        """wait(timeout), awaited without blocking the event loop."""
    @property
    def missed(self) -> int:
        """Entries this reader was lapped past (overwritten before or while it copied them)."""
    @property
    def next_sequence(self) -> int:
        """The sequence number of the next entry this reader wants."""
    @property
    def ring(self) -> SeqRing[_S]:
        """The ring this reader follows."""

@final
class _Waiter:
    """One cancellable wait (for seqlock_py._news; not public)."""

    def wait(self) -> bool: ...
    def next(self, seq: int, timeout: float | None = None) -> int | None: ...
    def cancel(self) -> None: ...

@final
class _WeakWaiter:
    """One cancellable wait holding no reference to its owner (for seqlock_py._news; not public)."""

    def next(self, seq: int, timeout: float | None, /) -> int | None: ...
    def cancel(self) -> None: ...
    def is_for(self, owner: object, /) -> bool: ...

def _snapshot_class(base: type[Snapshot], names: tuple[str, ...], /) -> type[Snapshot]:
    """A named snapshot class (for seqlock_py._snapshot; not public)."""

def _reassert_bus_guard() -> None:
    """Put the SIGBUS handler guarding readers of records in files back in place (not public)."""
