/*
 * seqlock_type.c - the SeqLock type and its write-section context manager.
 *
 * A SeqLock is a seqlock_t and its view on the one locking path
 * (lock_path.c); every field is a C11 atomic or the core's mutex, so the
 * type needs no GIL and no critical sections on a free-threaded build.
 * Readers write nothing to the lock on the fast path; only waiting touches
 * it (a sleeper's announcement).  (A call through a name all threads share
 * still writes the object's reference count on a free-threaded build: the
 * interpreter's doing, not this file's.)
 */
#include "module.h"
#include "args.h"
#include "lock_path.h"
#include "news.h"
#include "unheld.h"

#include <errno.h>

typedef struct {
    PyObject_HEAD
    bound_lock lock;  /* the one locking path's view of `word` */
    PyObject *weakreflist;
    seqlock_t word;
} SeqLockObject;

typedef struct {
    PyObject_HEAD
    SeqLockObject *owner;
    int64_t timeout_ns;
} WriteSectionObject;

/* Take the write lock within timeout_ns (-1: for ever).  Returns 1 if
 * taken, 0 on timeout, -1 with an exception set. */
static int
take_write_lock(SeqLockObject *self, int64_t timeout_ns)
{
    lock_status taken = lock_write(&self->lock, timeout_ns);
    return taken > LOCK_TIMED_OUT ? 1 : (int)taken;
}

/* ---- SeqLock ---- */

static PyObject *
SeqLock_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"max_retries", NULL};
    PyObject *max_retries_obj = NULL;
    int max_retries = DEFAULT_MAX_RETRIES;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$O:SeqLock", keywords,
                                     &max_retries_obj)
        || (max_retries_obj != NULL
            && (max_retries = max_retries_from_object(max_retries_obj)) < 0)) {
        return NULL;
    }
    SeqLockObject *self = (SeqLockObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    int err = seqlock_init(&self->word);
    if (err != 0) {
        Py_DECREF(self); /* zeroed: dealloc has nothing to undo */
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    bound_lock_init(&self->lock, &self->word, NULL, (PyObject *)self,
                    BOUND_PRIVATE);
    atomic_store_explicit(&self->lock.budget.max_retries, max_retries,
                          memory_order_relaxed);
    defer_refcount((PyObject *)self);
    self->weakreflist = NULL;
    return (PyObject *)self;
}

/* A SeqLock refers to nothing but its type; it is a GC type all the same,
 * as objects that may be shared by threads (deferred reference counts,
 * compat.h) must be. */
static int
SeqLock_traverse(SeqLockObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static void
SeqLock_dealloc(SeqLockObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    unheld_let_go(&self->lock, 1); /* the watcher may sleep on it */
    /* No thread of ours holds it: a holder keeps the object alive. */
    bound_lock_fini(&self->lock);
    seqlock_destroy(&self->word);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyObject *
SeqLock_repr(SeqLockObject *self)
{
    return PyUnicode_FromFormat(
        "<%s object at %p sequence=%llu locked=%s>", Py_TYPE(self)->tp_name,
        self, (unsigned long long)seqlock_sequence(&self->word),
        seqlock_is_locked(&self->word) ? "True" : "False");
}

PyDoc_STRVAR(SeqLock_acquire_write_doc,
"acquire_write($self, /, blocking=True, timeout=-1)\n--\n\n"
"Take the write lock; return True if taken, False on timeout.\n\n"
"With the conventions of threading.Lock.acquire: blocking=False only\n"
"tries; timeout is in seconds, -1 waits for ever.  While waiting the\n"
"thread releases the GIL and stays responsive to signals.  Raises\n"
"RuntimeError if this thread already holds the lock.");

static PyObject *
SeqLock_acquire_write(SeqLockObject *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"blocking", "timeout", NULL};
    int blocking = 1;
    PyObject *timeout = NULL;
    int64_t timeout_ns;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|pO:acquire_write",
                                     keywords, &blocking, &timeout)
        || acquire_args_to_ns(blocking, timeout, &timeout_ns) < 0) {
        return NULL;
    }
    int taken = take_write_lock(self, timeout_ns);
    return taken < 0 ? NULL : PyBool_FromLong(taken);
}

