/*
 * open_memory.c - the ranges of open records and rings (open_memory.h):
 * one table, written under a mutex inside a sequence word's odd phase,
 * read without either.
 */
#include "open_memory.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

/* Every word a reader loads is atomic (relaxed): a reader racing a writer
 * reads words that are each whole, and the sequence word says whether
 * they were a set. */
typedef struct {
    _Atomic uintptr_t key, lo, hi;
} range;

typedef struct {
    size_t capacity;
    range slot[];
} table;

static pthread_mutex_t writers = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
_Atomic unsigned long long open_memory_sequence_; /* odd while a writer
                                                   changes the set */
static _Atomic(table *) ranges;      /* never freed: see grow() */
static _Atomic size_t used;          /* slots of ranges in use */
static _Atomic uintptr_t hull_lo = UINTPTR_MAX, hull_hi = 0;
_Thread_local open_memory_clear open_memory_clear_
    __attribute__((tls_model("initial-exec")));

/* A fork must not copy the sequence word odd: a writer holds the mutex
 * for its whole odd phase, so holding it across fork() keeps every writer
 * out (and the child, with one thread, unlocks it). */
static void before_fork(void) { (void)pthread_mutex_lock(&writers); }
static void after_fork(void) { (void)pthread_mutex_unlock(&writers); }

static void
register_fork_handlers(void)
{
    (void)pthread_atfork(before_fork, after_fork, after_fork);
}

/* The odd phase's edges, as write_seqcount_begin()/_end(): the release
 * fence orders the odd store before the ranges' stores; the even store's
 * release orders them before it. */
