"""A scribbler storm for test_lock_corruption.py: a co-tenant process
rewrites random 32-bit words of a live record (header, lock words, layout
text, both copies) at a high rate, while readers (a read-only one too),
waiters and writers run in other processes.  run_storm() returns a report:
for each role its exit status and what each call saw (counts by outcome),
the worst overrun of a call with a timeout past it (max_over) and the
longest read (max_read); the bytes written outside the record (canaries
of a page on each side); how many rewrites the scribbler made.

Run as a script: python scribbler_storm.py SECONDS MODE SEED [ROLES]
(MODE: all; trusted: not what a writer trusts co-writers with, the
beacon's kind at 240-243 and its robust-list links at 248-263; nobeacon:
not bytes 224-263; header: the first 320 bytes only: record.h, version 6)."""
import json, os, random, struct, subprocess, sys, time, mmap, signal

from seqlock_py import SeqRecord

FIELDS = dict(x="d", n="q", arr="40d", flag="?")
PRE = 4096
CANARY = bytes((i * 37 + 11) % 251 for i in range(PRE))
#: The byte ranges each mode leaves alone.  "trusted": the beacon's kind
#: (glibc reads it again after the writer's check: a kind rewritten in
#: those few instructions sends glibc down a path that asserts) and its
#: robust-list links (glibc's unlock follows them): docs/processes.md,
#: "What a record trusts".
SKIPS = {"trusted": ((240, 244), (248, 264)), "nobeacon": ((224, 264),)}

ROLE = r'''
import asyncio, json, mmap, os, random, sys, time
from seqlock_py import SeqRecord
path, pre, size, role, duration, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], float(sys.argv[5]), int(sys.argv[6])
FIELDS = dict(x="d", n="q", arr="40d", flag="?")
rng = random.Random(seed)
fd = os.open(path, os.O_RDONLY if role == "ro" else os.O_RDWR)
m = mmap.mmap(fd, 0, access=mmap.ACCESS_READ if role == "ro" else mmap.ACCESS_WRITE)
view = memoryview(m)[pre:pre + size]
counts = {}
def bump(k): counts[k] = counts.get(k, 0) + 1
over = {"max_over": 0.0, "max_read": 0.0, "calls": 0, "worst": {}}
rec = SeqRecord.attach(view, **FIELDS)   # before the scribbler starts
print("attached", flush=True)
end = time.monotonic() + duration
buf = bytearray(rec.nbytes)
def timed(fn, timeout):
    t = time.monotonic()
    try:
        r = fn()
        bump(fn.__name__ + ":ok")
    except Exception as e:
        bump(fn.__name__ + ":" + type(e).__name__ + ":" + str(e)[:60])
    dt = time.monotonic() - t
    over["calls"] += 1
    if timeout is None:
        over["max_read"] = max(over["max_read"], dt)
    else:
        over["max_over"] = max(over["max_over"], dt - timeout)
    name = fn.__name__
    if dt - (timeout or 0) > over["worst"].get(name, (0,))[0]:
        over["worst"][name] = (round(dt - (timeout or 0), 4), timeout)
async def aw(seq, t):
    return await rec.wait_async(seq, t)
async def awf(seq, t):
    try:
        return await asyncio.wait_for(rec.wait_async(seq), t)
    except asyncio.TimeoutError:
        return False
while time.monotonic() < end:
    if role in ("reader", "ro"):
        k = rng.randrange(9 if role == "ro" else 7)  # waits of a writable record: the waiter role
        if k == 0:
            def read(): return rec.read()
            timed(read, None)
        elif k == 1:
            def read_into(): return rec.read_into(buf)
            timed(read_into, None)
        elif k == 2:
            def read_versioned(): return rec.read_versioned()
            timed(read_versioned, None)
        elif k == 3:
            def getitem(): return rec["arr"]
            timed(getitem, None)
        elif k == 4:
            def get(): return rec.get("x")
            timed(get, None)
        elif k == 5:
            def read_dict(): return rec.read_dict()
            timed(read_dict, None)
        elif k == 6:
            def misc(): return (rec.sequence, rec.locked, repr(rec), rec.recoveries)
            timed(misc, None)
        else:
            t = rng.choice([0, 0.001, 0.01, 0.03])
            def wait():
                s = rec.sequence
                return rec.wait(s, t)
            timed(wait, t)
    elif role == "waiter":
        k = rng.randrange(4)
        t = rng.choice([0, 0.001, 0.01, 0.03])
        try:
            s = rec.sequence
        except Exception as e:
            bump("seq:" + type(e).__name__); continue
        if k == 0:
            def wait(): return rec.wait(s, t)
            timed(wait, t)
        elif k == 1:
            def wait_async(): return asyncio.run(aw(s, t))
            timed(wait_async, t + 0.05)
        elif k == 2:
            def wait_for(): return asyncio.run(awf(s, t))
            timed(wait_for, t + 0.05)
        else:
            def changes():
                for i, _ in zip(range(3), rec.changes(timeout=t)):
                    pass
            timed(changes, 4 * t)
    elif role == "writer":
        t = rng.choice([0, 0.001, 0.01, 0.05])
        def write():
            with rec.write(timeout=t) as w:
                w.x = rng.random(); w.n = rng.randrange(1 << 40)
                w.arr[rng.randrange(40)] = 1.5
        timed(write, t)
        def update():
            # update() has no timeout
            rec.update(x=1.0, n=2)
        if rng.random() < 0.2:
            timed(update, None)
print(json.dumps({"role": role, "counts": counts, **over}), flush=True)
os._exit(0)
'''