PyDoc_STRVAR(SeqLock_release_write_doc,
"release_write($self, /)\n--\n\n"
"Release the write lock, making the sequence even again.\n\n"
"Raises RuntimeError if the calling thread does not hold it.");

static PyObject *
SeqLock_release_write(SeqLockObject *self, PyObject *Py_UNUSED(ignored))
{
    if (unlock_write(&self->lock) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(SeqLock_enter_doc,
"__enter__($self, /)\n--\n\n"
"Take the write lock, waiting as long as it takes; return the lock.");

static PyObject *
SeqLock_enter(SeqLockObject *self, PyObject *Py_UNUSED(ignored))
{
    if (take_write_lock(self, -1) < 0) {
        return NULL;
    }
    return Py_NewRef(self);
}

PyDoc_STRVAR(SeqLock_exit_doc,
"__exit__($self, exc_type, exc_value, traceback, /)\n--\n\n"
"Release the write lock, also when the section raised.");

static PyObject *
SeqLock_exit(SeqLockObject *self, PyObject *const *Py_UNUSED(args),
             Py_ssize_t Py_UNUSED(nargs))
{
    if (unlock_write(&self->lock) < 0) {
        return NULL;
    }
    Py_RETURN_FALSE;
}

PyDoc_STRVAR(SeqLock_write_doc,
"write($self, /, timeout=None)\n--\n\n"
"Return a context manager for one write section.\n\n"
"``with lock.write(timeout=0.5):`` takes the write lock on entry,\n"
"raising TimeoutError if it is not free within timeout seconds (None\n"
"waits for ever), and releases it on exit, also when the body raises.\n"
"``with lock:`` is the same without a timeout.");

static PyObject *
SeqLock_write(SeqLockObject *self, PyObject *args, PyObject *kwargs)
{
    int64_t timeout_ns;
    if (write_timeout_arg(args, kwargs, &timeout_ns) < 0) {
        return NULL;
    }
    module_state *state = PyType_GetModuleState(Py_TYPE(self));
    if (state == NULL) {
        return NULL;
    }
    WriteSectionObject *section = PyObject_GC_New(
        WriteSectionObject, state->write_section_type);
    if (section == NULL) {
        return NULL;
    }
    section->owner = (SeqLockObject *)Py_NewRef(self);
    section->timeout_ns = timeout_ns;
    PyObject_GC_Track(section);
    return (PyObject *)section;
}

/* One call of read()'s fn, and what it returned. */
typedef struct {
    PyObject *fn;
    PyObject *const *args;
    size_t nargsf;
    PyObject *kwnames;
    PyObject *result;
} read_call;

static int
call_reader(void *ctx, uint64_t seq)
{
    (void)seq;
    read_call *c = ctx;
    c->result = PyObject_Vectorcall(c->fn, c->args, c->nargsf, c->kwnames);
    return c->result == NULL ? -1 : 0;
}

/* A write overlapped the call: whatever fn saw may be torn, so drop its
 * result or its Exception; a BaseException (KeyboardInterrupt) stays. */
static int
discard_call(void *ctx)
{
    read_call *c = ctx;
    if (c->result != NULL) {
        Py_CLEAR(c->result);
    }
    else if (PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();
    }
    else {
        return -1;
    }
    return PyErr_CheckSignals();
}

PyDoc_STRVAR(SeqLock_read_doc,
"read($self, fn, /, *args, **kwargs)\n--\n\n"
"Call ``fn(*args, **kwargs)`` until no write overlaps the call; return\n"
"its result.\n\n"
"fn should only copy the protected state: it may run more than once, and\n"
"a run that overlapped a write may have seen torn data.  So an Exception\n"
"raised by a run that overlapped a write is discarded and the call\n"
"retried; one raised by a run that no write overlapped propagates, as\n"
"does any BaseException that is not an Exception (KeyboardInterrupt).\n"
"While a writer is active the thread waits with the GIL released.  After\n"
"max_retries overlapped runs in a row, fn runs once more with the lock\n"
"held against writers, so a reader always finishes (read_fallbacks\n"
"counts these).\n"
"Raises RuntimeError if this thread holds the write lock.");

/* read(fn, /, *args, **kwargs) as `name`: fn's result, and in *seq the
 * (even) count of the state it read. */
static PyObject *
read_with(SeqLockObject *self, const char *name, PyObject *const *args,
          Py_ssize_t nargsf, PyObject *kwnames, uint64_t *seq)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1) {
        PyErr_Format(PyExc_TypeError,
                     "%s() missing required argument 'fn' (pos 1)", name);
        return NULL;
    }
    if (!PyCallable_Check(args[0])) {
        PyErr_Format(PyExc_TypeError,
                     "%s() argument 'fn' must be callable, not %.200s", name,
                     Py_TYPE(args[0])->tp_name);
        return NULL;
    }
    read_call call = {args[0], args + 1, (size_t)(nargs - 1), kwnames, NULL};
    if (read_consistently(&self->lock, call_reader, discard_call, &call,
                          seq) < 0) {
        Py_XDECREF(call.result);
        return NULL;
    }
    return call.result;
}

