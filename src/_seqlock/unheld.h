/*
 * unheld.h - waits that hold no reference to their owner (unheld.c), so
 * that a thread may sleep on a lock's count while the lock, record or
 * ring is freed under it: the asyncio watcher (news.c: _WeakWaiter)
 * stays asleep on an owner between a consumer's awaited waits without
 * keeping it alive.
 *
 * Such a wait cannot pin the owner through the owner (its memory may be
 * freed), so it pins through an anchor of its own: a small block the
 * owner and each such waiter share.  The waiter publishes the owner's key
 * (in_use.h), fences, then reads anchor->gone; the owner's deallocation
 * stores gone, fences, then looks for the key in every thread's slots
 * and, while it is there, wakes the sleepers and waits.  Either the
 * waiter sees gone (and touches nothing) or the deallocation sees its
 * slot (and the memory stays until it empties).  Both fences are full
 * ones (in_use_enter_fenced(), in_use_found()), so a deallocation, which
 * cannot raise, never needs membarrier().  The waiter runs no Python code
 * while pinned (it is detached throughout): no deallocation of the owner
 * can run on its own thread inside its pin.
 */
#ifndef SEQLOCK_PY_UNHELD_H
#define SEQLOCK_PY_UNHELD_H

#include "lock_path.h"

typedef struct unheld_anchor {
    _Atomic uint32_t gone; /* the owner is going: pin nothing of it */
    _Atomic uint32_t refs; /* the owner's and each waiter's */
} unheld_anchor;

/* b's anchor, made on first use, with a reference for the caller, who
 * holds a reference to b's owner; NULL with MemoryError. */
unheld_anchor *unheld_anchor_take(bound_lock *b);
void unheld_anchor_release(unheld_anchor *a);

/* What a wait on b pins: its record (or ring), which close() looks for
 * too, else the lock itself. */
static inline const void *
unheld_key(const bound_lock *b)
{
    return b->record != NULL ? (const void *)b->record : (const void *)b;
}

/* For the owner's deallocation, and the collector's clear, before they
 * let b's memory go: no unheld wait is inside it afterwards, and none
 * starts.  memory_there: b's memory is still there to wake its sleepers
 * through (else they look at their record's closed word and leave).
 * Waits, detached, for sleepers to leave; no-op if no unheld wait was
 * ever made. */
void unheld_let_go(bound_lock *b, int memory_there);

#endif /* SEQLOCK_PY_UNHELD_H */