static void
write_begin(void)
{
    _Atomic unsigned long long *word = &open_memory_sequence_;
    unsigned long long s = atomic_load_explicit(word, memory_order_relaxed);
    atomic_store_explicit(word, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}

static void
write_end(void)
{
    _Atomic unsigned long long *word = &open_memory_sequence_;
    unsigned long long s = atomic_load_explicit(word, memory_order_relaxed);
    atomic_store_explicit(word, s + 1, memory_order_release);
}

static void
set_slot(range *r, uintptr_t key, uintptr_t lo, uintptr_t hi)
{
    atomic_store_explicit(&r->key, key, memory_order_relaxed);
    atomic_store_explicit(&r->lo, lo, memory_order_relaxed);
    atomic_store_explicit(&r->hi, hi, memory_order_relaxed);
}

/* A table with room for one more range, copied from the current one.
 * The old table stays allocated: a reader that loaded its pointer before
 * the swap may still walk it (then retries, seeing the sequence moved).
 * Capacities double, so every table ever made takes at most twice the
 * largest.  Called by a writer inside its odd phase.  NULL: no memory. */
static table *
grow(table *old, size_t n)
{
    size_t capacity = old == NULL ? 8 : 2 * old->capacity;
    table *t = calloc(1, sizeof(table) + capacity * sizeof(range));
    if (t == NULL) {
        return NULL;
    }
    t->capacity = capacity;
    for (size_t i = 0; i < n; i++) {
        const range *r = &old->slot[i];
        set_slot(&t->slot[i],
                 atomic_load_explicit(&r->key, memory_order_relaxed),
                 atomic_load_explicit(&r->lo, memory_order_relaxed),
                 atomic_load_explicit(&r->hi, memory_order_relaxed));
    }
    return t;
}

/* The hull of slots [0, n), stored for readers.  A writer's. */
static void
store_hull(const table *t, size_t n)
{
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (size_t i = 0; i < n; i++) {
        uintptr_t a = atomic_load_explicit(&t->slot[i].lo,
                                           memory_order_relaxed);
        uintptr_t b = atomic_load_explicit(&t->slot[i].hi,
                                           memory_order_relaxed);
        lo = a < lo ? a : lo;
        hi = b > hi ? b : hi;
    }
    atomic_store_explicit(&hull_lo, lo, memory_order_relaxed);
    atomic_store_explicit(&hull_hi, hi, memory_order_relaxed);
}

int
open_memory_add(const void *key, const void *memory, size_t len)
{
    (void)pthread_once(&fork_once, register_fork_handlers);
    uintptr_t lo = (uintptr_t)memory;
    uintptr_t hi = len > UINTPTR_MAX - lo ? UINTPTR_MAX : lo + len;
    (void)pthread_mutex_lock(&writers);
    table *t = atomic_load_explicit(&ranges, memory_order_relaxed);
    size_t n = atomic_load_explicit(&used, memory_order_relaxed);
    int err = 0;
    write_begin();
    if (t == NULL || n == t->capacity) {
        table *bigger = grow(t, n);
        if (bigger == NULL) {
            err = ENOMEM;
            goto done;
        }
        /* release: a reader that finds it finds its capacity and copies */
        atomic_store_explicit(&ranges, bigger, memory_order_release);
        t = bigger;
    }
    set_slot(&t->slot[n], (uintptr_t)key, lo, hi);
    atomic_store_explicit(&used, n + 1, memory_order_relaxed);
    store_hull(t, n + 1);
done:
    write_end();
    (void)pthread_mutex_unlock(&writers);
    return err;
}

void
open_memory_remove(const void *key)
{
    (void)pthread_mutex_lock(&writers);
    table *t = atomic_load_explicit(&ranges, memory_order_relaxed);
    size_t n = atomic_load_explicit(&used, memory_order_relaxed);
    for (size_t i = 0; i < n; i++) {
        if (atomic_load_explicit(&t->slot[i].key, memory_order_relaxed)
            != (uintptr_t)key) {
            continue;
        }
        write_begin();
        range *last = &t->slot[n - 1];
        set_slot(&t->slot[i],
                 atomic_load_explicit(&last->key, memory_order_relaxed),
                 atomic_load_explicit(&last->lo, memory_order_relaxed),
                 atomic_load_explicit(&last->hi, memory_order_relaxed));
        set_slot(last, 0, 0, 0);
        atomic_store_explicit(&used, n - 1, memory_order_relaxed);
        store_hull(t, n - 1);
        write_end();
        break;
    }
    (void)pthread_mutex_unlock(&writers);
}

/* One pass over the set as the loads found it (maybe torn: the caller
 * retries unless the sequence word stood still around it). */
static int
overlaps_once(uintptr_t lo, uintptr_t hi)
{
    if (hi <= atomic_load_explicit(&hull_lo, memory_order_relaxed)
        || lo >= atomic_load_explicit(&hull_hi, memory_order_relaxed)) {
        return 0;
    }
    table *t = atomic_load_explicit(&ranges, memory_order_acquire);
    size_t n = atomic_load_explicit(&used, memory_order_relaxed);
    if (t == NULL) {
        return 0;
    }
    n = n < t->capacity ? n : t->capacity; /* a torn pair: retried */
    for (size_t i = 0; i < n; i++) {
        if (lo < atomic_load_explicit(&t->slot[i].hi, memory_order_relaxed)
            && atomic_load_explicit(&t->slot[i].lo, memory_order_relaxed)
                   < hi) {
            return 1;
        }
    }
    return 0;
}

int
open_memory_overlaps(const void *p, size_t len)
{
    if (len == 0) {
        return 0; /* nothing is copied */
    }
    uintptr_t lo = (uintptr_t)p;
    uintptr_t hi = len > UINTPTR_MAX - lo ? UINTPTR_MAX : lo + len;
    for (;;) {
        /* acquire: the ranges a writer stored before its even store are
         * seen (read_seqbegin()). */
        unsigned long long s = atomic_load_explicit(&open_memory_sequence_,
                                                    memory_order_acquire);
        if (s & 1) {
            sched_yield(); /* a writer, holding the mutex, is mid-change */
            continue;
        }
        int found = overlaps_once(lo, hi);
        /* The loads above happen before the recheck (read_seqretry()). */
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&open_memory_sequence_,
                                 memory_order_relaxed) == s) {
            if (!found) {
                /* the set as of s: clear (open_memory_overlaps_cached()) */
                open_memory_clear_ = (open_memory_clear){lo, hi, s};
            }
            return found;
        }
    }
}