static PyObject *
SeqLock_read(SeqLockObject *self, PyObject *const *args, Py_ssize_t nargsf,
             PyObject *kwnames)
{
    uint64_t seq;
    return read_with(self, "read", args, nargsf, kwnames, &seq);
}

PyDoc_STRVAR(SeqLock_read_versioned_doc,
"read_versioned($self, fn, /, *args, **kwargs)\n--\n\n"
"As ``read(fn, *args, **kwargs)``, returning (sequence, result): result\n"
"is fn's result for the state whose (even) sequence number is sequence.\n"
"Pass sequence to wait() to sleep until the next write.");

static PyObject *
SeqLock_read_versioned(SeqLockObject *self, PyObject *const *args,
                       Py_ssize_t nargsf, PyObject *kwnames)
{
    uint64_t seq;
    PyObject *result = read_with(self, "read_versioned", args, nargsf,
                                 kwnames, &seq);
    return versioned(seq, result);
}

PyDoc_STRVAR(SeqLock_read_begin_doc,
"read_begin($self, /)\n--\n\n"
"Start a hand-written read: return the (even) sequence number.\n\n"
"Waits, with the GIL released, while a writer is active.  Pass the result\n"
"to read_retry() after copying the protected state.  Raises RuntimeError\n"
"if this thread holds the write lock.");

