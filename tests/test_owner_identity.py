"""A write lock names its owner so that nobody mistakes it for someone else.

A record in shared memory may be written by processes in different PID
namespaces (containers sharing /dev/shm with the host), whose thread ids
mean nothing to each other, and by processes whose pid is reused after
they die.  Whatever the lock word stores, a live writer keeps its lock
wherever its waiters run, two writers are never taken for one, and a dead
writer is recovered even when its pid now names another process.

Each scenario runs its processes through ``unshare --pid --fork`` and
skips where PID namespaces are refused (not root).
"""
import sys
from multiprocessing import shared_memory

import pytest

from process_helpers import (
    HOLD_A_SECTION_SCRIPT,
    PythonProcess,
    free_pid_number,
    require_pid_namespaces,
    run_python,
)
from record_helpers import map_shared_memory
from seqlock_py import SeqRecord

FIELDS = dict(a="q", b="q", total="q")  # invariant: a + b == total
BEFORE = (1, 2, 3)  # the last complete write before each scenario
AFTER = (10, 20, 30)  # what the namespaced writer's section completes

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="needs Linux: PID namespaces, /dev/shm"
)


@pytest.fixture
def shared_record():
    """A record in a SharedMemory block (/dev/shm) holding BEFORE."""
    require_pid_namespaces()
    shm = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(**FIELDS))
    shm.close()  # the block lives on until unlink(); the test maps it itself
    try:
        rec = SeqRecord.create(map_shared_memory(shm.name), **FIELDS)
        rec.update(**dict(zip(FIELDS, BEFORE)))
        yield {"rec": rec, "name": shm.name}
    finally:
        shm.unlink()


# Child scripts: argv[1] is the SharedMemory block's name.

# Try to write within 0.5 s: exit 0 on TimeoutError (the lock is held),
# 1 if the write went through.  Must run as pid 1 when argv[2] == "pid1".
TRY_TO_WRITE = """
import os, sys
from record_helpers import open_shared_record

if sys.argv[2:] == ["pid1"]:
    assert os.getpid() == 1, f"not pid 1 of a new namespace: {os.getpid()}"
rec = open_shared_record(sys.argv[1], a="q", b="q", total="q")
try:
    with rec.write(timeout=0.5):
        print("took the write lock while its holder was alive", flush=True)
        sys.exit(1)
except TimeoutError:
    sys.exit(0)
"""

# pid 1 of its namespace: a writer child (pid 2) dies (SIGKILL) inside a
# half-written section; a long-running process is then given the dead
# writer's pid (through ns_last_pid); read() must still recover the last
# complete state and a write must go through.
DEAD_WRITERS_PID_REUSED = """
import mmap, os, signal, subprocess, sys, threading, time
from seqlock_py import SeqRecord
from process_helpers import next_pid_will_be

def done(code, *message):
    print(*message, flush=True)
    os._exit(code)

fields = dict(a="q", b="q", total="q")
buf = mmap.mmap(-1, SeqRecord.buffer_size(**fields))  # shared with the fork
rec = SeqRecord.create(buf, **fields)
rec.update(a=1, b=2, total=3)
ready_r, ready_w = os.pipe()
writer = os.fork()
if writer == 0:
    section = rec.write()
    w = section.__enter__()
    w.a = 10  # half a write
    os.write(ready_w, b"x")
    time.sleep(60)  # killed here
    os._exit(3)
os.read(ready_r, 1)
os.kill(writer, signal.SIGKILL)
os.waitpid(writer, 0)  # reaped: its pid is free again

for attempt in range(5):
    next_pid_will_be(writer)
    sleeper = subprocess.Popen(["sleep", "60"])
    if sleeper.pid == writer:
        break
    sleeper.kill()
    sleeper.wait()
else:
    done(77, f"could not give pid {writer} to a new process")

try:
    snapshot = []
    reader = threading.Thread(target=lambda: snapshot.append(rec.read()), daemon=True)
    reader.start()
    reader.join(10)
    if not snapshot:
        done(1, f"read() still waiting after 10 s for the dead writer {writer}, "
                f"whose pid now names a live process")
    if snapshot[0] != (1, 2, 3):
        done(1, f"read() returned {snapshot[0]}, not the last complete state")
    try:
        with rec.write(timeout=5) as w:
            w.update(a=5, total=7)
    except TimeoutError:
        done(1, "write(timeout=5) timed out waiting for the dead writer")
    if rec.read() != (5, 2, 7):
        done(1, f"after the write: {rec.read()}")
finally:
    sleeper.kill()
done(0, "ok")
"""


def test_live_writer_in_another_pid_namespace_keeps_its_lock(shared_record):
    rec = shared_record["rec"]
    # The writer's thread id in its namespace is a number that names no
    # thread here, as it would on a host running the writer in a container.
    with PythonProcess(HOLD_A_SECTION_SCRIPT, shared_record["name"], free_pid_number(),
                       pid_namespace=True) as writer:
        writer.expect("ready")
        with pytest.raises(TimeoutError):
            with rec.write(timeout=0.5):
                pass
        assert rec.read() == BEFORE  # the last complete write, never half of one
        writer.tell("finish")
        code, output = writer.finish()
    assert code == 0, f"the writer's own section failed:\n{output}"
    assert rec.read() == AFTER


def test_live_writer_outside_the_pid_namespace_keeps_its_lock(shared_record):
    rec = shared_record["rec"]
    section = rec.write()
    w = section.__enter__()
    w.a = 10  # half a write
    code, output = run_python(TRY_TO_WRITE, shared_record["name"], pid_namespace=True)
    assert code == 0, f"a process in another PID namespace did not wait:\n{output}"
    w.b = 20
    w.total = 30
    section.__exit__(None, None, None)
    assert rec.read() == AFTER


def test_processes_that_are_both_pid_1_do_not_share_a_lock(shared_record):
    rec = shared_record["rec"]
    with PythonProcess(HOLD_A_SECTION_SCRIPT, shared_record["name"], pid_namespace=True) as holder:
        holder.expect("ready")
        code, output = run_python(TRY_TO_WRITE, shared_record["name"], "pid1", pid_namespace=True)
        assert code == 0, f"the second pid 1 did not wait for the first:\n{output}"
        holder.tell("finish")
        holder_code, holder_output = holder.finish()
    assert holder_code == 0, f"the holder's own section failed:\n{holder_output}"
    assert rec.read() == AFTER


def test_dead_writers_reused_pid_does_not_keep_waiters_waiting():
    require_pid_namespaces()
    code, output = run_python(DEAD_WRITERS_PID_REUSED, pid_namespace=True)
    assert code == 0, output
