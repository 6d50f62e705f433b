/*
 * record_writer.c - writing a SeqRecord: update()'s values converted then
 * stored in one write section, and the write section's objects (the
 * RecordWriter that write() returns, and its array fields' proxies).
 */
#include "seqrecord.h"

#include "args.h"
#include "field_choice.h"
#include "section_copy.h"

static int check_in_section(RecordWriterObject *w);

/* ---- a write section's view of its fields ---- */

/* The staging copy of field f in w's section (section_copy.h), or NULL. */
static inline PyObject *
staged_of(const RecordWriterObject *w, const field_spec *f)
{
    return w->staged == NULL ? NULL
                             : w->staged[f - w->record->layout->fields];
}

/* Store n bytes at byte `at` of field f, in w's section: into its staging
 * copy if the field has one, else into the record (the holder's copy). */
static void
section_store(RecordWriterObject *w, const field_spec *f, size_t at,
              const void *src, size_t n)
{
    PyObject *staged = staged_of(w, f);
    if (staged != NULL) {
        memcpy(section_copy_bytes(staged) + at, src, n);
    }
    else {
        record_store_bytes(record_copy(&w->record->rec.view, 0),
                           f->offset + at, src, n);
    }
}

static void
section_load(RecordWriterObject *w, const field_spec *f, size_t at,
             void *dst, size_t n)
{
    PyObject *staged = staged_of(w, f);
    if (staged != NULL) {
        memcpy(dst, section_copy_bytes(staged) + at, n);
    }
    else {
        record_load_bytes(dst, record_copy(&w->record->rec.view, 0),
                          f->offset + at, n);
    }
}

/* End the staging copies of w's section, storing them into the record
 * first if commit (the lock still held). */
static void
end_staging(RecordWriterObject *w, int commit)
{
    if (w->staged == NULL) {
        return;
    }
    const record_layout *layout = w->record->layout;
    for (Py_ssize_t i = 0; i < layout->nfields; i++) {
        PyObject *staged = w->staged[i];
        if (staged == NULL) {
            continue;
        }
        const field_spec *f = &layout->fields[i];
        if (commit) {
            record_store_bytes(record_copy(&w->record->rec.view, 0),
                               f->offset, section_copy_bytes(staged),
                               f->item_size * (size_t)f->count);
        }
        w->staged[i] = NULL;
        Py_DECREF(staged);
    }
}

/* A field update() was given: where its converted bytes are in the
 * scratch buffer. */
