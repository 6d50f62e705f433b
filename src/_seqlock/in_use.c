/*
 * in_use.c - each thread's slots (in_use.h): taken on its first call,
 * freed at its exit for a later thread, and the registry a closer walks.
 */
#include "in_use.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

_Thread_local in_use_thread *in_use_mine_;

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