SCRIB = r'''
import mmap, os, random, struct, sys, time
path, pre, size, duration, seed, lo, hi, skips = sys.argv[1:9]
pre, size, seed, lo, hi = map(int, (pre, size, seed, lo, hi))
skips = [tuple(map(int, r.split("-"))) for r in skips.split(",") if r]
rng = random.Random(seed)
fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, 0)
end = time.monotonic() + float(duration)
n = 0
words = [o for o in range(lo, hi, 4) if not any(a <= o < b for a, b in skips)]
while time.monotonic() < end:
    off = rng.choice(words)
    cur = struct.unpack_from("I", m, pre + off)[0]
    c = rng.randrange(8)
    v = [0, rng.getrandbits(32), cur ^ (1 << rng.randrange(32)), cur + 1, cur - 1, 0xffffffff, 1, cur | 0x40000000][c] & 0xffffffff
    struct.pack_into("I", m, pre + off, v)
    n += 1
    if n % 64 == 0:
        time.sleep(rng.choice([0, 0, 0, 0.0005, 0.002]))
print(n, flush=True)
'''

def run_storm(duration, mode, seed, roles=("reader", "ro", "waiter", "writer", "writer"), python=None):
    if mode not in ("all", "header", *SKIPS):
        raise ValueError(f"unknown storm mode {mode!r}")
    python = python or sys.executable
    size = SeqRecord.buffer_size(**FIELDS)
    total = PRE + size + PRE
    path = f"/dev/shm/storm-{os.getpid()}"
    with open(path, "wb") as f:
        f.write(CANARY + bytes(size) + CANARY)
    fd = os.open(path, os.O_RDWR); m = mmap.mmap(fd, 0); os.close(fd)
    rec = SeqRecord.create(memoryview(m)[PRE:PRE + size], **FIELDS)
    rec.update(x=1.0, n=1, arr=[0.0] * 40, flag=True)
    del rec
    from process_helpers import child_env
    env = child_env()
    procs = []
    for i, role in enumerate(roles):
        # cwd "/": a checkout's source seqlock_py/ must not shadow the build
        procs.append((role, subprocess.Popen([python, "-X", "faulthandler", "-c", ROLE, path, str(PRE), str(size), role, str(duration), str(seed * 100 + i)],
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd="/")))
    for role, p in procs:  # every role attached before the first rewrite
        line = p.stdout.readline()
        if not line.startswith("attached"):
            errors = {}
            for other, q in procs:
                q.kill()
                errors[q.pid] = q.communicate()[1]
            m.close()
            os.unlink(path)
            raise RuntimeError(f"a {role} could not attach: {line!r} {errors[p.pid][-2000:]}")
    # scribble: the whole record but SKIPS[mode]
    lo, hi = 0, size
    skips = ",".join(f"{a}-{b}" for a, b in SKIPS.get(mode, ()))
    if mode == "header":
        hi = 320
    scr = subprocess.Popen([python, "-c", SCRIB, path, str(PRE), str(size), str(duration), str(seed), str(lo), str(hi), skips], stdout=subprocess.PIPE, text=True, env=env, cwd="/")
    report = {"mode": mode, "seed": seed, "roles": []}
    deadline = time.monotonic() + duration + 20
    for role, p in procs:
        try:
            out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
            rc = p.returncode
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGABRT) if False else None
            # dump the stack with faulthandler via SIGABRT
            p.send_signal(signal.SIGABRT)
            try:
                out, err = p.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill(); out, err = p.communicate()
            rc = "HANG"
        entry = {"role": role, "rc": rc}
        try:
            entry.update(json.loads(out.strip().splitlines()[-1]))
        except Exception:
            entry["stdout"] = out[-500:]
        if rc != 0:
            entry["stderr"] = err[-2500:]
        report["roles"].append(entry)
    scr_out, _ = scr.communicate(timeout=30)
    report["scribbles"] = scr_out.strip()
    outside = [i for i in range(PRE) if m[i] != CANARY[i]] + [i for i in range(PRE) if m[PRE + size + i] != CANARY[i]]
    report["outside_written"] = len(outside)
    m.close(); os.unlink(path)
    return report


if __name__ == "__main__":
    roles = sys.argv[4].split(",") if len(sys.argv) > 4 else ("reader", "ro", "waiter", "writer", "writer")
    print(json.dumps(run_storm(float(sys.argv[1]), sys.argv[2], int(sys.argv[3]), roles), indent=1))
