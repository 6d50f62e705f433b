/*
 * news.c - readers that wait for news: wait(seq, timeout=None) for both
 * types, the cancellable _Waiter that the asyncio forms' watcher thread
 * sleeps in, and the hand-over of changes(), wait_async() and
 * changes_async() to seqlock_py._news, where they are plain Python
 * generators and coroutines.
 *
 * A waiter sleeps on the lock's count (seqlock_wait_for_change()): no
 * polling, almost no CPU, across processes for a record in shared memory; a
 * section's end pays for a wake-up only when someone sleeps.  Asyncio
 * cannot sleep on a futex, so one watcher thread per SeqLock or SeqRecord
 * sleeps for all of its awaited waits (_Waiter.next()) and hands each
 * event loop its answers (seqlock_py._news).
 */
#include "news.h"
#include "args.h"
#include "module.h"
#include "unheld.h"

typedef struct {
    PyObject_HEAD
    PyObject *owner;   /* the SeqLock or SeqRecord: keeps *lock alive */
    bound_lock *lock;
    uint64_t seq;
    int64_t timeout_ns;
    _Atomic uint32_t cancelled;
} WaiterObject;

/* ---- arguments ---- */

/* (seq, timeout=None) of wait() and wait_async(), converted to C values
 * once, here: nothing after this sees the caller's objects (the watcher
 * thread that answers wait_async() must run none of their methods). */
static int
wait_args(const char *name, const char *format, PyObject *args,
          PyObject *kwargs, uint64_t *seq, int64_t *timeout_ns)
{
    static char *keywords[] = {"seq", "timeout", NULL};
    PyObject *seq_obj, *timeout = Py_None;
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if ((kwargs == NULL || PyDict_GET_SIZE(kwargs) == 0) && nargs >= 1
        && nargs <= 2) {
        /* The usual call, by position: no format to interpret (a consumer
         * that awaits in a loop makes one per wake-up). */
        seq_obj = PyTuple_GET_ITEM(args, 0);
        if (nargs == 2) {
            timeout = PyTuple_GET_ITEM(args, 1);
        }
    }
    else if (!PyArg_ParseTupleAndKeywords(args, kwargs, format, keywords,
                                          &seq_obj, &timeout)) {
        return -1;
    }
    if (sequence_from_object(name, seq_obj, seq) < 0) {
        return -1;
    }
    return timeout_to_ns(timeout, timeout_ns);
}

/* The keyword-only timeout=None of changes() and changes_async(). */
static int
changes_args(const char *name, PyObject *args, PyObject *kwargs,
             int64_t *timeout_ns)
{
    static char *keywords[] = {"timeout", NULL};
    char format[32];
    PyOS_snprintf(format, sizeof format, "|$O:%s", name);
    PyObject *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, format, keywords,
                                     &timeout)) {
        return -1;
    }
    return timeout_to_ns(timeout, timeout_ns);
}

/* ---- read_versioned() ---- */

PyObject *
versioned(uint64_t seq, PyObject *value)
{
    if (value == NULL) {
        return NULL;
    }
    PyObject *seq_obj = PyLong_FromUnsignedLongLong(seq);
    PyObject *pair = seq_obj == NULL ? NULL : PyTuple_Pack(2, seq_obj, value);
    Py_XDECREF(seq_obj);
    Py_DECREF(value);
    return pair;
}

/* ---- wait() ---- */

PyObject *
news_wait(bound_lock *b, PyObject *args, PyObject *kwargs)
{
    uint64_t seq, now;
    int64_t timeout_ns;
    if (wait_args("wait", "O|O:wait", args, kwargs, &seq, &timeout_ns) < 0) {
        return NULL;
    }
    int changed = wait_for_change(b, seq, timeout_ns, NULL, 0, &now);
    return changed < 0 ? NULL : PyBool_FromLong(changed);
}

PyObject *
news_since(bound_lock *b, PyObject *seq_obj)
{
    uint64_t seq, now;
    if (sequence_from_object("_news_since", seq_obj, &seq) < 0) {
        return NULL;
    }
    int changed = wait_for_change(b, seq, 0, NULL, 0, &now);
    return changed < 0 ? NULL : PyBool_FromLong(changed);
}

/* ---- _Waiter: one cancellable wait, for seqlock_py._news ---- */

