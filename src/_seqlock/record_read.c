/*
 * record_read.c - a SeqRecord reader's slow path: the latch read passes it
 * makes once a write overlapped its first copy (seqrecord.h: snapshot()).
 */
#include "seqrecord.h"

#include <sched.h>

static int
latch_read_passes(latch_read *r)
{
    for (int i = 0; i < r->passes; i++) {
        if (r->yield) {
            sched_yield();
        }
        if (r->ask_turn_of != NULL) {
            seqlock_ask_turn(r->ask_turn_of); /* again: it may have lapsed */
        }
        if (SEQLOCK_LIKELY(record_try_read(r->rv, r->dst, r->offset, r->n,
                                           &r->seq))) {
            return 1;
        }
        read_budget_count(&r->budget->retries);
    }
    return 0;
}

/* latch_read_passes() inside a guard if the record's memory needs one:
 * 1 or 0 as it returns, or -1 if the file behind the memory is gone. */
static int
guarded_latch_read(const bound_record *b, latch_read *r)
{
    if (b->guarded == NULL) {
        return latch_read_passes(r);
    }
    bus_guard guard;
    bus_guard_arm(&guard, b->guarded, b->guarded_len);
    if (bus_guard_enter(&guard) != 0) {
        bus_guard_left(&guard);
        return -1;
    }
    int whole = latch_read_passes(r);
    bus_guard_leave(&guard);
    return whole;
}

static int
drop_turn(void *lock)
{
    seqlock_drop_turn(lock);
    return 0;
}

/* snapshot()'s slow path: max_retries more passes at full speed; then, a
 * write storm keeping every copy overlapped, passes with the interpreter
 * released and the CPU yielded between them, a record this process may
 * write asking writers for a turn (seqlock_ask_turn()): they leave the
 * free lock word alone for a few milliseconds, a window in which a pass
 * completes.  The reader never takes the lock: a writer stopped or dead
 * cannot hold it up, and it never touches the lock's mutex, so no content
 * of the memory can turn it into a writer's trust. */
static int snapshot_retrying_pinned(SeqRecordObject *self, latch_read *r);

/* The GIL build pins the record here, where the GIL is let go (and signal
 * handlers run); the free-threaded build pinned it in snapshot(). */
Py_NO_INLINE int
snapshot_retrying(SeqRecordObject *self, latch_read *r)
{
#ifdef Py_GIL_DISABLED
    return snapshot_retrying_pinned(self, r);
#else
    if (record_pin(&self->rec) < 0) {
        return -1;
    }
    int result = snapshot_retrying_pinned(self, r);
    record_unpin(&self->rec);
    return result;
#endif
}

static int
snapshot_retrying_pinned(SeqRecordObject *self, latch_read *r)
{
    read_budget *budget = &self->lock.budget;
    read_budget_count(&budget->retries); /* the first pass */
    r->passes = read_budget_max(budget);
    int whole = guarded_latch_read(&self->rec, r);
    if (whole == 0) {
        read_budget_count(&budget->fallbacks);
        int ask = !self->rec.readonly;
        r->ask_turn_of = ask ? self->rec.view.lock : NULL;
        r->passes = DETACHED_PASSES;
        r->yield = 1;
        do {
            Py_BEGIN_ALLOW_THREADS
            whole = guarded_latch_read(&self->rec, r);
            Py_END_ALLOW_THREADS
        } while (whole == 0 && PyErr_CheckSignals() == 0
                 && (!record_is_closed(&self->rec)
                     || set_record_closed(&self->rec) == 0)); /* closed: stop */
        int unused;
        if (ask && whole >= 0
            && call_guarded(&self->rec, drop_turn, self->rec.view.lock,
                            &unused) < 0) {
            return -1;
        }
        if (whole == 0) {
            return -1; /* a signal handler raised, or close() came */
        }
    }
    if (whole < 0) {
        set_memory_gone();
        return -1;
    }
    return 0;
}


/* snapshot_pinned() but its inline case: the first pass inside the guard
 * if a file backs the memory, then snapshot_retrying() if a write
 * overlapped it. */
uint64_t
snapshot_slow(SeqRecordObject *self, void *dst, size_t offset, size_t n)
{
    const bound_record *b = &self->rec;
    uint64_t seq;
    int whole;
    if (b->guarded == NULL) {
        whole = record_try_read(&b->view, dst, offset, n, &seq);
    }
    else {
        bus_guard guard;
        bus_guard_arm(&guard, b->guarded, b->guarded_len);
        if (bus_guard_enter(&guard) != 0) {
            bus_guard_left(&guard);
            set_memory_gone();
            return SNAPSHOT_FAILED;
        }
        whole = record_try_read(&b->view, dst, offset, n, &seq);
        bus_guard_leave(&guard);
    }
    if (!whole) {
        latch_read r = {&b->view, &self->lock.budget, dst, offset, n, 0, 0,
                        NULL, 0};
        if (snapshot_retrying(self, &r) < 0) {
            return SNAPSHOT_FAILED;
        }
        seq = r.seq;
    }
    return seq & ~(uint64_t)1;
}
