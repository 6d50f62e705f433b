/*
 * record_writer.c - writing a SeqRecord: update()'s values converted then
 * stored in one write section, and the write section's objects (the
 * RecordWriter that write() returns, and its array fields' proxies).
 */
#include "seqrecord.h"

#include "args.h"

static int check_in_section(RecordWriterObject *w);

/* Convert update()'s keyword values into buf (laid out like the data),
 * marking the fields they set in chosen[].  The call's kwnames tuple and
 * value array keep every name and value alive while their conversions
 * run user code (__float__, a str subclass's __eq__).  0 or -1. */
static int
encode_values(const record_layout *layout, PyObject *const *values,
              PyObject *kwnames, unsigned char *buf, char *chosen)
{
    Py_ssize_t n = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        const field_spec *f = layout_find(layout, name);
        if (f == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_Format(PyExc_TypeError, "the record has no field %R",
                             name);
            }
            return -1;
        }
        char *seen = &chosen[f - layout->fields];
        if (*seen) { /* two names that compare equal to one field */
            PyErr_Format(PyExc_TypeError,
                         "update() got multiple values for field %R", name);
            return -1;
        }
        *seen = 1;
        if (field_encode(f, values[i], buf + f->offset) < 0) {
            return -1;
        }
    }
    return 0;
}

static void
store_values(const record_layout *layout, seqlock_word_t *data,
             const unsigned char *buf, const char *chosen)
{
    for (Py_ssize_t i = 0; i < layout->nfields; i++) {
        const field_spec *f = &layout->fields[i];
        if (chosen[i]) {
            record_store_bytes(data, f->offset, buf + f->offset,
                               f->item_size * (size_t)f->count);
        }
    }
}

/* Open a write section.  First, if this thread holds a section whose
 * writer another thread freed (no object can close it now), undo it. */
lock_status
begin_write(SeqRecordObject *self, int64_t timeout_ns)
{
    uint64_t dropped = atomic_load_explicit(&self->dropped_section,
                                            memory_order_relaxed);
    if (dropped != 0 && dropped == seqlock_self()
        && seqlock_held_by_me(self->rec.view.lock)) {
        atomic_store_explicit(&self->dropped_section, 0,
                              memory_order_relaxed);
        (void)abort_write(&self->lock);
    }
    lock_status status = lock_write(&self->lock, timeout_ns);
    if (status > LOCK_TIMED_OUT) {
        atomic_fetch_add_explicit(&self->sections, 1, memory_order_relaxed);
    }
    return status;
}

/* update(**values), as METH_FASTCALL | METH_KEYWORDS hands it over:
 * convert every value first (that runs user code), then store them: in
 * writer's section if one is given (checked after the conversions, which
 * may have closed it), else in a write section of their own.  Nothing is
 * written unless every value converted. */
int
update_fields(SeqRecordObject *self, RecordWriterObject *writer,
              PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    if (PyVectorcall_NARGS(nargsf) != 0) {
        PyErr_SetString(PyExc_TypeError,
                        "update() takes the values as keywords only");
        return -1;
    }
    RETURN_IF_CLOSED(self, -1);
    unsigned char stack[STACK_SNAPSHOT_BYTES];
    const record_layout *layout = self->layout;
    unsigned char *buf = scratch(stack, layout->data_bytes);
    char *chosen = PyMem_Calloc((size_t)layout->nfields, 1);
    int result = -1;
    if (buf == NULL || chosen == NULL) {
        if (chosen == NULL) {
            PyErr_NoMemory();
        }
        goto done;
    }
    if (encode_values(layout, args, kwnames, buf, chosen) < 0) {
        goto done;
    }
    if (writer != NULL) {
        if (check_in_section(writer) < 0) {
            goto done;
        }
        store_values(layout, record_copy(&self->rec.view, 0), buf, chosen);
    }
    else {
        /* Pinned after the conversions: they run user code, which may
         * close the record. */
        if (record_pin(&self->rec) < 0) {
            goto done;
        }
        int failed = begin_write(self, -1) < 0;
        if (!failed) {
            store_values(layout, record_copy(&self->rec.view, 0), buf,
                         chosen);
            failed = unlock_write(&self->lock) < 0;
        }
        record_unpin(&self->rec);
        if (failed) {
            goto done;
        }
    }
    result = 0;
done:
    PyMem_Free(chosen);
    if (buf != NULL) {
        scratch_free(buf, stack);
    }
    return result;
}

/* ---- RecordWriter: the write section and its field proxy ---- */

/* 1 if w's section is still open: a thread that died inside it, or a fork
 * that left its thread behind, may have let the lock go to another. */
static int
section_is_current(RecordWriterObject *w)
{
    return atomic_load_explicit(&w->active, memory_order_relaxed)
           && atomic_load_explicit(&w->record->sections,
                                   memory_order_relaxed) == w->section;
}

/* 0 if the calling thread is inside this writer's section, else -1 with
 * RuntimeError. */
