/*
 * in_use.c - each thread's slots (in_use.h): taken on its first call,
 * freed at its exit for a later thread, and the registry a closer walks.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* syscall() */
#endif
#include "in_use.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifdef __linux__
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

_Thread_local in_use_thread *in_use_mine_
    __attribute__((tls_model("initial-exec")));
_Atomic int in_use_asymmetric_;
_Atomic unsigned in_use_forks_;

/* Register for expedited membarrier(): 1 if closers may use it. */
static int
register_membarrier(void)
{
#if defined(__linux__) && defined(SYS_membarrier)
    long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    return cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED)
           && syscall(SYS_membarrier,
                      MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
#else
    return 0;
#endif
}

/* The closer's half of the fence pair (in_use.h): 0, or -1 if
 * membarrier() failed (registered, it cannot, but for a seccomp filter
 * installed since): then nothing can be known of the readers. */
static int
heavy_fence(void)
{
    atomic_thread_fence(memory_order_seq_cst);
#if defined(__linux__) && defined(SYS_membarrier)
    if (atomic_load_explicit(&in_use_asymmetric_, memory_order_relaxed)
        && syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0)
               != 0) {
        return -1;
    }
#endif
    return 0;
}

/* Every thread's slots ever made, the newest first. */
static _Atomic(in_use_thread *) registry;

static pthread_key_t exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;

/* The thread exits (or, in a fork's child, never existed there): its
 * slots are empty by now, unless it died inside a call; either way
 * nothing of it runs any more. */
static void
free_slots(in_use_thread *t)
{
    for (unsigned i = 0; i < IN_USE_SLOTS; i++) {
        atomic_store_explicit(&t->slot[i], NULL, memory_order_relaxed);
    }
    t->depth = 0;
    atomic_store_explicit(&t->taken, 0, memory_order_release);
}

static void
thread_exits(void *slots)
{
    free_slots(slots);
    in_use_mine_ = NULL; /* a later destructor's call takes slots anew */
}

/* In a fork's child only the forking thread exists: the others' slots
 * would keep a closer waiting for ever. */
static void
forked_child(void)
{
    atomic_fetch_add(&in_use_forks_, 1);
    /* A child is a new memory map: its registration starts afresh. */
    if (atomic_load(&in_use_asymmetric_) && !register_membarrier()) {
        atomic_store(&in_use_asymmetric_, 0);
    }
    for (in_use_thread *t = atomic_load(&registry); t != NULL; t = t->next) {
        if (t != in_use_mine_) {
            free_slots(t);
        }
    }
}

static void
make_exit_key(void)
{
    (void)pthread_key_create(&exit_key, thread_exits);
    (void)pthread_atfork(NULL, NULL, forked_child);
#ifdef SEQLOCK_BENCH_SYMMETRIC
    atomic_store(&in_use_asymmetric_, 0);
#else
    atomic_store(&in_use_asymmetric_, register_membarrier());
#endif
}

in_use_thread *
in_use_slots_(void)
{
    (void)pthread_once(&exit_key_once, make_exit_key);
    in_use_thread *t;
    for (t = atomic_load(&registry); t != NULL; t = t->next) {
        int free = 0;
        if (atomic_compare_exchange_strong(&t->taken, &free, 1)) {
            break;
        }
    }
    if (t == NULL) {
        /* A cache line of its own: no other thread writes near it. */
        size_t size = (sizeof *t + 63) / 64 * 64;
        t = aligned_alloc(64, size);
        if (t == NULL) {
            return NULL;
        }
        memset(t, 0, size);
        atomic_init(&t->taken, 1);
        in_use_thread *head = atomic_load(&registry);
        do {
            t->next = head;
        } while (!atomic_compare_exchange_weak(&registry, &head, t));
    }
    if (pthread_setspecific(exit_key, t) != 0) {
        free_slots(t);
        return NULL;
    }
    in_use_mine_ = t;
    return t;
}

int
in_use_where(const void *key)
{
    (void)pthread_once(&exit_key_once, make_exit_key);
    if (heavy_fence() < 0) {
        return IN_USE_UNKNOWN;
    }
    int where = IN_USE_NOWHERE;
    for (in_use_thread *t = atomic_load(&registry); t != NULL; t = t->next) {
        for (unsigned i = 0; i < IN_USE_SLOTS; i++) {
            if (atomic_load_explicit(&t->slot[i], memory_order_acquire)
                == key) {
                if (t == in_use_mine_) {
                    return IN_USE_HERE;
                }
                where = IN_USE_ELSEWHERE;
            }
        }
    }
    return where;
}

int
in_use_found(const void *key)
{
    atomic_thread_fence(memory_order_seq_cst);
    for (in_use_thread *t = atomic_load(&registry); t != NULL; t = t->next) {
        for (unsigned i = 0; i < IN_USE_SLOTS; i++) {
            if (atomic_load_explicit(&t->slot[i], memory_order_acquire)
                == key) {
                return 1;
            }
        }
    }
    return 0;
}