PyObject *
news_waiter(PyObject *owner, bound_lock *b, PyObject *args, PyObject *kwargs)
{
    uint64_t seq;
    int64_t timeout_ns;
    if (wait_args("_waiter", "O|O:_waiter", args, kwargs, &seq, &timeout_ns)
        < 0) {
        return NULL;
    }
    module_state *state = PyType_GetModuleState(Py_TYPE(owner));
    if (state == NULL) {
        return NULL;
    }
    WaiterObject *w = PyObject_GC_New(WaiterObject, state->waiter_type);
    if (w == NULL) {
        return NULL;
    }
    w->owner = Py_NewRef(owner);
    w->lock = b;
    w->seq = seq;
    w->timeout_ns = timeout_ns;
    atomic_init(&w->cancelled, 0);
    PyObject_GC_Track(w);
    return (PyObject *)w;
}

PyDoc_STRVAR(Waiter_wait_doc,
"wait($self, /)\n--\n\n"
"Wait as owner.wait(seq, timeout) would; False also once cancelled.");

static PyObject *
Waiter_wait(WaiterObject *self, PyObject *Py_UNUSED(ignored))
{
    uint64_t now;
    int changed = wait_for_change(self->lock, self->seq, self->timeout_ns,
                                  &self->cancelled, 0, &now);
    return changed < 0 ? NULL : PyBool_FromLong(changed);
}

PyDoc_STRVAR(Waiter_next_doc,
"next($self, /, seq, timeout=None)\n--\n\n"
"The (even) sequence number once a write section has ended since the\n"
"state seq names (at once if one has); None if timeout passes first or\n"
"the waiter is cancelled.  Sleeps with long naps: idle, it looks once a\n"
"second; a cancel that races its falling asleep is seen within that.\n"
"For the watcher thread of seqlock_py._news.");

static PyObject *
Waiter_next(WaiterObject *self, PyObject *args, PyObject *kwargs)
{
    uint64_t seq, now;
    int64_t timeout_ns;
    if (wait_args("next", "O|O:next", args, kwargs, &seq, &timeout_ns) < 0) {
        return NULL;
    }
    int changed = wait_for_change(self->lock, seq, timeout_ns,
                                  &self->cancelled, 1, &now);
    if (changed < 0) {
        return NULL;
    }
    if (!changed) {
        Py_RETURN_NONE;
    }
    return PyLong_FromUnsignedLongLong(now);
}

PyDoc_STRVAR(Waiter_cancel_doc,
"cancel($self, /)\n--\n\n"
"End the wait (now or when it starts): it returns False.");

static PyObject *
Waiter_cancel(WaiterObject *self, PyObject *Py_UNUSED(ignored))
{
    atomic_store_explicit(&self->cancelled, 1, memory_order_release);
    seqlock_wake_waiters(self->lock->sl);
    Py_RETURN_NONE;
}

static int
Waiter_traverse(WaiterObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->owner);
    return 0;
}

static int
Waiter_clear(WaiterObject *self)
{
    Py_CLEAR(self->owner);
    return 0;
}

static void
Waiter_dealloc(WaiterObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    (void)Waiter_clear(self);
    PyObject_GC_Del(self);
    Py_DECREF(type);
}

