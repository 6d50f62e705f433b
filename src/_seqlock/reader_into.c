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
 */
#include "reader_into.h"

#include "lock_path.h"
#include "open_memory.h"

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    SeqRecordObject *record;
    Py_buffer view;
    size_t offset, n;  /* the data bytes copied: the field's, or all */
    _Atomic unsigned long long checked; /* open_memory_version() of the
                                           last overlap check */
} ReaderIntoObject;

static PyObject *
ReaderInto_vectorcall(PyObject *callable, PyObject *const *Py_UNUSED(args),
                      size_t nargsf, PyObject *kwnames)
{
    ReaderIntoObject *self = (ReaderIntoObject *)callable;
    if (PyVectorcall_NARGS(nargsf) != 0
        || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError,
                        "a ReaderInto takes no arguments: into()");
        return NULL;
    }
    SeqRecordObject *rec = self->record;
    RETURN_IF_CLOSED(rec, NULL);
    unsigned long long now = open_memory_version();
    if (now != atomic_load_explicit(&self->checked, memory_order_relaxed)) {
        /* A record or ring opened or closed since: it may lie over the
         * buffer now. */
        if (refuse_open_memory("a ReaderInto", self->view.buf, self->n)
            < 0) {
            return NULL;
        }
        atomic_store_explicit(&self->checked, now, memory_order_relaxed);
    }
    uint64_t seq;
    if (snapshot(rec, self->view.buf, self->offset, self->n, &seq) < 0) {
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(seq);
}

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
    self->vectorcall = ReaderInto_vectorcall;
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
    return (PyObject *)self;
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

static PyMemberDef ReaderInto_members[] = {
    {"__vectorcalloffset__", Py_T_PYSSIZET,
     offsetof(ReaderIntoObject, vectorcall), Py_READONLY, NULL},
    {NULL},
};

PyDoc_STRVAR(ReaderInto_doc,
"What SeqRecord.reader_into(buffer) returns: into() copies one consistent\n"
"snapshot into the buffer and returns its sequence number, as\n"
"rec.read_into(buffer) does, the buffer checked once (not per call).\n"
"ValueError once the record is closed, or if a record or ring opened since\n"
"lies over the buffer.");

static PyType_Slot ReaderInto_slots[] = {
    {Py_tp_doc, (void *)ReaderInto_doc},
    {Py_tp_dealloc, ReaderInto_dealloc},
    {Py_tp_traverse, ReaderInto_traverse},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_getset, ReaderInto_getset},
    {Py_tp_members, ReaderInto_members},
    {0, NULL},
};

PyType_Spec reader_into_type_spec = {
    .name = "seqlock_py.ReaderInto",
    .basicsize = sizeof(ReaderIntoObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC
             | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_DISALLOW_INSTANTIATION
             | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = ReaderInto_slots,
};
