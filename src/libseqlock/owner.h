/*
 * owner.h - who holds a lock word, whether a holder found in a gap is
 * gone, and whether a lock is stuck (owner.c).  Internal to the core: not
 * API.
 */
#ifndef SEQLOCK_OWNER_H
#define SEQLOCK_OWNER_H

#include "thread.h"

#define INITIALISING 1u /* `ready` while a first taker sets the beacon up */

/* Learn this thread's identity for its owner records (reads /proc once
 * per thread): before winning a word, so that recording itself after
 * makes no system call. */
SEQLOCK_INTERNAL int seqlock_know_myself_(struct lock_thread *t);
/* Just after winning the word: say that we hold it, and who we are. */
SEQLOCK_INTERNAL void seqlock_publish_owner_(seqlock_t *sl,
                                             struct lock_thread *t,
                                             uint64_t me);
/* The owner record as it stands, read seqlock-style; 0 if torn. */
SEQLOCK_INTERNAL int seqlock_read_owner_(const seqlock_t *sl,
                                         struct seqlock_owner *o);
/* Holder h's record, to put back if a takeover of h fails: the record
 * as it stands if it names h, else one naming h and nothing more (h was
 * held up before it recorded itself; waiters then wait for h as for a
 * holder they cannot look at). */
SEQLOCK_INTERNAL void seqlock_owner_of_(const seqlock_t *sl, uint64_t h,
                                        struct seqlock_owner *o);
/* Put an owner record back (a takeover that failed). */
SEQLOCK_INTERNAL void seqlock_write_owner_(seqlock_t *sl,
                                           const struct seqlock_owner *o);
/* Take the word from holder h, found in a gap?  (The thread's gap_watch
 * keeps how long it has seen h there.) */
SEQLOCK_INTERNAL int seqlock_gap_holder_gone_(struct lock_thread *t,
                                              const seqlock_t *sl,
                                              uint64_t h);
/* 1 if sl, seen again after a sleep, has stayed for STUCK_NS in a state
 * that only one thread its words name can end, and /proc does not show
 * that thread held up: the lock is corrupted (lock.c, "Stuck locks").
 * Kept in the thread's stuck watch across the slices of a wait; reads
 * /proc only once the state has lasted STUCK_NS. */
SEQLOCK_INTERNAL int seqlock_lock_stuck_(struct lock_thread *t,
                                         const seqlock_t *sl);
/* In a fork's child: the PID namespace is asked anew (unshare() may have
 * put the child in another). */
SEQLOCK_INTERNAL void seqlock_forget_namespace_(void);

static inline void
gap_ended(struct lock_thread *t)
{
    t->gap.lock = NULL;
}

#endif /* SEQLOCK_OWNER_H */
