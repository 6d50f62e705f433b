/*
 * seqlock_type.c - the SeqLock type and its write-section context manager.
 *
 * A SeqLock is a seqlock_t and nothing else: every field is a C11 atomic,
 * so the type needs no GIL and no critical sections on a free-threaded
 * build.  Readers of the Python object write no shared memory on the fast
 * path; only waiting (wait.c) touches the lock's sleeper count.
 */
#include "binding.h"

#include <errno.h>

typedef struct {
    PyObject_HEAD
    seqlock_t lock;
    fork_guard guard;
    read_budget budget;
    PyObject *weakreflist;
} SeqLockObject;

typedef struct {
    PyObject_HEAD
    SeqLockObject *owner;
    int64_t timeout_ns;
} WriteSectionObject;

/* ---- helpers ---- */

/* Take the write lock within timeout_ns (-1: for ever).  Returns 1 if
 * taken, 0 on timeout, -1 with an exception set. */
static int
warn_owner_died(void)
{
    return PyErr_WarnEx(PyExc_RuntimeWarning,
                        "took over a write lock whose owner thread exited "
                        "without releasing it", 1);
}

static int
take_write_lock(SeqLockObject *self, int64_t timeout_ns)
{
    if (SEQLOCK_UNLIKELY(!write_tryseqlock(&self->lock))) {
        (void)fork_guard_repair(&self->guard, &self->lock, NULL);
        int got = wait_write_lock(&self->lock, timeout_ns);
        if (got < 0 || got == WAIT_TIMED_OUT) {
            return got < 0 ? -1 : 0;
        }
        if (got == WAIT_OWNER_DIED && warn_owner_died() < 0) {
            write_sequnlock(&self->lock);
            return -1;
        }
    }
    fork_guard_note(&self->guard);
    return 1;
}

/* Take the lock word for a reader's locking pass (the sequence stays as it
 * is, so lock-free readers carry on).  0, or -1 with an exception. */
static int
take_read_lock(SeqLockObject *self)
{
    int taken = take_lock_excl(&self->lock, &self->guard, NULL);
    if (taken < 0) {
        return -1;
    }
    if (taken == 1 && warn_owner_died() < 0) {
        read_sequnlock_excl(&self->lock);
        return -1;
    }
    fork_guard_note(&self->guard);
    return 0;
}

/* Release the write lock the calling thread holds; -1 with RuntimeError
 * if it holds none. */
static int
release_write_lock(SeqLockObject *self)
{
    uint32_t owner = seqlock_owner(&self->lock);
    if (owner != 0 && owner != seqlock_thread_id()
        && fork_guard_repair(&self->guard, &self->lock, NULL)) {
        owner = seqlock_owner(&self->lock);
    }
    if (owner == 0 || !(seqlock_sequence(&self->lock) & 1u)) {
        /* Free, or held by a reader's locking pass, not a writer. */
        PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
        return -1;
    }
    if (owner != seqlock_thread_id()) {
        PyErr_SetString(PyExc_RuntimeError,
                        "cannot release a write lock held by another thread");
        return -1;
    }
    write_sequnlock(&self->lock);
    return 0;
}

/* Turn a failed read_begin() into an exception. */
static int
read_begin_or_raise(SeqLockObject *self, unsigned *seq)
{
    if (SEQLOCK_LIKELY(seqlock_read_try_begin(&self->lock, seq))) {
        return 0;
    }
    (void)fork_guard_repair(&self->guard, &self->lock, NULL);
    int begun = wait_read_begin(&self->lock, seq);
    if (SEQLOCK_UNLIKELY(begun == WAIT_OWNER_DIED)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the write lock's owner thread exited inside a write "
                        "section");
        return -1;
    }
    return begun < 0 ? -1 : 0;
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
    seqlock_init(&self->lock);
    atomic_init(&self->guard.holder, 0);
    read_budget_init(&self->budget, max_retries);
    self->weakreflist = NULL;
    return (PyObject *)self;
}

