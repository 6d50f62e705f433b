/*
 * thread.c - each thread's lock_thread (thread.h): its token and its
 * table of held locks.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "thread.h"

#include <stdlib.h>
#include <unistd.h>

#ifdef __linux__
#include <sys/syscall.h>
#endif

static _Thread_local struct lock_thread lock_thread;
_Thread_local struct lock_thread *seqlock_lock_thread_ SEQLOCK_TLS_FAST;

struct lock_thread *
seqlock_this_thread_(void)
{
    /* A signal handler may run this between the two lines: it stores the
     * same address. */
    seqlock_lock_thread_ = &lock_thread;
    return &lock_thread;
}

/* 64 random bits: the kernel's if it answers at once, else a mix of what
 * tells this thread from every other (async-signal-safe either way). */
static uint64_t
fresh_token(void)
{
    uint64_t t = 0;
#if defined(__linux__) && defined(SYS_getrandom)
    if (syscall(SYS_getrandom, &t, sizeof t, 1 /* GRND_NONBLOCK */)
        != (long)sizeof t) {
        t = 0;
    }
#endif
    if (t == 0) {
        static _Atomic uint64_t counter;
        uint64_t z = (uint64_t)monotonic_ns()
                     ^ ((uint64_t)getpid() << 32)
                     ^ (uint64_t)(uintptr_t)&lock_thread
                     ^ (atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15u);
        /* splitmix64 finaliser */
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
        t = z ^ (z >> 31);
    }
    return t ? t : 1;
}

uint64_t
seqlock_new_token_(struct lock_thread *th)
{
    seqlock_watch_forks_();
    uint64_t expected = 0;
    uint64_t t = fresh_token();
    if (!atomic_compare_exchange_strong(&th->token, &expected, t)) {
        t = expected; /* a signal handler on this thread chose first */
    }
    return t;
}

uint64_t
seqlock_self(void)
{
    return token_of(this_thread());
}

/* The heap part of the table is freed with its thread. */
static pthread_key_t held_spill_key;
static pthread_once_t held_spill_key_once = PTHREAD_ONCE_INIT;

static void
free_held_spill(void *spill)
{
    free(spill);
}

static void
make_held_spill_key(void)
{
    (void)pthread_key_create(&held_spill_key, free_held_spill);
}

int
seqlock_grow_held_(struct lock_thread *t)
{
    unsigned cap = t->held_spill_cap ? 2 * t->held_spill_cap : 8;
    struct held_lock *more = realloc(t->held_spill, cap * sizeof *more);
    if (more == NULL) {
        return ENOMEM;
    }
    if (t->held_spill == NULL) {
        (void)pthread_once(&held_spill_key_once, make_held_spill_key);
    }
    t->held_spill = more;
    t->held_spill_cap = cap;
    (void)pthread_setspecific(held_spill_key, more);
    return 0;
}

int
seqlock_held(const seqlock_t *sl)
{
    const struct held_lock *h = find_held(this_thread(), sl);
    if (h == NULL) {
        return SEQLOCK_HOLDS_NOTHING;
    }
    return h->section == NO_SECTION ? SEQLOCK_HOLDS_WORD
                                    : SEQLOCK_HOLDS_SECTION;
}
