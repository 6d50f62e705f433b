/*
 * beacon.c - setting up a beacon, learning the kind glibc gives ours, and
 * sleeping and waking on its word (beacon.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "beacon.h"

#include <sched.h>

#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif

int
seqlock_beacon_init_(seqlock_t *sl)
{
    pthread_mutexattr_t attr;
    int err = pthread_mutexattr_init(&attr);
    if (err != 0) {
        return err;
    }
    err = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
#if defined(__linux__) || defined(__FreeBSD__)
    if (err == 0) {
        err = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    }
#endif
    if (err == 0) {
        err = pthread_mutex_init(&sl->beacon, &attr);
    }
    pthread_mutexattr_destroy(&attr);
    return err;
}

#ifdef BEACON_KIND
_Atomic int seqlock_beacon_kind_ = KIND_UNKNOWN;

int
seqlock_learn_beacon_kind_(void)
{
    seqlock_t probe;
    int kind = KIND_UNKNOWN;
    if (seqlock_beacon_init_(&probe) == 0) {
        kind = __atomic_load_n(BEACON_KIND(&probe), __ATOMIC_RELAXED);
        (void)pthread_mutex_destroy(&probe.beacon);
        atomic_store_explicit(&seqlock_beacon_kind_, kind,
                              memory_order_relaxed);
    }
    return kind;
}
#endif

/* Sleep while the holder holds its beacon, at most nap_ns: on the
 * beacon's word, with FUTEX_WAITERS set as glibc's own waiters set it, so
 * that the holder's unlock wakes one sleeper, and so does the kernel the
 * moment the holder dies.  (Only the holder's own pending operations
 * touch the beacon: waiting here opens no window for a contender.)  In a
 * gap (word free, holder set) yield: it lasts instructions.  Without
 * glibc's word to look at, nap 1 ms. */
void
seqlock_sleep_on_beacon_(seqlock_t *sl, int64_t nap_ns)
{
#ifdef BEACON_WORD
    int *word = BEACON_WORD(sl);
    int seen = __atomic_load_n(word, __ATOMIC_RELAXED);
    if (seen == 0 || (seen & FUTEX_OWNER_DIED)) {
        sched_yield(); /* a gap, or dead: try again */
        return;
    }
    if (!(seen & FUTEX_WAITERS)) {
        if (!__atomic_compare_exchange_n(word, &seen, seen | FUTEX_WAITERS,
                                         0, __ATOMIC_RELAXED,
                                         __ATOMIC_RELAXED)) {
            return; /* it changed: try again */
        }
        seen |= FUTEX_WAITERS;
    }
    struct timespec ts = timespec_of(nap_ns);
    (void)syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, NULL, 0);
#else
    struct timespec ts = timespec_of(nap_ns < MS_NS ? nap_ns : MS_NS);
    (void)nanosleep(&ts, NULL);
#endif
}

void
seqlock_wake_on_beacon_(seqlock_t *sl, int how_many)
{
#ifdef BEACON_WORD
    (void)syscall(SYS_futex, BEACON_WORD(sl), FUTEX_WAKE, how_many, NULL,
                  NULL, 0);
#else
    (void)sl;
    (void)how_many;
#endif
}