static int
check_in_section(RecordWriterObject *w)
{
    if (!section_is_current(w)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the write section is not open: use the writer "
                        "inside its with block");
        return -1;
    }
    if (!seqlock_held_by_me(w->record->rec.view.lock)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the write section belongs to another thread");
        return -1;
    }
    return 0;
}

/* Close the section: its changes stand, or (rollback) are undone. */
static int
close_section(RecordWriterObject *w, int rollback)
{
    if (check_in_section(w) < 0) {
        return -1;
    }
    /* The open section keeps close() off the memory until it ends; from
     * there on, for a free-threaded build's close(), a pin does
     * (record_pin()), taken whether closed or not: a section must end. */
#ifdef Py_GIL_DISABLED
    in_use_status pinned = in_use_enter(&w->record->rec, NULL);
    if (pinned != IN_USE_ENTERED) {
        return record_pin_failed(pinned); /* the section stays open */
    }
#endif
    atomic_store_explicit(&w->active, 0, memory_order_relaxed);
    int result = rollback ? abort_write(&w->record->lock)
                          : unlock_write(&w->record->lock);
#ifdef Py_GIL_DISABLED
    in_use_leave();
#endif
    return result;
}

static int
RecordWriter_traverse(RecordWriterObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->record);
    return 0;
}

/* An open section needs its record (dealloc undoes it): keep it. */
static int
RecordWriter_clear(RecordWriterObject *self)
{
    if (!atomic_load_explicit(&self->active, memory_order_relaxed)) {
        Py_CLEAR(self->record);
    }
    return 0;
}

static void
RecordWriter_dealloc(RecordWriterObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (section_is_current(self)) {
        /* Dropped inside its section: undo it rather than leave the
         * record locked for ever; on another thread than the holder's,
         * tell the holder to undo it at its next write.  (A section taken
         * over since is another writer's: leave it alone.) */
        seqlock_t *sl = self->record->rec.view.lock;
        if (seqlock_held_by_me(sl)) {
            PyObject *exc = PyErr_GetRaisedException();
            (void)close_section(self, 1);
            PyErr_SetRaisedException(exc);
        }
        else {
            atomic_store_explicit(
                &self->record->dropped_section,
                atomic_load_explicit(&sl->holder, memory_order_relaxed),
                memory_order_relaxed);
        }
    }
    Py_XDECREF(self->record);
    PyObject_GC_Del(self);
    Py_DECREF(type);
}

static PyObject *
RecordWriter_enter(RecordWriterObject *self, PyObject *Py_UNUSED(ignored))
{
    const bound_record *r = &self->record->rec;
    if (record_pin(r) < 0) {
        return NULL;
    }
    lock_status taken = begin_write(self->record, self->timeout_ns);
    record_unpin(r);
    if (entered_or_timed_out(taken) < 0) {
        return NULL;
    }
    self->section = atomic_load_explicit(&self->record->sections,
                                         memory_order_relaxed);
    atomic_store_explicit(&self->active, 1, memory_order_relaxed);
    return Py_NewRef(self);
}

static PyObject *
RecordWriter_exit(RecordWriterObject *self, PyObject *const *args,
                  Py_ssize_t nargs)
{
    if (close_section(self, nargs > 0 && args[0] != Py_None) < 0) {
        return NULL;
    }
    Py_RETURN_FALSE;
}

static PyObject *
RecordWriter_update(RecordWriterObject *self, PyObject *const *args,
                    Py_ssize_t nargsf, PyObject *kwnames)
{
    if (update_fields(self->record, self, args, nargsf, kwnames) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
RecordWriter_getattro(RecordWriterObject *self, PyObject *name)
{
    const field_spec *f = layout_find(self->record->layout, name);
    if (f == NULL) {
        return PyErr_Occurred() ? NULL
                                : PyObject_GenericGetAttr((PyObject *)self,
                                                          name);
    }
    if (check_in_section(self) < 0) {
        return NULL;
    }
    if (f->is_array) {
        module_state *state = state_of((PyObject *)self);
        ArrayFieldObject *view = PyObject_GC_New(ArrayFieldObject,
                                                 state->array_field_type);
        if (view == NULL) {
            return NULL;
        }
        view->writer = (RecordWriterObject *)Py_NewRef(self);
        view->field = f;
        PyObject_GC_Track(view);
        return (PyObject *)view;
    }
    unsigned char item[8];
    record_load_bytes(item, record_copy(&self->record->rec.view, 0), f->offset,
                      f->item_size);
    return item_decode(f, item);
}

static int
RecordWriter_setattro(RecordWriterObject *self, PyObject *name,
                      PyObject *value)
{
    const field_spec *f = layout_find(self->record->layout, name);
    if (f == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_AttributeError, "the record has no field %R",
                         name);
        }
        return -1;
    }
    if (value == NULL) {
        PyErr_Format(PyExc_AttributeError, "cannot delete field %R", name);
        return -1;
    }
    size_t n = f->item_size * (size_t)f->count;
    unsigned char stack[STACK_SNAPSHOT_BYTES];
    unsigned char *buf = scratch(stack, n);
    if (buf == NULL) {
        return -1;
    }
    /* Convert first: that runs user code, which may close the section. */
    int result = field_encode(f, value, buf);
    if (result == 0) {
        result = check_in_section(self);
    }
    if (result == 0) {
        record_store_bytes(record_copy(&self->record->rec.view, 0), f->offset, buf,
                           n);
    }
    scratch_free(buf, stack);
    return result;
}

