/*
 * unheld.c - the anchor that waits holding no reference to their owner
 * pin through, and the owner's side of it (unheld.h).
 */
#include "unheld.h"

#include <time.h>

unheld_anchor *
unheld_anchor_take(bound_lock *b)
{
    unheld_anchor *a = atomic_load_explicit(&b->anchor, memory_order_acquire);
    if (a == NULL) {
        unheld_anchor *made = PyMem_RawCalloc(1, sizeof *made);
        if (made == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        atomic_init(&made->gone, 0);
        atomic_init(&made->refs, 1); /* the owner's */
        if (atomic_compare_exchange_strong_explicit(
                &b->anchor, &a, made, memory_order_acq_rel,
                memory_order_acquire)) {
            a = made;
        }
        else {
            PyMem_RawFree(made); /* another thread's came first: a */
        }
    }
    atomic_fetch_add_explicit(&a->refs, 1, memory_order_relaxed);
    return a;
}

void
unheld_anchor_release(unheld_anchor *a)
{
    if (atomic_fetch_sub_explicit(&a->refs, 1, memory_order_acq_rel) == 1) {
        PyMem_RawFree(a);
    }
}

void
unheld_let_go(bound_lock *b, int memory_there)
{
    /* Nobody else calls the owner now (it is being freed, or is garbage):
     * no waiter can take the anchor meanwhile. */
    unheld_anchor *a = atomic_exchange_explicit(&b->anchor, NULL,
                                                memory_order_acq_rel);
    if (a == NULL) {
        return;
    }
    if (atomic_load_explicit(&a->refs, memory_order_acquire) > 1) {
        atomic_store_explicit(&a->gone, 1, memory_order_relaxed);
        const void *key = unheld_key(b);
        int64_t nap_ns = 20 * 1000;
        /* Again each time: a wake-up that lands just before a waiter falls
         * asleep finds nobody (SEQLOCK_WAIT_WAKE_RETURNS). */
        while (in_use_found(key)) {
            if (memory_there) {
                seqlock_wake_waiters(b->sl);
            }
            struct timespec nap = {0, (long)nap_ns};
            Py_BEGIN_ALLOW_THREADS
            (void)nanosleep(&nap, NULL);
            Py_END_ALLOW_THREADS
            nap_ns = nap_ns < 5 * 1000 * 1000 ? 2 * nap_ns : nap_ns;
        }
    }
    unheld_anchor_release(a);
}