static PyMethodDef Waiter_methods[] = {
    {"wait", (PyCFunction)Waiter_wait, METH_NOARGS, Waiter_wait_doc},
    {"next", (PyCFunction)(void (*)(void))Waiter_next,
     METH_VARARGS | METH_KEYWORDS, Waiter_next_doc},
    {"cancel", (PyCFunction)Waiter_cancel, METH_NOARGS, Waiter_cancel_doc},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Waiter_slots[] = {
    {Py_tp_dealloc, Waiter_dealloc},
    {Py_tp_traverse, Waiter_traverse},
    {Py_tp_clear, Waiter_clear},
    {Py_tp_methods, Waiter_methods},
    {Py_tp_doc, (void *)PyDoc_STR("One cancellable wait for a write (for "
                                  "seqlock_py._news; not public).")},
    {0, NULL},
};

PyType_Spec waiter_type_spec = {
    .name = "seqlock_py._seqlock._Waiter",
    .basicsize = sizeof(WaiterObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC
             | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Waiter_slots,
};

/* ---- _WeakWaiter: the watcher's sleep, holding nothing ---- */

/* The asyncio watcher stays asleep on its owner's count between a
 * consumer's awaited waits (seqlock_py._news), so that the next wait needs
 * no hand-over to a thread; it must not keep the owner alive meanwhile
 * (its buffer is released as soon as the last reference goes).  So this
 * waiter holds no reference: it sleeps pinned through the owner's anchor
 * (unheld.h), and the owner's deallocation wakes it and waits for it. */
typedef struct {
    PyObject_HEAD
    const void *owner; /* for is_for() only: never dereferenced */
    bound_lock *lock;  /* the owner's: read only while pinned */
    const void *key;   /* unheld_key(lock), computed while it lived */
    const char *kind;  /* what it is, for its ValueError ("ring"...) */
    int guarded;       /* its memory is a file's (bus_guard.h) */
    unheld_anchor *anchor;
    /* set by cancel(); the wait it ends takes it back (a kick) */
    _Atomic uint32_t cancelled;
} WeakWaiterObject;

PyObject *
news_weak_waiter(PyObject *owner, bound_lock *b)
{
    if (b->record != NULL && record_is_closed(b->record)) {
        (void)set_record_closed(b->record);
        return NULL;
    }
    module_state *state = PyType_GetModuleState(Py_TYPE(owner));
    if (state == NULL) {
        return NULL;
    }
    unheld_anchor *anchor = unheld_anchor_take(b);
    if (anchor == NULL) {
        return NULL;
    }
    WeakWaiterObject *w = PyObject_New(WeakWaiterObject,
                                       state->weak_waiter_type);
    if (w == NULL) {
        unheld_anchor_release(anchor);
        return NULL;
    }
    w->owner = owner;
    w->lock = b;
    w->key = unheld_key(b);
    w->kind = b->record == NULL           ? "lock"
              : b->record->kind != NULL ? b->record->kind
                                        : "record";
    w->guarded = b->record != NULL && b->record->guarded != NULL;
    w->anchor = anchor;
    atomic_init(&w->cancelled, 0);
    return (PyObject *)w;
}

PyDoc_STRVAR(WeakWaiter_next_doc,
"next($self, seq, timeout, /)\n--\n\n"
"As _Waiter.next(): the (even) count once a write section has ended\n"
"since the state seq names; None if timeout passes first or cancel()\n"
"was called (which this return takes back).  ValueError once the owner\n"
"is closed or freed (its deallocation wakes this wait and waits for it).");

static PyObject *
WeakWaiter_next(WeakWaiterObject *self, PyObject *const *args,
                Py_ssize_t nargs)
{
    uint64_t seq, now;
    int64_t timeout_ns;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError,
                     "next() takes 2 positional arguments (%zd given)", nargs);
        return NULL;
    }
    /* Positional only, and no keyword parsing: it runs once per wake-up. */
    if (sequence_from_object("next", args[0], &seq) < 0
        || timeout_to_ns(args[1], &timeout_ns) < 0) {
        return NULL;
    }
    if (self->guarded) {
        (void)bus_guard_reassert(); /* a wait may be long: make sure */
    }
    int changed = wait_for_change_unheld(self->lock, self->key, self->kind,
                                         &self->anchor->gone, seq,
                                         timeout_ns, &self->cancelled, &now);
    if (changed < 0) {
        return NULL;
    }
    if (!changed) {
        /* A cancel is a kick: it makes the watcher look once. */
        atomic_store_explicit(&self->cancelled, 0, memory_order_relaxed);
        Py_RETURN_NONE;
    }
    return PyLong_FromUnsignedLongLong(now);
}

PyDoc_STRVAR(WeakWaiter_cancel_doc,
"cancel($self, /)\n--\n\n"
"End the wait now, or the next one at its start: it returns None.");