static void
SeqLock_dealloc(SeqLockObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyObject *
SeqLock_repr(SeqLockObject *self)
{
    unsigned seq = seqlock_sequence(&self->lock);
    return PyUnicode_FromFormat("<%s object at %p sequence=%u locked=%s>",
                                Py_TYPE(self)->tp_name, self, seq,
                                seqlock_owner(&self->lock) ? "True" : "False");
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
    if (release_write_lock(self) < 0) {
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
    if (release_write_lock(self) < 0) {
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
    static char *keywords[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    int64_t timeout_ns;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:write", keywords,
                                     &timeout)
        || timeout_to_ns(timeout, &timeout_ns) < 0) {
        return NULL;
    }
    module_state *state = PyType_GetModuleState(Py_TYPE(self));
    if (state == NULL) {
        return NULL;
    }
    WriteSectionObject *section = PyObject_New(WriteSectionObject,
                                               state->write_section_type);
    if (section == NULL) {
        return NULL;
    }
    section->owner = (SeqLockObject *)Py_NewRef(self);
    section->timeout_ns = timeout_ns;
    return (PyObject *)section;
}

/* The pass of read() that no write may overlap: writers are kept out by
 * holding the lock word; lock-free readers are not disturbed. */
static PyObject *
read_locked(SeqLockObject *self, PyObject *fn, PyObject *const *args,
            Py_ssize_t nargs, PyObject *kwnames)
{
    if (take_read_lock(self) < 0) {
        return NULL;
    }
    PyObject *result = PyObject_Vectorcall(fn, args, (size_t)nargs, kwnames);
    read_sequnlock_excl(&self->lock);
    read_budget_count(&self->budget.fallbacks);
    return result;
}

PyDoc_STRVAR(SeqLock_read_doc,
"read($self, fn, /, *args, **kwargs)\n--\n\n"
"Call fn(*args, **kwargs) until no write overlaps the call; return its\n"
"result.\n\n"
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

static PyObject *
SeqLock_read(SeqLockObject *self, PyObject *const *args, Py_ssize_t nargsf,
             PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError,
                        "read() missing required argument 'fn' (pos 1)");
        return NULL;
    }
    PyObject *fn = args[0];
    if (!PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError,
                     "read() argument 'fn' must be callable, not %.200s",
                     Py_TYPE(fn)->tp_name);
        return NULL;
    }
    int max_retries = read_budget_max(&self->budget);
    for (int failed = 0;; failed++) {
        if (SEQLOCK_UNLIKELY(failed > max_retries)) {
            return read_locked(self, fn, args + 1, nargs - 1, kwnames);
        }
        unsigned seq;
        if (read_begin_or_raise(self, &seq) < 0) {
            return NULL;
        }
        PyObject *result = PyObject_Vectorcall(fn, args + 1, nargs - 1,
                                               kwnames);
        if (SEQLOCK_LIKELY(!read_seqretry(&self->lock, seq))) {
            return result;
        }
        read_budget_count(&self->budget.retries);
        /* A write overlapped: whatever fn saw may be torn. */
        if (result != NULL) {
            Py_DECREF(result);
        }
        else if (PyErr_ExceptionMatches(PyExc_Exception)) {
            PyErr_Clear();
        }
        else {
            return NULL;
        }
        if (PyErr_CheckSignals() < 0) {
            return NULL;
        }
    }
}

PyDoc_STRVAR(SeqLock_read_begin_doc,
"read_begin($self, /)\n--\n\n"
"Start a hand-written read: return the (even) sequence number.\n\n"
"Waits, with the GIL released, while a writer is active.  Pass the result\n"
"to read_retry() after copying the protected state.  Raises RuntimeError\n"
"if this thread holds the write lock.");

