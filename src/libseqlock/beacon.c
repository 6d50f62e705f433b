/*
 * beacon.c - setting up a beacon, and learning the kind glibc gives ours
 * (beacon.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "beacon.h"

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
