/*
 * beacon.h - the beacon: a robust, process-shared pthread mutex that the
 * lock word's holder locks just after winning the word and unlocks just
 * before giving it back, so that the kernel marks it FUTEX_OWNER_DIED when
 * the holder dies (lock.c tells why the mutex is not the lock itself).
 * Internal to the core: not API.
 *
 * Every read or write of glibc's private mutex layout is here (and in
 * beacon.c, which sleeps and wakes on the mutex's word), and only here:
 * the first int of glibc's pthread_mutex_t is a robust futex (the
 * kernel's robust-futex ABI fixes the meaning of its bits), __owner the
 * holder's id and __kind the mutex's type.  Any process that maps the lock
 * may rewrite them, so the kind is checked before glibc is handed the
 * mutex (another kind takes glibc down paths that assert; glibc reads it
 * again, so a rewrite in between is not caught: the trust model's case,
 * docs/implementation.md "Whom a writer trusts") and the owner
 * words are put back before the unlock (glibc refuses, EPERM, to unlock a
 * mutex whose word names another thread, and leaves it on the holder's
 * robust list).  With another C library, nothing of the layout is read:
 * a dead holder is not seen, sleepers nap, and the kind is trusted.
 */
#ifndef SEQLOCK_BEACON_H
#define SEQLOCK_BEACON_H

#include "thread.h"

#ifdef __linux__
#include <linux/futex.h>
#endif

#if defined(__GLIBC__) && defined(__linux__)
#define BEACON_WORD(sl) (&(sl)->beacon.__data.__lock)
#define BEACON_OWNER(sl) (&(sl)->beacon.__data.__owner)
#define BEACON_KIND(sl) (&(sl)->beacon.__data.__kind)
#endif

/* Set up sl's beacon (robust, process-shared): 0 or a pthread error. */
SEQLOCK_INTERNAL int seqlock_beacon_init_(seqlock_t *sl);

#ifdef BEACON_KIND
/* The kind glibc gives our beacons (learnt from one of our own the first
 * time it is needed: threads that race to learn it learn the same), or
 * KIND_UNKNOWN if it cannot be learnt. */
#define KIND_UNKNOWN (-1)
SEQLOCK_INTERNAL extern _Atomic int seqlock_beacon_kind_;
SEQLOCK_INTERNAL int seqlock_learn_beacon_kind_(void);

static inline int
beacon_kind(void)
{
    int kind = atomic_load_explicit(&seqlock_beacon_kind_,
                                    memory_order_relaxed);
    return SEQLOCK_LIKELY(kind != KIND_UNKNOWN) ? kind
                                                : seqlock_learn_beacon_kind_();
}
#endif

/* 1 if glibc may be handed the beacon: its kind is a robust, shared
 * mutex's (another kind sends glibc down paths that assert, or that never
 * put the mutex on the robust list). */
static inline int
beacon_kind_ok(const seqlock_t *sl)
{
#ifdef BEACON_KIND
    return __atomic_load_n(BEACON_KIND(sl), __ATOMIC_RELAXED) == beacon_kind();
#else
    (void)sl;
    return 1;
#endif
}

/* Just after our trylock: remember the owner words glibc stored. */
static inline void
note_beacon_owner(seqlock_t *sl, struct held_lock *h)
{
#ifdef BEACON_WORD
    h->beacon_word = __atomic_load_n(BEACON_WORD(sl), __ATOMIC_RELAXED)
                     & FUTEX_TID_MASK;
    h->beacon_owner = __atomic_load_n(BEACON_OWNER(sl), __ATOMIC_RELAXED);
#else
    (void)sl;
    (void)h;
#endif
}

/* Before our unlock: put back what another process may have rewritten,
 * so that glibc releases the beacon and takes it off our robust list. */