static void
store_values(SeqRecordObject *self, RecordWriterObject *writer,
             const unsigned char *buf, const chosen_field *chosen,
             Py_ssize_t n)
{
    seqlock_word_t *data = record_copy(&self->rec.view, 0);
    for (Py_ssize_t i = 0; i < n; i++) {
        const field_spec *f = chosen[i].f;
        size_t bytes = f->item_size * (size_t)f->count;
        if (writer != NULL) {
            section_store(writer, f, 0, buf + chosen[i].at, bytes);
        }
        else {
            record_store_bytes(data, f->offset, buf + chosen[i].at, bytes);
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
        atomic_store_explicit(&self->rec.held_forks,
                              atomic_load_explicit(&in_use_forks_,
                                                   memory_order_relaxed),
                              memory_order_relaxed);
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
    field_choice *made;
    const field_choice *choice = layout_choose(self->layout, kwnames,
                                               "update()", "record", &made);
    if (choice == NULL) {
        return -1;
    }
    Py_ssize_t n = choice->n;
    const chosen_field *chosen = choice->chosen;
    unsigned char stack[STACK_SNAPSHOT_BYTES];
    unsigned char *buf = scratch(stack, choice->total);
    int result = -1;
    if (buf == NULL) {
        goto done;
    }
    /* One conversion pass into private scratch: conversions run user
     * code (__float__, __index__, a buffer's exporter, a list another
     * thread changes), none of it with the record locked. */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (field_encode_inline(chosen[i].f, args[i], buf + chosen[i].at)
            < 0) {
            goto done;
        }
    }
    if (writer != NULL) {
        if (check_in_section(writer) < 0) {
            goto done;
        }
        store_values(self, writer, buf, chosen, n);
    }
    else {
        /* Pinned after the conversions: they run user code, which may
         * close the record. */
        if (record_pin(&self->rec) < 0) {
            goto done;
        }
        int failed = begin_write(self, -1) < 0;
        if (!failed) {
            store_values(self, NULL, buf, chosen, n);
            failed = unlock_write(&self->lock) < 0;
        }
        record_unpin(&self->rec);
        if (failed) {
            goto done;
        }
    }
    result = 0;
done:
    if (buf != NULL) {
        scratch_free(buf, stack);
    }
    field_choice_free(made);
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
        return record_pin_failed(&w->record->rec, pinned); /* the section stays open */
    }
#endif
    end_staging(w, !rollback);
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
    if (self->staged != NULL) {
        if (self->record != NULL) {
            end_staging(self, 0);
        }
        PyMem_Free(self->staged);
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
    end_staging(self, 0); /* a lost section's, if any */
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
    /* a scalar: item_size <= 8 (said, for the compiler's bounds checks) */
    size_t n = f->item_size < sizeof item ? f->item_size : sizeof item;
    record_load_bytes(item, record_copy(&self->record->rec.view, 0), f->offset,
                      n);
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
        section_store(self, f, 0, buf, n);
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
    return self->field->shape[0];
}

/* The field's value (nested tuples for a shape) as the section sees it. */
static PyObject *
ArrayField_tolist(ArrayFieldObject *self, PyObject *Py_UNUSED(ignored))
{
    const field_spec *f = self->field;
    if (check_in_section(self->writer) < 0) {
        return NULL;
    }
    size_t n = f->item_size * (size_t)f->count;
    unsigned char stack[STACK_SNAPSHOT_BYTES];
    unsigned char *buf = scratch(stack, n);
    if (buf == NULL) {
        return NULL;
    }
    section_load(self->writer, f, 0, buf, n);
    PyObject *value = field_decode(f, buf);
    scratch_free(buf, stack);
    return value;
}

/* Nested tuples as nested lists (a new reference; steals value). */
static PyObject *
as_lists(PyObject *value)
{
    if (value == NULL || !PyTuple_Check(value)) {
        return value;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(value);
    PyObject *list = PyList_New(n);
    for (Py_ssize_t i = 0; list != NULL && i < n; i++) {
        PyObject *item = as_lists(Py_NewRef(PyTuple_GET_ITEM(value, i)));
        if (item == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, item);
    }
    Py_DECREF(value);
    return list;
}

static PyObject *
ArrayField_tolist_method(ArrayFieldObject *self, PyObject *Py_UNUSED(ignored))
{
    return as_lists(ArrayField_tolist(self, NULL));
}

static PyObject *
ArrayField_iter(ArrayFieldObject *self)
{
    PyObject *items = ArrayField_tolist(self, NULL);
    if (items == NULL) {
        return NULL;
    }
    PyObject *it = PyObject_GetIter(items);
    Py_DECREF(items);
    return it;
}

/* The flat element range a key selects in a one-dimensional field:
 * 0 with *start, *step, *len, or -1 with IndexError/TypeError.  A
 * shaped field takes only [:] here (rows and elements: index
 * numpy.asarray(w.field)). */
static int
element_range(ArrayFieldObject *self, PyObject *key, Py_ssize_t *start,
              Py_ssize_t *step, Py_ssize_t *len, int *is_slice)
{
    const field_spec *f = self->field;
    if (PySlice_Check(key)) {
        Py_ssize_t stop;
        if (PySlice_Unpack(key, start, &stop, step) < 0) {
            return -1;
        }
        *len = PySlice_AdjustIndices(f->shape[0], start, &stop, *step);
        *is_slice = 1;
        if (f->ndim > 1 && !(*start == 0 && *step == 1
                             && *len == f->shape[0])) {
            goto shaped;
        }
        return 0;
    }
    if (f->ndim > 1) {
        goto shaped;
    }
    if (!PyIndex_Check(key)) {
        PyErr_Format(PyExc_TypeError, "field %R takes an int index or a "
                     "slice, not %.200s", f->name, Py_TYPE(key)->tp_name);
        return -1;
    }
    Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
    if (i == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (i < 0) {
        i += f->count;
    }
    if (i < 0 || i >= f->count) {
        PyErr_Format(PyExc_IndexError, "field %R index out of range",
                     f->name);
        return -1;
    }
    *start = i;
    *step = 1;
    *len = 1;
    *is_slice = 0;
    return 0;
shaped:
    PyErr_Format(PyExc_TypeError,
                 "field %R has %d dimensions: assign all of it (w.%U[:] = "
                 "value), or index numpy.asarray(w.%U)", f->name, f->ndim,
                 f->name, f->name);
    return -1;
}

static PyObject *
ArrayField_subscript(ArrayFieldObject *self, PyObject *key)
{
    const field_spec *f = self->field;
    Py_ssize_t start, step, len;
    int is_slice;
    if (element_range(self, key, &start, &step, &len, &is_slice) < 0
        || check_in_section(self->writer) < 0) {
        return NULL;
    }
    if (f->ndim > 1) {
        return ArrayField_tolist(self, NULL); /* [:] */
    }
    unsigned char item[8];
    if (!is_slice) {
        section_load(self->writer, f, (size_t)start * f->item_size, item,
                     f->item_size);
        return item_decode(f, item);
    }
    PyObject *tuple = PyTuple_New(len);
    for (Py_ssize_t k = 0; tuple != NULL && k < len; k++) {
        section_load(self->writer, f,
                     (size_t)(start + k * step) * f->item_size, item,
                     f->item_size);
        PyObject *value = item_decode(f, item);
        if (value == NULL) {
            Py_CLEAR(tuple);
            break;
        }
        PyTuple_SET_ITEM(tuple, k, value);
    }
    return tuple;
}

/* w.field[i] = x, w.field[a:b] = values: converted into a scratch copy
 * first (that runs user code, which may close the section: checked
 * after), then stored. */
static int
ArrayField_ass_subscript(ArrayFieldObject *self, PyObject *key,
                         PyObject *value)
{
    const field_spec *f = self->field;
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "cannot delete array elements");
        return -1;
    }
    Py_ssize_t start, step, len;
    int is_slice;
    if (element_range(self, key, &start, &step, &len, &is_slice) < 0
        || check_in_section(self->writer) < 0) {
        return -1;
    }
    if (!is_slice) {
        unsigned char item[8];
        if (item_encode(f, value, item) < 0
            || check_in_section(self->writer) < 0) {
            return -1;
        }
        section_store(self->writer, f, (size_t)start * f->item_size, item,
                      f->item_size);
        return 0;
    }
    /* The slice as a field of its own: len elements, one dimension (or
     * the whole shaped field). */
    field_spec part = *f;
    if (f->ndim == 1) {
        part.shape[0] = part.count = len;
    }
    size_t n = part.item_size * (size_t)part.count;
    unsigned char stack[STACK_SNAPSHOT_BYTES];
    unsigned char *buf = scratch(stack, n > 0 ? n : 1);
    if (buf == NULL) {
        return -1;
    }
    int result = field_encode(&part, value, buf);
    if (result == 0) {
        result = check_in_section(self->writer);
    }
    if (result == 0) {
        if (step == 1) {
            section_store(self->writer, f, (size_t)start * f->item_size, buf,
                          n);
        }
        else {
            for (Py_ssize_t k = 0; k < len; k++) {
                section_store(self->writer, f,
                              (size_t)(start + k * step) * f->item_size,
                              buf + (size_t)k * f->item_size, f->item_size);
            }
        }
    }
    scratch_free(buf, stack);
    return result;
}

/* The buffer protocol, while the section is open: a view of the field's
 * staging copy (section_store()), which the section stores into the
 * record when it commits.  The copy, not this proxy, exports the view, so
 * the view keeps it alive: writes through the view after the section
 * ended reach only that copy, never the record nor freed memory. */
static int
ArrayField_getbuffer(ArrayFieldObject *self, Py_buffer *view, int flags)
{
    RecordWriterObject *w = self->writer;
    const field_spec *f = self->field;
    view->obj = NULL;
    if (check_in_section(w) < 0) {
        return -1;
    }
    PyObject *staged = staged_of(w, f);
    if (staged == NULL) {
        if (w->staged == NULL) {
            w->staged = PyMem_Calloc((size_t)w->record->layout->nfields,
                                     sizeof(PyObject *));
            if (w->staged == NULL) {
                PyErr_NoMemory();
                return -1;
            }
        }
        staged = section_copy_new(state_of((PyObject *)self)->section_copy_type,
                                  f);
        if (staged == NULL) {
            return -1;
        }
        record_load_bytes(section_copy_bytes(staged),
                          record_copy(&w->record->rec.view, 0), f->offset,
                          f->item_size * (size_t)f->count);
        w->staged[f - w->record->layout->fields] = staged;
    }
    return PyObject_GetBuffer(staged, view, flags);
}

static PyMethodDef ArrayField_methods[] = {
    {"tolist", (PyCFunction)ArrayField_tolist_method, METH_NOARGS,
     PyDoc_STR("tolist($self, /)\n--\n\nThe field's value in this section "
               "as a list (nested lists for a shape), as numpy's tolist() "
               "gives it.")},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot ArrayField_slots[] = {
    {Py_tp_dealloc, ArrayField_dealloc},
    {Py_tp_traverse, ArrayField_traverse},
    {Py_tp_clear, ArrayField_clear},
    {Py_tp_iter, ArrayField_iter},
    {Py_tp_methods, ArrayField_methods},
    {Py_sq_length, ArrayField_length},
    {Py_mp_length, ArrayField_length},
    {Py_mp_subscript, ArrayField_subscript},
    {Py_mp_ass_subscript, ArrayField_ass_subscript},
    {Py_bf_getbuffer, ArrayField_getbuffer},
    {Py_tp_doc, (void *)PyDoc_STR(
        "An array field inside a write section (w.samples): index or slice "
        "it to read or set elements (w.samples[3] = 2.5, w.samples[:] = "
        "vec); len(), iteration and tolist() read it.  It exports the "
        "buffer protocol while the section is open: numpy.asarray("
        "w.samples) is a writable view of the section's copy of the field, "
        "stored into the record when the section commits (not if it rolls "
        "back); writes through it after the section reach nothing.")},
    {0, NULL},
};

PyType_Spec array_field_type_spec = {
    .name = "seqlock_py.ArrayField",
    .basicsize = sizeof(ArrayFieldObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
             | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_HAVE_GC,
    .slots = ArrayField_slots,
};