static PyMethodDef RecordWriter_methods[] = {
    {"__enter__", (PyCFunction)RecordWriter_enter, METH_NOARGS,
     PyDoc_STR("__enter__($self, /)\n--\n\nOpen the write section; "
               "TimeoutError if the timeout passes first.")},
    {"__exit__", (PyCFunction)(void (*)(void))RecordWriter_exit,
     METH_FASTCALL,
     PyDoc_STR("__exit__($self, exc_type, exc_value, traceback, /)\n--\n\n"
               "Close the write section; if it raised, undo its changes.")},
    {"update", (PyCFunction)(void (*)(void))RecordWriter_update,
     METH_FASTCALL | METH_KEYWORDS,
     PyDoc_STR("update($self, /, **values)\n--\n\nSet several fields in "
               "this write section; all values are checked first.")},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot RecordWriter_slots[] = {
    {Py_tp_dealloc, RecordWriter_dealloc},
    {Py_tp_traverse, RecordWriter_traverse},
    {Py_tp_clear, RecordWriter_clear},
    {Py_tp_getattro, RecordWriter_getattro},
    {Py_tp_setattro, RecordWriter_setattro},
    {Py_tp_methods, RecordWriter_methods},
    {Py_tp_doc, (void *)PyDoc_STR(
        "One write section of a SeqRecord, made by SeqRecord.write(); "
        "inside it, fields are attributes (w.x = 1.0, w.samples[3] = 2.5).")},
    {0, NULL},
};

PyType_Spec record_writer_type_spec = {
    .name = "seqlock_py.RecordWriter",
    .basicsize = sizeof(RecordWriterObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
             | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_HAVE_GC,
    .slots = RecordWriter_slots,
};

/* ---- ArrayField: w.samples inside a write section ---- */

static int
ArrayField_traverse(ArrayFieldObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->writer);
    return 0;
}

static int
ArrayField_clear(ArrayFieldObject *self)
{
    Py_CLEAR(self->writer);
    return 0;
}

static void
ArrayField_dealloc(ArrayFieldObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    (void)ArrayField_clear(self);
    PyObject_GC_Del(self);
    Py_DECREF(type);
}

static Py_ssize_t
ArrayField_length(ArrayFieldObject *self)
{
    return self->field->count;
}

/* The element offset for index i, or (size_t)-1 with IndexError /
 * RuntimeError.  A negative index has already had the length added by
 * PySequence_GetItem/SetItem (sq_item's contract), so a negative i here is
 * out of range: adding the length again would make arr[-5] of a 4-element
 * array write arr[3]. */
static size_t
element_offset(ArrayFieldObject *self, Py_ssize_t i)
{
    if (check_in_section(self->writer) < 0) {
        return (size_t)-1;
    }
    if (i < 0 || i >= self->field->count) {
        PyErr_Format(PyExc_IndexError, "field %R index out of range",
                     self->field->name);
        return (size_t)-1;
    }
    return self->field->offset + (size_t)i * self->field->item_size;
}

static PyObject *
ArrayField_item(ArrayFieldObject *self, Py_ssize_t i)
{
    size_t offset = element_offset(self, i);
    if (offset == (size_t)-1) {
        return NULL;
    }
    unsigned char item[8];
    record_load_bytes(item, record_copy(&self->writer->record->rec.view, 0), offset,
                      self->field->item_size);
    return item_decode(self->field, item);
}

static int
ArrayField_ass_item(ArrayFieldObject *self, Py_ssize_t i, PyObject *value)
{
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "cannot delete array elements");
        return -1;
    }
    size_t offset = element_offset(self, i);
    unsigned char item[8];
    /* Convert, then check again: the conversion runs user code, which may
     * have closed the section. */
    if (offset == (size_t)-1 || item_encode(self->field, value, item) < 0
        || check_in_section(self->writer) < 0) {
        return -1;
    }
    record_store_bytes(record_copy(&self->writer->record->rec.view, 0), offset,
                       item, self->field->item_size);
    return 0;
}

static PyType_Slot ArrayField_slots[] = {
    {Py_tp_dealloc, ArrayField_dealloc},
    {Py_tp_traverse, ArrayField_traverse},
    {Py_tp_clear, ArrayField_clear},
    {Py_sq_length, ArrayField_length},
    {Py_sq_item, ArrayField_item},
    {Py_sq_ass_item, ArrayField_ass_item},
    {Py_tp_doc, (void *)PyDoc_STR(
        "An array field inside a write section: index it to read or set "
        "elements.")},
    {0, NULL},
};

PyType_Spec array_field_type_spec = {
    .name = "seqlock_py.ArrayField",
    .basicsize = sizeof(ArrayFieldObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
             | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_HAVE_GC,
    .slots = ArrayField_slots,
};