static PyObject *
SeqLock_read_begin(SeqLockObject *self, PyObject *const *Py_UNUSED(args),
                   Py_ssize_t nargs)
{
    if (takes_no_arguments("read_begin", nargs) < 0) {
        return NULL;
    }
    uint64_t seq;
    if (begin_read(&self->lock, &seq) < 0) {
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(seq);
}

PyDoc_STRVAR(SeqLock_read_retry_doc,
"read_retry($self, seq, /)\n--\n\n"
"Return True if a write overlapped the read that read_begin() started\n"
"with seq: the copy may be torn and the read must be retried.");

static PyObject *
SeqLock_read_retry(SeqLockObject *self, PyObject *seq_obj)
{
    uint64_t seq;
    if (sequence_from_object("read_retry", seq_obj, &seq) < 0) {
        return NULL;
    }
    return PyBool_FromLong(seqlock_read_retry(&self->word, seq));
}

PyDoc_STRVAR(SeqLock_locked_doc,
"locked($self, /)\n--\n\n"
"Return True if some thread holds the write lock.");

static PyObject *
SeqLock_locked(SeqLockObject *self, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(seqlock_is_locked(&self->word));
}

PyDoc_STRVAR(SeqLock_reduce_doc,
"__reduce__($self, /)\n--\n\n"
"Raise TypeError: a lock cannot be pickled or copied.");

static PyObject *
SeqLock_reduce(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return pickling_refused(
        self, "a SeqLock guards objects of this process only; to share "
              "numbers with another process, make a SeqRecord with "
              "SeqRecord.create_shared(name, ...), pass the name, and open "
              "it there with SeqRecord.attach_shared(name)");
}

static PyObject *
SeqLock_get_sequence(SeqLockObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(seqlock_sequence(&self->word));
}

/* ---- readers that wait for news (news.c) ---- */

static PyObject *
SeqLock_wait(SeqLockObject *self, PyObject *args, PyObject *kwargs)
{
    return news_wait(&self->lock, args, kwargs);
}

static PyObject *
SeqLock_wait_async(SeqLockObject *self, PyObject *args, PyObject *kwargs)
{
    return news_wait_async((PyObject *)self, args, kwargs);
}

static PyObject *
SeqLock_waiter(SeqLockObject *self, PyObject *args, PyObject *kwargs)
{
    return news_waiter((PyObject *)self, &self->lock, args, kwargs);
}

static PyObject *
SeqLock_news_since(SeqLockObject *self, PyObject *seq)
{
    return news_since(&self->lock, seq);
}

static PyObject *
SeqLock_weak_waiter(SeqLockObject *self, PyObject *Py_UNUSED(ignored))
{
    return news_weak_waiter((PyObject *)self, &self->lock);
}

static PyMethodDef SeqLock_methods[] = {
    {"acquire_write", (PyCFunction)(void (*)(void))SeqLock_acquire_write,
     METH_VARARGS | METH_KEYWORDS, SeqLock_acquire_write_doc},
    {"release_write", (PyCFunction)SeqLock_release_write, METH_NOARGS,
     SeqLock_release_write_doc},
    {"write", (PyCFunction)(void (*)(void))SeqLock_write,
     METH_VARARGS | METH_KEYWORDS, SeqLock_write_doc},
    {"__enter__", (PyCFunction)SeqLock_enter, METH_NOARGS, SeqLock_enter_doc},
    {"__exit__", (PyCFunction)(void (*)(void))SeqLock_exit, METH_FASTCALL,
     SeqLock_exit_doc},
    {"read", (PyCFunction)(void (*)(void))SeqLock_read,
     METH_FASTCALL | METH_KEYWORDS, SeqLock_read_doc},
    {"read_versioned", (PyCFunction)(void (*)(void))SeqLock_read_versioned,
     METH_FASTCALL | METH_KEYWORDS, SeqLock_read_versioned_doc},
    {"wait", (PyCFunction)(void (*)(void))SeqLock_wait,
     METH_VARARGS | METH_KEYWORDS, NEWS_WAIT_DOC},
    {"_news_since", (PyCFunction)SeqLock_news_since, METH_O, NEWS_SINCE_DOC},
    {"wait_async", (PyCFunction)(void (*)(void))SeqLock_wait_async,
     METH_VARARGS | METH_KEYWORDS, NEWS_WAIT_ASYNC_DOC},
    {"_waiter", (PyCFunction)(void (*)(void))SeqLock_waiter,
     METH_VARARGS | METH_KEYWORDS, NEWS_WAITER_DOC},
    {"_weak_waiter", (PyCFunction)SeqLock_weak_waiter, METH_NOARGS,
     NEWS_WEAK_WAITER_DOC},
    {"read_begin", (PyCFunction)(void (*)(void))SeqLock_read_begin,
     METH_FASTCALL,
     SeqLock_read_begin_doc},
    {"read_retry", (PyCFunction)SeqLock_read_retry, METH_O,
     SeqLock_read_retry_doc},
    {"locked", (PyCFunction)SeqLock_locked, METH_NOARGS, SeqLock_locked_doc},
    {"__reduce__", SeqLock_reduce, METH_NOARGS, SeqLock_reduce_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef SeqLock_getset[] = {
    READ_BUDGET_GETSETS(offsetof(SeqLockObject, lock.budget)),
    {"sequence", (getter)SeqLock_get_sequence, NULL,
     PyDoc_STR("The sequence count: even while no writer is active, odd "
               "during a write section; +2 per completed write."), NULL},
    {"_news_sequence", (getter)SeqLock_get_sequence, NULL,
     PyDoc_STR("sequence, under the name seqlock_py._news reads."), NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef SeqLock_members[] = {
    {"__weaklistoffset__", Py_T_PYSSIZET,
     offsetof(SeqLockObject, weakreflist), Py_READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

PyDoc_STRVAR(SeqLock_doc,
"SeqLock(*, max_retries=16)\n--\n\n"
"A sequence lock: writers serialise, readers take no lock.\n\n"
"A writer takes the lock (``with lock:``, ``lock.write(timeout)`` or\n"
"``acquire_write``), which makes the sequence odd, changes the shared\n"
"state, and releases it, which makes the sequence even again.  A reader\n"
"copies the state inside ``lock.read(fn)``, or between ``read_begin()``\n"
"and ``read_retry(seq)``, and retries if a write overlapped.  Readers\n"
"never block writers and write nothing to the lock, except that a waiting\n"
"reader announces itself and read() locks writers out for one run after\n"
"max_retries overlapped runs.  (On a free-threaded build a call through a\n"
"name all threads share, a global ``lock.read(fn)``, still writes the\n"
"lock object's reference count; bind ``read = lock.read`` in each thread\n"
"instead.)");

static PyType_Slot SeqLock_slots[] = {
    {Py_tp_new, SeqLock_new},
    {Py_tp_dealloc, SeqLock_dealloc},
    {Py_tp_traverse, SeqLock_traverse},
    {Py_tp_repr, SeqLock_repr},
    {Py_tp_methods, SeqLock_methods},
    {Py_tp_getset, SeqLock_getset},
    {Py_tp_members, SeqLock_members},
    {Py_tp_doc, (void *)SeqLock_doc},
    {0, NULL},
};

PyType_Spec seqlock_type_spec = {
    .name = "seqlock_py.SeqLock",
    .basicsize = sizeof(SeqLockObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = SeqLock_slots,
};

/* ---- the write-section context manager ---- */

static int
WriteSection_traverse(WriteSectionObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->owner);
    return 0;
}

static int
WriteSection_clear(WriteSectionObject *self)
{
    Py_CLEAR(self->owner);
    return 0;
}

static void
WriteSection_dealloc(WriteSectionObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    (void)WriteSection_clear(self);
    PyObject_GC_Del(self);
    Py_DECREF(type);
}

static PyObject *
WriteSection_enter(WriteSectionObject *self, PyObject *Py_UNUSED(ignored))
{
    if (entered_or_timed_out(lock_write(&self->owner->lock,
                                        self->timeout_ns)) < 0) {
        return NULL;
    }
    return Py_NewRef(self->owner);
}

static PyObject *
WriteSection_exit(WriteSectionObject *self, PyObject *const *Py_UNUSED(args),
                  Py_ssize_t Py_UNUSED(nargs))
{
    if (unlock_write(&self->owner->lock) < 0) {
        return NULL;
    }
    Py_RETURN_FALSE;
}

static PyMethodDef WriteSection_methods[] = {
    {"__enter__", (PyCFunction)WriteSection_enter, METH_NOARGS,
     PyDoc_STR("__enter__($self, /)\n--\n\nTake the write lock; raise "
               "TimeoutError if the timeout passes first.")},
    {"__exit__", (PyCFunction)(void (*)(void))WriteSection_exit,
     METH_FASTCALL,
     PyDoc_STR("__exit__($self, exc_type, exc_value, traceback, /)\n--\n\n"
               "Release the write lock.")},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot WriteSection_slots[] = {
    {Py_tp_dealloc, WriteSection_dealloc},
    {Py_tp_traverse, WriteSection_traverse},
    {Py_tp_clear, WriteSection_clear},
    {Py_tp_methods, WriteSection_methods},
    {Py_tp_doc, (void *)PyDoc_STR("One write section of a SeqLock; made by "
                                  "SeqLock.write().")},
    {0, NULL},
};

PyType_Spec write_section_type_spec = {
    .name = "seqlock_py.WriteSection",
    .basicsize = sizeof(WriteSectionObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
             | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_HAVE_GC,
    .slots = WriteSection_slots,
};