static PyObject *
WeakWaiter_cancel(WeakWaiterObject *self, PyObject *Py_UNUSED(ignored))
{
    atomic_store_explicit(&self->cancelled, 1, memory_order_release);
    /* The wake-up touches the owner's memory: pinned, as the wait is (a
     * closed or freed owner's sleepers are woken by its closer). */
    if (in_use_enter_fenced(self->key, &self->anchor->gone)
        == IN_USE_ENTERED) {
        const bound_record *r = self->lock->record;
        if (r == NULL || !record_is_closed(r)) {
            seqlock_wake_waiters(self->lock->sl);
        }
        in_use_leave();
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(WeakWaiter_is_for_doc,
"is_for($self, owner, /)\n--\n\n"
"Whether this waiter sleeps on owner (a live object the caller holds):\n"
"False for a new object where a freed owner was.");

static PyObject *
WeakWaiter_is_for(WeakWaiterObject *self, PyObject *owner)
{
    /* owner is alive, so if it is ours its deallocation has not begun:
     * gone is 0.  Another object at the freed owner's address comes after
     * that deallocation set gone. */
    return PyBool_FromLong(
        self->owner == (const void *)owner
        && !atomic_load_explicit(&self->anchor->gone, memory_order_acquire));
}

static void
WeakWaiter_dealloc(WeakWaiterObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    unheld_anchor_release(self->anchor);
    PyObject_Free(self);
    Py_DECREF(type);
}

static PyMethodDef WeakWaiter_methods[] = {
    {"next", (PyCFunction)(void (*)(void))WeakWaiter_next, METH_FASTCALL,
     WeakWaiter_next_doc},
    {"cancel", (PyCFunction)WeakWaiter_cancel, METH_NOARGS,
     WeakWaiter_cancel_doc},
    {"is_for", (PyCFunction)WeakWaiter_is_for, METH_O, WeakWaiter_is_for_doc},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot WeakWaiter_slots[] = {
    {Py_tp_dealloc, WeakWaiter_dealloc},
    {Py_tp_methods, WeakWaiter_methods},
    {Py_tp_doc, (void *)PyDoc_STR("A cancellable wait for a write that holds "
                                  "no reference to its owner (for "
                                  "seqlock_py._news; not public).")},
    {0, NULL},
};

PyType_Spec weak_waiter_type_spec = {
    .name = "seqlock_py._seqlock._WeakWaiter",
    .basicsize = sizeof(WeakWaiterObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
             | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = WeakWaiter_slots,
};

/* ---- the Python forms ---- */

/* seqlock_py._news.<name>(*args), args[0] left for the module.  The
 * module is imported on first use (it imports asyncio, which `import
 * seqlock_py` should not pay for) and kept in the module state
 * (python_helper()). */
static PyObject *
call_news(PyObject *owner, PyObject *name, PyObject **args, size_t nargs)
{
    module_state *state = PyType_GetModuleState(Py_TYPE(owner));
    if (state == NULL) {
        return NULL;
    }
    PyObject *news = python_helper(&state->news_module, "seqlock_py._news");
    if (news == NULL) {
        return NULL;
    }
    args[0] = news;
    return PyObject_VectorcallMethod(name, args, nargs + 1, NULL);
}

PyObject *
news_wait_async(PyObject *owner, PyObject *args, PyObject *kwargs)
{
    uint64_t seq;
    int64_t timeout_ns;
    if (wait_args("wait_async", "O|O:wait_async", args, kwargs, &seq,
                  &timeout_ns)
        < 0) {
        return NULL;
    }
    module_state *state = PyType_GetModuleState(Py_TYPE(owner));
    if (state == NULL) {
        return NULL;
    }
    /* A plain int, never the caller's object: the watcher thread keeps
     * it, hashes it and compares it. */
    PyObject *seq_int = PyLong_FromUnsignedLongLong(seq);
    if (seq_int == NULL) {
        return NULL;
    }
    PyObject *seconds = timeout_ns_to_seconds(timeout_ns);
    if (seconds == NULL) {
        Py_DECREF(seq_int);
        return NULL;
    }
    PyObject *call[] = {NULL, owner, seq_int, seconds};
    PyObject *coroutine = call_news(owner, state->wait_async_name, call, 3);
    Py_DECREF(seconds);
    Py_DECREF(seq_int);
    return coroutine;
}

PyObject *
news_changes(const char *name, PyObject *owner, PyObject *args,
             PyObject *kwargs)
{
    int64_t timeout_ns;
    if (changes_args(name, args, kwargs, &timeout_ns) < 0) {
        return NULL;
    }
    PyObject *seconds = timeout_ns_to_seconds(timeout_ns);
    if (seconds == NULL) {
        return NULL;
    }
    PyObject *name_obj = PyUnicode_FromString(name);
    if (name_obj == NULL) {
        Py_DECREF(seconds);
        return NULL;
    }
    PyObject *call[] = {NULL, owner, seconds};
    PyObject *items = call_news(owner, name_obj, call, 2);
    Py_DECREF(name_obj);
    Py_DECREF(seconds);
    return items;
}
