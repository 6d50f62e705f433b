/*
 * section_copy.c - a write section's copy of one array field.
 *
 * What an exported view of an array field points into must be memory
 * whose size only this file decides: the section copies the field's
 * declared size into and out of it, and a view handed to user code makes
 * its exporter reachable (memoryview(w.state).obj).  So the exporter is
 * this object, with no method that resizes it, its bytes allocated once at
 * the field's size and freed only with the object, which every exported
 * view keeps alive: a view that outlives its section writes into a copy
 * nothing reads any more, never into freed memory.
 */
#include "section_copy.h"

#include "module.h"

typedef struct {
    PyObject_HEAD
    unsigned char *bytes;
    Py_ssize_t len;       /* bytes */
    Py_ssize_t itemsize;
    int ndim;
    char format[2];       /* the field's struct code, NUL-terminated */
    Py_ssize_t shape[FIELD_MAX_DIMS];
    Py_ssize_t strides[FIELD_MAX_DIMS]; /* C order */
} SectionCopyObject;

PyObject *
section_copy_new(PyTypeObject *type, const field_spec *f)
{
    size_t n = f->item_size * (size_t)f->count;
    SectionCopyObject *copy = PyObject_New(SectionCopyObject, type);
    if (copy == NULL) {
        return NULL;
    }
    copy->bytes = PyMem_Malloc(n > 0 ? n : 1);
    if (copy->bytes == NULL) {
        Py_DECREF(copy);
        return PyErr_NoMemory();
    }
    copy->len = (Py_ssize_t)n;
    copy->itemsize = (Py_ssize_t)f->item_size;
    copy->ndim = f->ndim;
    copy->format[0] = f->kind;
    copy->format[1] = '\0';
    Py_ssize_t stride = copy->itemsize;
    for (int d = f->ndim - 1; d >= 0; d--) {
        copy->shape[d] = f->shape[d];
        copy->strides[d] = stride;
        stride *= f->shape[d];
    }
    return (PyObject *)copy;
}

unsigned char *
section_copy_bytes(PyObject *copy)
{
    return ((SectionCopyObject *)copy)->bytes;
}

static void
SectionCopy_dealloc(SectionCopyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyMem_Free(self->bytes);
    PyObject_Free(self);
    Py_DECREF(type);
}

/* Writable, C-contiguous, of the field's element type and shape; each
 * part only if the consumer asks for it (as array.array answers). */
static int
SectionCopy_getbuffer(SectionCopyObject *self, Py_buffer *view, int flags)
{
    view->obj = Py_NewRef(self);
    view->buf = self->bytes;
    view->len = self->len;
    view->readonly = 0;
    view->itemsize = self->itemsize;
    view->format = (flags & PyBUF_FORMAT) ? self->format : NULL;
    if (flags & PyBUF_ND) {
        view->ndim = self->ndim;
        view->shape = self->shape;
    }
    else { /* bytes: what PyBuffer_FillInfo() describes */
        view->ndim = 1;
        view->shape = NULL;
    }
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? self->strides
                                                            : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}

static PyType_Slot SectionCopy_slots[] = {
    {Py_tp_dealloc, SectionCopy_dealloc},
    {Py_bf_getbuffer, SectionCopy_getbuffer},
    {Py_tp_doc, (void *)PyDoc_STR(
        "A write section's copy of an array field: what a view of the field "
        "exports (memoryview(w.state).obj).  Its size is the field's, for "
        "good; the section stores it into the record when it commits.")},
    {0, NULL},
};

PyType_Spec section_copy_type_spec = {
    .name = "seqlock_py.SectionCopy",
    .basicsize = sizeof(SectionCopyObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
             | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = SectionCopy_slots,
};
