/*
 * fork.c - fork() and the locks a child inherits.  After fork() only the
 * forking thread exists in the child: a process-private lock another
 * thread held is held by nobody (repaired here, with its undo), and its
 * beacon names a thread of the parent; a lock in memory shared with the
 * parent is the parent's thread's, which lives on there, so the child
 * holds none of those.  The child's thread draws a new token, and learns
 * anew who it is and which PID namespace it lives in.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "beacon.h"
#include "count.h"
#include "owner.h"

/* Every tracked process-private lock; the list's mutex is held across
 * fork() (prepare/parent/child), so the child inherits a whole list. */
static pthread_mutex_t private_locks_mutex = PTHREAD_MUTEX_INITIALIZER;
static seqlock_private_t private_locks = {
    .prev = &private_locks, .next = &private_locks,
};

void
seqlock_track_private(seqlock_private_t *p, seqlock_t *sl,
                      void (*undo)(void *arg), void *arg)
{
    seqlock_watch_forks_();
    p->lock = sl;
    p->undo = undo;
    p->arg = arg;
    pthread_mutex_lock(&private_locks_mutex);
    p->next = &private_locks;
    p->prev = private_locks.prev;
    private_locks.prev->next = p;
    private_locks.prev = p;
    pthread_mutex_unlock(&private_locks_mutex);
}

void
seqlock_untrack_private(seqlock_private_t *p)
{
    if (p->next == NULL) {
        return;
    }
    pthread_mutex_lock(&private_locks_mutex);
    p->prev->next = p->next;
    p->next->prev = p->prev;
    pthread_mutex_unlock(&private_locks_mutex);
    p->next = p->prev = NULL;
}

/* In the child: the only thread, once the forking thread, now has token
 * me.  Idempotent, as a lock may be tracked twice. */
static void
repair_in_child(seqlock_private_t *p, uint64_t me)
{
    seqlock_t *sl = p->lock;
    if (atomic_load_explicit(&sl->ready, memory_order_acquire)
        != SEQLOCK_READY) {
        return; /* never taken */
    }
    uint64_t holder = atomic_load_explicit(&sl->holder, memory_order_relaxed);
    if (holder == me) {
        return; /* repaired already */
    }
    /* The beacon names a thread of the parent and sits on no robust list
     * here: make it anew, whoever holds the word (a thread of the parent
     * may have given the word back and not yet unlocked the beacon). */
    if (seqlock_beacon_init_(sl) != 0) {
        return; /* broken */
    }
    struct held_lock *mine = find_held(this_thread(), sl);
    if (mine != NULL) {
        /* The forking thread keeps its lock: its section goes on. */
        if (pthread_mutex_lock(&sl->beacon) == 0) {
            atomic_store_explicit(&sl->holder, me, memory_order_relaxed);
            seqlock_publish_owner_(sl, this_thread(), me);
            mine->token = me;
            note_beacon_owner(sl, mine);
        }
        return;
    }
    if (holder == 0 || pthread_mutex_lock(&sl->beacon) != 0) {
        return; /* free; or broken */
    }
    atomic_store_explicit(&sl->holder, me, memory_order_relaxed);
    if (p->undo != NULL) {
        p->undo(p->arg);
    }
    uint64_t seq = seqlock_sequence(sl);
    if (seq & 1u) {
        if (p->undo != NULL) {
            end_section(sl, seq - 1);
        }
        else { /* nothing can repair it: leave it to the next writer */
            atomic_store_explicit(&sl->abandoned, 1, memory_order_relaxed);
        }
    }
    (void)pthread_mutex_unlock(&sl->beacon);
    atomic_store_explicit(&sl->holder, 0, memory_order_relaxed);
}

static void
before_fork(void)
{
    pthread_mutex_lock(&private_locks_mutex);
}

static void
after_fork_in_parent(void)
{
    pthread_mutex_unlock(&private_locks_mutex);
}

/* In the child: the forking thread's record of what it holds came from
 * the parent.  A lock in memory the child shares with the parent is the
 * parent's thread's, which lives on there: the child holds none of them
 * (its copy of a private lock it keeps: repair_in_child()). */
static void
forget_shared_locks_in_child(void)
{
    struct lock_thread *t = this_thread();
    for (unsigned i = 0; i < t->held_count;) {
        struct held_lock *h = held_at(t, i);
        int private_lock = 0;
        for (seqlock_private_t *p = private_locks.next; p != &private_locks;
             p = p->next) {
            private_lock |= p->lock == h->lock;
        }
        if (private_lock) {
            i++;
        }
        else {
            forget_held(t, h); /* the last entry moves to i */
        }
    }
}

static void
after_fork_in_child(void)
{
    struct lock_thread *t = this_thread();
    seqlock_forget_namespace_();
    atomic_store_explicit(&t->token, 0, memory_order_relaxed);
    t->identity = IDENTITY_UNKNOWN; /* another thread id, start time */
    forget_shared_locks_in_child();
    uint64_t me = seqlock_self();
    for (seqlock_private_t *p = private_locks.next; p != &private_locks;
         p = p->next) {
        repair_in_child(p, me);
    }
    pthread_mutex_unlock(&private_locks_mutex);
}

static void
register_atfork(void)
{
    (void)pthread_atfork(before_fork, after_fork_in_parent,
                         after_fork_in_child);
}

void
seqlock_watch_forks_(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    (void)pthread_once(&once, register_atfork);
}
