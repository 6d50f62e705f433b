/*
 * thread.h - what each thread keeps of the locks it holds, in its own
 * memory: its token, its identity for owner records, and the table of
 * locks it holds with the count each section opened at.  Internal to the
 * core: not API.
 *
 * Nothing a thread believes about its own locks is read back from the
 * shared words: any process that maps a lock may rewrite them, and the
 * holder must still close its section at the right count and give back
 * what it took (seqlock_held(), the section closing at its opening count
 * + 2).  One thread-local holds it all, so each public call pays for one
 * thread-local lookup and hands the pointer down.
 */
#ifndef SEQLOCK_THREAD_H
#define SEQLOCK_THREAD_H

#include "parking.h"

#define NO_SECTION UINT64_MAX /* odd: never an opening count */

/* A lock this thread holds: the count its section opened at (or
 * NO_SECTION), the token it stored in the lock word, and the beacon's
 * owner words as its trylock left them (beacon.h). */
struct held_lock {
    const seqlock_t *lock;
    uint64_t section;
    uint64_t token;
    int beacon_word; /* the owner's id as glibc stored it (tid bits) */
    int beacon_owner;
};

/* How long this thread has seen one holder of one lock in a gap: kept
 * per thread (a thread waits for one lock at a time) across the slices in
 * which a caller waits, and on this thread's own clock (owner.c). */
struct gap_watch {
    const seqlock_t *lock;
    uint64_t holder, gap;
    int64_t since;  /* first seen */
    int64_t seen;   /* last seen: a watch not kept up is stale */
    int64_t looked; /* when the holder's liveness was last asked, or 0 */
    int verdict;    /* what it said (enum holder_verdict) */
};

/* How long this thread has seen one lock stuck (owner.c): its words
 * unchanged in a state that only one thread, which they name, can end.
 * Kept per thread, across the slices in which a caller waits, as the gap
 * watch is. */
struct stuck_watch {
    const seqlock_t *lock;
    uint64_t holder, gaps;
    uint32_t ready, beacon; /* the beacon word's id bits and death mark */
    uint32_t mover;         /* the thread that can end the state, or 0 */
    uint64_t started;       /* its start time, 0 if not known */
    int kind;               /* which state (enum stuck_kind) */
    int64_t since;  /* first seen */
    int64_t seen;   /* last seen: a watch not kept up is stale */
    int64_t looked; /* when the mover was last looked at, or 0 */
    int64_t ran_ns; /* the mover's run time at the first look, or -1 */
};

enum { IDENTITY_UNKNOWN = 0, IDENTITY_KNOWN = 1, IDENTITY_UNAVAILABLE = 2 };

enum { HELD_INLINE = 4 };
struct lock_thread {
    /* The thread's token: 64 random bits, drawn on its first lock.
     * _Atomic so that a signal handler that interrupts the first call on
     * its thread cannot leave two different tokens behind (one CAS from 0
     * wins). */
    _Atomic uint64_t token;
    /* Who the thread is in its PID namespace, for owner records: its id
     * and start time, learnt on its first lock (owner.c). */
    int identity;
    uint32_t tid;
    uint64_t started;
    unsigned held_count, held_spill_cap;
    struct held_lock held_inline[HELD_INLINE];
    struct held_lock *held_spill; /* the rest, on the heap */
    struct gap_watch gap;
    struct stuck_watch stuck;
    struct { /* fairness (lock.c): since when we kept off for another */
        const seqlock_t *lock;
        int64_t since;
    } held_off;
};

/* This thread's lock_thread, found once per thread: the struct is too
 * big for initial-exec storage (parking.h: SEQLOCK_TLS_FAST), so it keeps
 * the default model and a pointer to it is cached in a fast thread-local,
 * read by every call.  The cache is set by the first call on each thread
 * (seqlock_this_thread_()); a fork's child inherits the forking thread's
 * value, which is right, as the struct is copied at the same address. */
SEQLOCK_INTERNAL extern _Thread_local struct lock_thread *seqlock_lock_thread_
    SEQLOCK_TLS_FAST;
SEQLOCK_INTERNAL struct lock_thread *seqlock_this_thread_(void);

static inline struct lock_thread *
this_thread(void)
{
    struct lock_thread *t = seqlock_lock_thread_;
    return SEQLOCK_LIKELY(t != NULL) ? t : seqlock_this_thread_();
}

SEQLOCK_INTERNAL uint64_t seqlock_new_token_(struct lock_thread *t);

/* The calling thread's token, drawn on its first call. */
static inline uint64_t
token_of(struct lock_thread *t)
{
    uint64_t token = atomic_load_explicit(&t->token, memory_order_relaxed);
    return SEQLOCK_LIKELY(token != 0) ? token : seqlock_new_token_(t);
}

/* The calling thread's token, or 0 if it never needed one (then it holds
 * no lock).  For paths a signal handler may take. */
static inline uint64_t
current_token(void)
{
    return atomic_load_explicit(&this_thread()->token, memory_order_relaxed);
}

static inline struct held_lock *
held_at(struct lock_thread *t, unsigned i)
{
    return i < HELD_INLINE ? &t->held_inline[i]
                           : &t->held_spill[i - HELD_INLINE];
}

static inline struct held_lock *
find_held(struct lock_thread *t, const seqlock_t *sl)
{
    for (unsigned i = 0; i < t->held_count; i++) {
        struct held_lock *h = held_at(t, i);
        if (h->lock == sl) {
            return h;
        }
    }
    return NULL;
}

SEQLOCK_INTERNAL int seqlock_grow_held_(struct lock_thread *t);

/* Room for one more entry: 0, ENOLCK (SEQLOCK_MAX_HELD) or ENOMEM. */
static inline int
reserve_held(struct lock_thread *t)
{
    if (t->held_count >= SEQLOCK_MAX_HELD) {
        return ENOLCK;
    }
    if (SEQLOCK_LIKELY(t->held_count < HELD_INLINE + t->held_spill_cap)) {
        return 0;
    }
    return seqlock_grow_held_(t);
}

static inline void
forget_held(struct lock_thread *t, struct held_lock *h)
{
    *h = *held_at(t, t->held_count - 1);
    t->held_count--;
}

/* Installs the fork handlers (fork.c), once per process: before a thread
 * first needs a token, or a private lock is first tracked. */
SEQLOCK_INTERNAL void seqlock_watch_forks_(void);

#endif /* SEQLOCK_THREAD_H */
