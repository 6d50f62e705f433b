/*
 * news.h - readers that wait for news: wait(), the
 * cancellable waiter and the asyncio forms of both types (news.c).
 */
#ifndef SEQLOCK_PY_NEWS_H
#define SEQLOCK_PY_NEWS_H

#include "lock_path.h"

/* (seq, value) for read_versioned(), stealing value; NULL if value is
 * NULL or on failure. */
PyObject *versioned(uint64_t seq, PyObject *value);
/* wait(seq, timeout=None) of both types: True once a write section has
 * ended since the state seq names, False on timeout. */
PyObject *news_wait(bound_lock *b, PyObject *args, PyObject *kwargs);
#define NEWS_WAIT_DOC                                                        \
    PyDoc_STR(                                                               \
        "wait($self, /, seq, timeout=None)\n--\n\n"                          \
        "Return True once a write section has ended since the state whose\n" \
        "sequence number is seq (at once if one has), False if timeout\n"    \
        "seconds pass first (None: wait until then).\n\n"                    \
        "The thread sleeps on the sequence word (a futex, so a writer in\n"  \
        "another process wakes it), releasing the GIL and using almost no\n" \
        "CPU (a look once a second); a write wakes sleepers only when\n"    \
        "there are any.  A signal interrupts the sleep and its handler\n"   \
        "runs: Ctrl-C ends the wait.  Raises RuntimeError if this thread\n"  \
        "holds the write lock, or if a SeqLock's writer died inside its\n"  \
        "section (as read() does); a SeqRecord's dead writer's section is\n" \
        "rolled back, which counts as a write.")

/* _news_since(seq): wait(seq, 0), for seqlock_py._news (METH_O: it runs
 * twice per awaited wait). */
PyObject *news_since(bound_lock *b, PyObject *seq);
#define NEWS_SINCE_DOC                                                       \
    PyDoc_STR("_news_since($self, seq, /)\n--\n\n"                          \
              "wait(seq, 0): whether a write section has ended since the\n" \
              "state seq names (for seqlock_py._news).")
/* _waiter(seq, timeout=None): a cancellable wait, for seqlock_py._news. */
#define NEWS_WAITER_DOC                                                      \
    PyDoc_STR("_waiter($self, /, seq, timeout=None)\n--\n\n"                 \
              "A cancellable wait(seq, timeout); its next() is where the\n" \
              "asyncio forms' watcher thread sleeps.")
#define NEWS_WAIT_ASYNC_DOC                                                  \
    PyDoc_STR(                                                               \
        "wait_async($self, /, seq, timeout=None)\n--\n\n"                    \
        "A coroutine: await it for wait(seq, timeout)'s answer without\n"    \
        "blocking the event loop.  One watcher thread per lock or record\n"  \
        "sleeps for every pending wait_async of this process and wakes\n"   \
        "each event loop once per write; the timeout is the loop's timer,\n" \
        "and cancelling the await (task.cancel(), asyncio.timeout,\n"       \
        "wait_for) withdraws the wait at once.")
/* _waiter(seq, timeout=None): a cancellable wait, for seqlock_py._news. */
PyObject *news_waiter(PyObject *owner, bound_lock *b, PyObject *args,
                      PyObject *kwargs);
/* _weak_waiter(): the watcher's sleep, holding no reference to owner
 * (its deallocation calls unheld_let_go()); ValueError if closed. */
#define NEWS_WEAK_WAITER_DOC                                                 \
    PyDoc_STR("_weak_waiter($self, /)\n--\n\n"                              \
              "A cancellable wait that holds no reference to this object\n" \
              "(its next() is where the asyncio forms' watcher sleeps).")
PyObject *news_weak_waiter(PyObject *owner, bound_lock *b);
/* wait_async(seq, timeout=None): seqlock_py._news.wait_async's coroutine,
 * its arguments checked now rather than at the first await. */
PyObject *news_wait_async(PyObject *owner, PyObject *args, PyObject *kwargs);
/* changes(*, timeout=None) or changes_async(*, timeout=None) (name): the
 * generator of seqlock_py._news of that name, its timeout checked now. */
PyObject *news_changes(const char *name, PyObject *owner, PyObject *args,
                       PyObject *kwargs);

#endif /* SEQLOCK_PY_NEWS_H */
