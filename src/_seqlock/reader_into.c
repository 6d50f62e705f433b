/*
 * reader_into.c - ReaderInto, read_into() bound to one buffer.
 *
 * read_into(buffer) spends most of its instructions on the buffer, not on
 * the copy: exporting it, checking its format, length and place, releasing
 * it.  A reader copying into one buffer in a loop pays that once here.
 * The export is held for the object's life, so the buffer cannot be
 * resized or freed under it; the check that the buffer lies in no open
 * record's or ring's memory is made again only when that set changed
 * (open_memory_version()), since a record can be opened over memory the
 * buffer overlaps later.
 *
 * What rec.reader_into() hands out is the object's bound method into, a
 * builtin method (METH_FASTCALL), not the object itself: CPython 3.11
 * specializes the call of a bound builtin (f = rec.read; f()) and not
 * that of a callable object (about 60 instructions a call; 3.13t's
 * interpreter specializes neither).
 */
#include "reader_into.h"

#include "args.h"
#include "lock_path.h"
#include "open_memory.h"

typedef struct {
    PyObject_HEAD
    SeqRecordObject *record;
    Py_buffer view;
    size_t offset, n;  /* the data bytes copied: the field's, or all */
    _Atomic unsigned long long checked; /* open_memory_version() of the
                                           last overlap check */
} ReaderIntoObject;

PyDoc_STRVAR(ReaderInto_into_doc,
"into($self, /)\n--\n\n"
"Copy one consistent snapshot into the buffer and return its (even)\n"
"sequence number, as record.read_into(buffer) does, without exporting and\n"
"checking the buffer again.  ValueError once the record is closed, or if a\n"
"record or ring opened since lies over the buffer.");

/* into()'s body, its arguments checked (inlined in both callers: a call
 * is a tenth of it). */
Py_ALWAYS_INLINE static inline PyObject *
into_copy(ReaderIntoObject *self)
{
    SeqRecordObject *rec = self->record;
    unsigned long long now = open_memory_version();
    if (now != atomic_load_explicit(&self->checked, memory_order_relaxed)) {
        /* A record or ring opened or closed since: it may lie over the
         * buffer now. */
        RETURN_IF_CLOSED(rec, NULL);
        if (refuse_open_memory("into()", self->view.buf, self->n) < 0) {
            return NULL;
        }
        atomic_store_explicit(&self->checked, now, memory_order_relaxed);
    }
    /* snapshot() says closed first: the memory is touched only pinned (a
     * free-threaded build) or under the GIL from its check on. */
    uint64_t seq = snapshot(rec, self->view.buf, self->offset, self->n);
    return seq == SNAPSHOT_FAILED ? NULL : PyLong_FromUnsignedLongLong(seq);
}

static PyObject *
ReaderInto_into(ReaderIntoObject *self, PyObject *const *Py_UNUSED(args),
                Py_ssize_t nargs)
{
    if (takes_no_arguments("into", nargs) < 0) {
        return NULL;
    }
    return into_copy(self);
}

/* The vectorcall of the bound method reader_into() hands out
 * (builtin_method_vectorcall()): METH_FASTCALL's checks, then the copy. */
static PyObject *
into_vectorcall(PyObject *method, PyObject *const *Py_UNUSED(args),
                size_t nargsf, PyObject *kwnames)
{
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0) {
        PyErr_SetString(PyExc_TypeError,
                        "into() takes no keyword arguments");
        return NULL;
    }
    if (takes_no_arguments("into", PyVectorcall_NARGS(nargsf)) < 0) {
        return NULL;
    }
    return into_copy(
        (ReaderIntoObject *)((PyCFunctionObject *)method)->m_self);
}

static PyMethodDef ReaderInto_methods[] = {
    {"into", (PyCFunction)(void (*)(void))ReaderInto_into, METH_FASTCALL,
     ReaderInto_into_doc},
    {NULL},
};

PyObject *
reader_into_new(SeqRecordObject *rec, PyObject *const *args,
                Py_ssize_t nargsf, PyObject *kwnames)
{
    RETURN_IF_CLOSED(rec, NULL);
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs != 1 || nkw > 1
        || (nkw == 1
            && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0),
                                                "field") != 0)) {
        PyErr_SetString(PyExc_TypeError,
                        "reader_into() takes a buffer and, as a keyword, "
                        "field=name");
        return NULL;
    }
    module_state *state = state_of((PyObject *)rec);
    /* The version before the check: a change during it is seen at the
     * first call. */
    unsigned long long version = open_memory_version();
    ReaderIntoObject *self = PyObject_GC_New(ReaderIntoObject,
                                             state->reader_into_type);
    if (self == NULL) {
        return NULL;
    }
    self->record = NULL;
    self->view.obj = NULL;
    atomic_store_explicit(&self->checked, version, memory_order_relaxed);
    if (read_into_target(rec, args[0], nkw == 1 ? args[1] : NULL,
                         "reader_into()", &self->view, &self->offset,
                         &self->n) < 0) {
        self->view.obj = NULL;
        Py_DECREF(self);
        return NULL;
    }
    self->record = (SeqRecordObject *)Py_NewRef((PyObject *)rec);
    PyObject_GC_Track(self);
    /* A builtin method bound to self (PyCFunction_Type exactly: the type
     * 3.11's call specialization asks for), which holds self. */
    PyObject *into = PyCFunction_NewEx(&ReaderInto_methods[0],
                                       (PyObject *)self, NULL);
    Py_DECREF(self);
    if (into != NULL) {
        builtin_method_vectorcall(into, into_vectorcall);
    }
    return into;
}

static int
ReaderInto_traverse(ReaderIntoObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->record);
    Py_VISIT(self->view.obj);
    return 0;
}

/* No tp_clear: the buffer and the record stay while the object lives
 * (every call uses both).  A cycle through it runs through its record or
 * its buffer's exporter, whose clear breaks it. */
static void
ReaderInto_dealloc(ReaderIntoObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->view.obj != NULL) {
        PyBuffer_Release(&self->view);
    }
    Py_XDECREF(self->record);
    PyObject_GC_Del(self);
    Py_DECREF(type);
}

static PyObject *
ReaderInto_get_record(ReaderIntoObject *self, void *Py_UNUSED(closure))
{
    return Py_NewRef((PyObject *)self->record);
}

static PyObject *
ReaderInto_get_buffer(ReaderIntoObject *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->view.obj);
}

static PyGetSetDef ReaderInto_getset[] = {
    {"record", (getter)ReaderInto_get_record, NULL,
     "The SeqRecord it reads.", NULL},
    {"buffer", (getter)ReaderInto_get_buffer, NULL,
     "The buffer it copies into (the object reader_into() was given).",
     NULL},
    {NULL},
};

PyDoc_STRVAR(ReaderInto_doc,
"A record's reader bound to one buffer, checked once: what\n"
"SeqRecord.reader_into(buffer) makes, and hands out as its bound method\n"
"into (into.__self__ is the ReaderInto).");

static PyType_Slot ReaderInto_slots[] = {
    {Py_tp_doc, (void *)ReaderInto_doc},
    {Py_tp_dealloc, ReaderInto_dealloc},
    {Py_tp_traverse, ReaderInto_traverse},
    {Py_tp_getset, ReaderInto_getset},
    {Py_tp_methods, ReaderInto_methods},
    {0, NULL},
};

PyType_Spec reader_into_type_spec = {
    .name = "seqlock_py.ReaderInto",
    .basicsize = sizeof(ReaderIntoObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC
             | Py_TPFLAGS_DISALLOW_INSTANTIATION
             | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = ReaderInto_slots,
};