static inline void
restore_beacon_owner(seqlock_t *sl, const struct held_lock *h)
{
#ifdef BEACON_WORD
    if (!beacon_kind_ok(sl)) {
        __atomic_store_n(BEACON_KIND(sl), beacon_kind(), __ATOMIC_RELAXED);
    }
    if (__atomic_load_n(BEACON_OWNER(sl), __ATOMIC_RELAXED)
        != h->beacon_owner) {
        __atomic_store_n(BEACON_OWNER(sl), h->beacon_owner, __ATOMIC_RELAXED);
    }
    int seen = __atomic_load_n(BEACON_WORD(sl), __ATOMIC_RELAXED);
    while ((seen & (FUTEX_TID_MASK | FUTEX_OWNER_DIED)) != h->beacon_word
           && !__atomic_compare_exchange_n(
               BEACON_WORD(sl), &seen, h->beacon_word | (seen & FUTEX_WAITERS),
               0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
#else
    (void)sl;
    (void)h;
#endif
}

/* What the beacon's word says, read once.  The kernel marks a dead
 * holder's robust futex FUTEX_OWNER_DIED and clears its id, so a word
 * that has the bit and an id is no mark of the kernel's: another process
 * rewrote the word of a beacon a live thread holds (its unlock puts the
 * word back).  Without glibc's word to look at: always held. */
enum beacon_state { BEACON_HELD, BEACON_FREE, BEACON_MARKED_DEAD };

#ifdef BEACON_WORD
#define BEACON_VISIBLE 1 /* its word can be looked at */
#else
#define BEACON_VISIBLE 0
#endif

/* The beacon's word, read once; 0 without glibc's word to look at. */
static inline uint32_t
beacon_word(const seqlock_t *sl)
{
#ifdef BEACON_WORD
    return (uint32_t)__atomic_load_n(BEACON_WORD(sl), __ATOMIC_RELAXED);
#else
    (void)sl;
    return 0;
#endif
}

/* The thread id in a beacon word: its holder's, as its own PID namespace
 * numbers it (glibc stores the id the holder's kernel gave it). */
static inline uint32_t
beacon_tid_of(uint32_t word)
{
#ifdef BEACON_WORD
    return word & FUTEX_TID_MASK;
#else
    (void)word;
    return 0;
#endif
}

/* A beacon word as a watcher of a stuck lock compares it: the id and the
 * death mark, not FUTEX_WAITERS (sleepers set it, the holder clears it). */
static inline uint32_t
beacon_key_of(uint32_t word)
{
#ifdef BEACON_WORD
    return word & (FUTEX_TID_MASK | FUTEX_OWNER_DIED);
#else
    return word;
#endif
}

/* What a beacon word read once says (beacon_word()). */
static inline enum beacon_state
beacon_state_of(uint32_t word)
{
#ifdef BEACON_WORD
    if (word == 0) {
        return BEACON_FREE;
    }
    if ((word & FUTEX_OWNER_DIED) && (word & FUTEX_TID_MASK) == 0) {
        return BEACON_MARKED_DEAD;
    }
#else
    (void)word;
#endif
    return BEACON_HELD;
}

static inline enum beacon_state
beacon_state(const seqlock_t *sl)
{
    return beacon_state_of(beacon_word(sl));
}

/* 1 if the beacon's word says a thread holds it (seen: with glibc's word
 * to look at; never without). */
static inline int
beacon_seen_held(const seqlock_t *sl)
{
    return BEACON_VISIBLE && beacon_state(sl) == BEACON_HELD;
}

/* Sleep while the holder holds its beacon, at most nap_ns (beacon.c). */
SEQLOCK_INTERNAL void seqlock_sleep_on_beacon_(seqlock_t *sl, int64_t nap_ns);
/* Wake how_many writers asleep on the beacon (beacon.c). */
SEQLOCK_INTERNAL void seqlock_wake_on_beacon_(seqlock_t *sl, int how_many);

/* Before the holder's unlock: clear FUTEX_WAITERS in the beacon's word, so
 * that glibc's unlock makes no system call (the release wakes the sleepers
 * itself, after giving the word back).  1 if it was set. */
static inline int
take_waiters_flag(seqlock_t *sl)
{
#ifdef BEACON_WORD
    /* a plain load first: with nobody asleep (the common case) no
     * read-modify-write */
    return (__atomic_load_n(BEACON_WORD(sl), __ATOMIC_RELAXED) & FUTEX_WAITERS)
           && (__atomic_fetch_and(BEACON_WORD(sl), ~FUTEX_WAITERS,
                                  __ATOMIC_RELAXED)
               & FUTEX_WAITERS);
#else
    (void)sl;
    return 0;
#endif
}

/* A writer that slept and then took the beacon keeps FUTEX_WAITERS set in
 * it, as glibc's own lock does: another sleeper may remain, and the unlock
 * must wake it (a trylock writes the bare thread id). */
static inline void
keep_waiters_flag(seqlock_t *sl)
{
#ifdef BEACON_WORD
    __atomic_fetch_or(BEACON_WORD(sl), FUTEX_WAITERS, __ATOMIC_RELAXED);
#else
    (void)sl;
#endif
}

#endif /* SEQLOCK_BEACON_H */