static PyObject *
SeqLock_read_begin(SeqLockObject *self, PyObject *Py_UNUSED(ignored))
{
    unsigned seq;
    if (read_begin_or_raise(self, &seq) < 0) {
        return NULL;
    }
    return PyLong_FromUnsignedLong(seq);
}

PyDoc_STRVAR(SeqLock_read_retry_doc,
"read_retry($self, seq, /)\n--\n\n"
"Return True if a write overlapped the read that read_begin() started\n"
"with seq: the copy may be torn and the read must be retried.");

static PyObject *
SeqLock_read_retry(SeqLockObject *self, PyObject *seq_obj)
{
    if (!PyLong_Check(seq_obj)) {
        PyErr_Format(PyExc_TypeError,
                     "read_retry() argument must be int, not %.200s",
                     Py_TYPE(seq_obj)->tp_name);
        return NULL;
    }
    int overflow;
    long long seq = PyLong_AsLongLongAndOverflow(seq_obj, &overflow);
    if (seq == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (overflow || seq < 0 || seq > (long long)UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError,
                        "seq is not a value read_begin() returns");
        return NULL;
    }
    return PyBool_FromLong(read_seqretry(&self->lock, (unsigned)seq));
}

PyDoc_STRVAR(SeqLock_locked_doc,
"locked($self, /)\n--\n\n"
"Return True if some thread holds the write lock.");

static PyObject *
SeqLock_locked(SeqLockObject *self, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(seqlock_owner(&self->lock) != 0);
}

PyDoc_STRVAR(SeqLock_reduce_doc,
"__reduce__($self, /)\n--\n\n"
"Raise TypeError: a lock cannot be pickled or copied.");

static PyObject *
SeqLock_get_sequence(SeqLockObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLong(seqlock_sequence(&self->lock));
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
    {"read_begin", (PyCFunction)SeqLock_read_begin, METH_NOARGS,
     SeqLock_read_begin_doc},
    {"read_retry", (PyCFunction)SeqLock_read_retry, METH_O,
     SeqLock_read_retry_doc},
    {"locked", (PyCFunction)SeqLock_locked, METH_NOARGS, SeqLock_locked_doc},
    {"__reduce__", reduce_refused, METH_NOARGS, SeqLock_reduce_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef SeqLock_getset[] = {
    READ_BUDGET_GETSETS(offsetof(SeqLockObject, budget)),
    {"sequence", (getter)SeqLock_get_sequence, NULL,
     PyDoc_STR("The sequence count: even while no writer is active, odd "
               "during a write section; +2 per completed write."), NULL},
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
"never block writers and never write shared memory, except that read()\n"
"locks writers out for one run after max_retries overlapped runs.");

static PyType_Slot SeqLock_slots[] = {
    {Py_tp_new, SeqLock_new},
    {Py_tp_dealloc, SeqLock_dealloc},
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
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = SeqLock_slots,
};

/* ---- the write-section context manager ---- */

static void
WriteSection_dealloc(WriteSectionObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    Py_DECREF(self->owner);
    PyObject_Free(self);
    Py_DECREF(type);
}

static PyObject *
WriteSection_enter(WriteSectionObject *self, PyObject *Py_UNUSED(ignored))
{
    if (entered_or_timed_out(take_write_lock(self->owner, self->timeout_ns)) < 0) {
        return NULL;
    }
    return Py_NewRef(self->owner);
}

static PyObject *
WriteSection_exit(WriteSectionObject *self, PyObject *const *Py_UNUSED(args),
                  Py_ssize_t Py_UNUSED(nargs))
{
    if (release_write_lock(self->owner) < 0) {
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
    {Py_tp_methods, WriteSection_methods},
    {Py_tp_doc, (void *)PyDoc_STR("One write section of a SeqLock; made by "
                                  "SeqLock.write().")},
    {0, NULL},
};

PyType_Spec write_section_type_spec = {
    .name = "seqlock_py.WriteSection",
    .basicsize = sizeof(WriteSectionObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
             | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = WriteSection_slots,
};
