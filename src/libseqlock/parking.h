/*
 * parking.h - how the core waits: every tuning constant, the clocks and
 * deadlines, and sleeping on a 32-bit word (a futex on Linux, a bounded
 * back-off elsewhere).  Internal to the core: not API.
 *
 * Waiting escalates: SPIN_ROUNDS CPU pause hints (a write section is often
 * shorter than a sleep), then YIELD_ROUNDS sched_yield() calls, then a
 * sleep on a futex (FUTEX_WAIT, not _PRIVATE, so that a seqlock_t in
 * memory shared between processes works): writers on the holder's beacon
 * (beacon.h), readers and waiters on the low half of the 64-bit count
 * (count.h).  Every sleep is a nap bounded by the caller's deadline and by
 * a cap, so a wake-up that never comes (a writer that died between its
 * store and its wake-up, a waiter that cannot announce itself) costs at
 * most one nap.
 */
#ifndef SEQLOCK_PARKING_H
#define SEQLOCK_PARKING_H

#include "seqlock.h"

#include <time.h> /* struct timespec (C11) */

#if defined(__GNUC__) || defined(__clang__)
/* Shared between the core's files, never exported from a shared object. */
#define SEQLOCK_INTERNAL __attribute__((visibility("hidden")))
#else
#define SEQLOCK_INTERNAL
#endif

#if defined(__ELF__) && (defined(__GNUC__) || defined(__clang__))
/* A thread-local every call reads: initial-exec, an offset from the
 * thread pointer.  The default model of a dlopen()ed object's
 * thread-locals costs a call to __tls_get_addr() per read; a pointer fits
 * the static TLS surplus glibc keeps for dlopen()ed objects, a large
 * struct might not (then dlopen() fails), so use it for pointers only. */
#define SEQLOCK_TLS_FAST __attribute__((tls_model("initial-exec")))
#else
#define SEQLOCK_TLS_FAST
#endif

/* ---- tuning: every constant of the core's waits in one place ---- */

enum {
    SPIN_ROUNDS = 128, /* CPU pause hints before yielding */
    YIELD_ROUNDS = 16, /* sched_yield() calls before sleeping */
};
#define NS_PER_SEC SEQLOCK_NS_PER_SEC
#define MS_NS (1000 * 1000LL)
#define READER_NAP_NS (SEQLOCK_READER_NAP_MS * MS_NS)
/* Writers asleep on the beacon are woken by its unlock, or by the kernel
 * at the holder's death: their nap is a safety net. */
#define WRITER_NAP_NS (100 * MS_NS)
#define WAITER_NAP_NS (SEQLOCK_WAITER_NAP_MS * MS_NS)
#define CANCELLABLE_NAP_NS (SEQLOCK_CANCELLABLE_NAP_MS * MS_NS)
#define POLL_FIRST_NAP_NS (SEQLOCK_POLL_FIRST_NAP_US * 1000LL)
#define POLL_NAP_NS (SEQLOCK_POLL_NAP_MS * MS_NS)
/* Gaps (owner.c): a holder between its lock word and its beacon. */
#define GAP_NS (100 * MS_NS)         /* a holder we cannot look at */
#define GAP_LOOK_NS (50 * 1000LL)    /* longer than a passing gap */
#define RECHECK_NS (1 * MS_NS)       /* a live holder looked at again */
#define WATCH_STALE_NS (20 * MS_NS)  /* a waiter looks far more often */
/* Stuck locks (lock.c, owner.c): a state only one thread can end, seen
 * unchanged for STUCK_NS while that thread is not held up, is corruption.
 * Its thread is looked at every STUCK_RECHECK_NS; one that ran RAN_NS in
 * that state is not in the few instructions that end it. */
#define STUCK_NS (1000 * MS_NS)      /* honest ones last instructions */
#define STUCK_STALE_NS (1000 * MS_NS) /* a waiter looks every nap */
#define STUCK_RECHECK_NS (100 * MS_NS)
#define RAN_NS (1 * MS_NS)
/* Fairness (lock.c): a sleeper that waited STARVE_NS asks for a turn,
 * which others grant for up to STARVE_GRACE_NS. */
#define STARVE_NS (1 * MS_NS)
#define STARVE_GRACE_NS (5 * MS_NS)

/* ---- clocks ---- */

static inline void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* CLOCK_MONOTONIC in ns (parking.c: clock_gettime() is POSIX, which a
 * header compiled as strict C11 does not see). */
SEQLOCK_INTERNAL int64_t seqlock_monotonic_ns_(void);

static inline int64_t
monotonic_ns(void)
{
    return seqlock_monotonic_ns_();
}

static inline struct timespec
timespec_of(int64_t ns)
{
    struct timespec ts = {(time_t)(ns / NS_PER_SEC), (long)(ns % NS_PER_SEC)};
    return ts;
}

/* How long the next nap may last: the time left until deadline (< 0:
 * none), capped at cap; 0 once the deadline has passed. */
static inline int64_t
next_nap_ns(int64_t deadline, int64_t cap)
{
    int64_t left = seqlock_time_left(deadline);
    return left < 0 || left > cap ? cap : left;
}

/* ---- sleeping on a word ---- */

/* The low half of a 64-bit count: the 32-bit word a futex sleeps on. */
static inline _Atomic uint32_t *
low_half(const _Atomic uint64_t *word)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return (_Atomic uint32_t *)((char *)word + 4);
#else
    return (_Atomic uint32_t *)word;
#endif
}

/* Sleep while *word == expected, for at most timeout_ns.  Returns 0 (woken
 * or the word changed), ETIMEDOUT or EINTR.  Async-signal-safe. */
SEQLOCK_INTERNAL int seqlock_park_(_Atomic uint32_t *word, uint32_t expected,
                                   int64_t timeout_ns);
/* Wake every thread asleep on word.  Async-signal-safe. */
SEQLOCK_INTERNAL void seqlock_unpark_all_(_Atomic uint32_t *word);

#endif /* SEQLOCK_PARKING_H */
