/*
 * in_use.h - which objects each thread is inside, so that a closer can
 * wait until no thread touches an object's memory before it lets the
 * memory go (in_use.c).  No Python: a record's close() uses it
 * (lock_path.h: record_pin()).
 *
 * A hazard-pointer scheme.  A thread about to touch the memory publishes
 * the object (its key) in a slot of its own, then, across a fence, reads
 * the object's closed word; the closer stores closed, then, across a
 * fence, reads every thread's slots.  Either the thread sees closed (and
 * touches nothing) or the closer sees its slot (and waits for it to
 * empty).  A thread writes only its own slots, in cache lines no other
 * thread writes: readers that publish keep scaling with threads, which a
 * counter in the object (one cache line every reader writes) would not.
 * The fences are asymmetric where Linux's membarrier() can be used (as
 * liburcu and folly do): the reader's is a compiler barrier, the
 * closer's a membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which makes
 * every running thread of the process pass a full barrier; else both are
 * seq_cst fences (docs/implementation.md: Closing a record).
 *
 * Slots nest (IN_USE_SLOTS deep: a signal handler run inside a wait may
 * read another record) and are the calling thread's: enter and leave on
 * one thread, innermost first.  A thread's slots are freed at its exit
 * and taken by a later thread; a fork's child frees all but its own.
 */
#ifndef SEQLOCK_PY_IN_USE_H
#define SEQLOCK_PY_IN_USE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define IN_USE_SLOTS 16

typedef struct in_use_thread {
    _Atomic(const void *) slot[IN_USE_SLOTS];
    unsigned depth;                /* slots in use: the owner's only */
    _Atomic int taken;             /* a live thread owns the slots */
    struct in_use_thread *next;    /* the registry: pushed once, never
                                      removed, so a closer's walk never
                                      reads freed memory */
} in_use_thread;

/* What in_use_enter() did. */
typedef enum {
    IN_USE_ENTERED = 0,
    IN_USE_CLOSED = 1,   /* *closed was nonzero: nothing published */
    IN_USE_NO_MEMORY = 2,
    IN_USE_TOO_DEEP = 3, /* IN_USE_SLOTS keys published already */
} in_use_status;

/* The calling thread's slots, taken on its first call (NULL: no memory). */
in_use_thread *in_use_slots_(void);

/* The calling thread's slots (NULL until its first call).  Initial-exec,
 * as bus_guard_current: every pinned call reads it, and the default model
 * of a dlopen()ed module's thread-locals costs a call to __tls_get_addr()
 * per read; one pointer fits the static TLS glibc keeps for them. */
extern _Thread_local in_use_thread *in_use_mine_
    __attribute__((tls_model("initial-exec")));

/* Nonzero once closers fence with membarrier(): readers then need only a
 * compiler barrier.  Set before any thread has slots, never cleared but
 * in a fork's child whose registration failed (no thread is in a call
 * there but the forking one). */
extern _Atomic int in_use_asymmetric_;

/* Forks this process descends from (bumped in a fork's child): a write
 * section taken in another generation was taken by a thread the fork
 * left behind, which nothing here can end (close() does not wait for
 * it). */
extern _Atomic unsigned in_use_forks_;

/* The reader's half of the fence pair (the closer's: in_use_where()). */
static inline void
in_use_light_fence(void)
{
    if (__builtin_expect(
            atomic_load_explicit(&in_use_asymmetric_, memory_order_relaxed),
            1)) {
        atomic_signal_fence(memory_order_seq_cst);
    }
    else {
        atomic_thread_fence(memory_order_seq_cst);
    }
}

/*
 * in_use_enter - publish key in the calling thread's next slot, then read
 * *closed (NULL: publish whatever it says)
 * Returns IN_USE_ENTERED (the caller calls in_use_leave() when it no
 * longer touches key's memory), or IN_USE_CLOSED, IN_USE_NO_MEMORY,
 * IN_USE_TOO_DEEP with nothing published.  The fence between the slot's
 * store and closed's load pairs with the closer's (in_use_where()).
 */
static inline in_use_status
in_use_enter(const void *key, const _Atomic uint32_t *closed)
{
    in_use_thread *t = in_use_mine_;
    if (__builtin_expect(t == NULL, 0) && (t = in_use_slots_()) == NULL) {
        return IN_USE_NO_MEMORY;
    }
    unsigned i = t->depth;
    if (i >= IN_USE_SLOTS) {
        return IN_USE_TOO_DEEP;
    }
    atomic_store_explicit(&t->slot[i], key, memory_order_relaxed);
    in_use_light_fence();
    if (closed != NULL
        && atomic_load_explicit(closed, memory_order_relaxed) != 0) {
        atomic_store_explicit(&t->slot[i], NULL, memory_order_relaxed);
        return IN_USE_CLOSED;
    }
    t->depth = i + 1;
    return IN_USE_ENTERED;
}

/* in_use_enter() with a full fence whatever closers use: for a thread
 * that holds no reference to key's owner (news.c: a _WeakWaiter), whose
 * owner's deallocation looks at the slots across a plain fence
 * (in_use_found()), which cannot fail as membarrier() can.  *gone lives
 * in memory of the caller's own (the owner's may be freed once it is
 * set); IN_USE_CLOSED if it is nonzero.  Closers that use membarrier()
 * find the slot all the same (a full fence is more than they need). */
static inline in_use_status
in_use_enter_fenced(const void *key, const _Atomic uint32_t *gone)
{
    in_use_thread *t = in_use_mine_;
    if (__builtin_expect(t == NULL, 0) && (t = in_use_slots_()) == NULL) {
        return IN_USE_NO_MEMORY;
    }
    unsigned i = t->depth;
    if (i >= IN_USE_SLOTS) {
        return IN_USE_TOO_DEEP;
    }
    atomic_store_explicit(&t->slot[i], key, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(gone, memory_order_relaxed) != 0) {
        atomic_store_explicit(&t->slot[i], NULL, memory_order_relaxed);
        return IN_USE_CLOSED;
    }
    t->depth = i + 1;
    return IN_USE_ENTERED;
}

/* in_use_enter()'s undo: every access to key's memory happens before a
 * closer that sees the slot empty (release). */
static inline void
in_use_leave(void)
{
    in_use_thread *t = in_use_mine_;
    unsigned i = --t->depth;
    atomic_store_explicit(&t->slot[i], NULL, memory_order_release);
}

/* Where key is published: none, by the calling thread (whatever others
 * do), or by other threads only.  The caller stored its closed word
 * before: this fences (the heavy half), then reads the slots; a thread
 * either saw closed or is found here; found empty, its accesses happened
 * before (acquire).  Also what a thread stored before its fence and the
 * caller read before this call: a pin whose thread then stored a word
 * the caller saw is found. */
enum {
    IN_USE_UNKNOWN = -1, /* membarrier() failed (errno): cannot tell */
    IN_USE_NOWHERE = 0,
    IN_USE_HERE = 1,
    IN_USE_ELSEWHERE = 2,
};
int in_use_where(const void *key);

/* Whether any thread has key published, looked at across a plain seq_cst
 * fence: enough to find every slot published by in_use_enter_fenced()
 * (and only those: a light fence's publication may be missed).  The
 * caller stored its *gone before. */
int in_use_found(const void *key);

#endif /* SEQLOCK_PY_IN_USE_H */
