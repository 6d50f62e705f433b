"""seqlock_py: sequence locks for Python.

A seqlock protects a small amount of frequently read state.  Writers
serialise on a lock and bump a sequence counter before and after their
update; readers take no lock and write nothing to it: they note the
counter, copy the state, and retry if a write overlapped.  (On a
free-threaded build a call through a name all threads share still writes
the object's reference count: bind ``read = rec.read`` in each reader
thread for reads that scale with cores.)
"""

from ._seqlock import SeqLock, SeqRecord

__all__ = ["SeqLock", "SeqRecord"]
__version__ = "0.1.0"
