/*
 * record_layout.c - a SeqRecord's fields: parsing SeqRecord(**fields),
 * the native struct layout, and converting values to and from bytes.
 *
 * A field is one struct format code: d (float64), q (int64), Q (uint64),
 * ? (bool), or a count and d/q/Q for a fixed-length array ("16d").  Fields
 * are laid out in keyword order with native alignment, exactly as
 * struct.calcsize(rec.format) does, so rec.read_into() fills a buffer that
 * struct.unpack(rec.format, ...) or NumPy can read.
 */
#include "record_layout.h"
#include "record.h"

#include <string.h>

#define MAX_DATA_BYTES (1u << 24) /* 16 MiB: a seqlock is for small data */

static size_t
kind_size(char kind)
{
    return kind == '?' ? 1 : 8;
}

/* Parse one format code into *f; -1 with ValueError if it is not one. */
static int
parse_code(PyObject *name, PyObject *code_obj, field_spec *f)
{
    if (!PyUnicode_Check(code_obj)) {
        PyErr_Format(PyExc_TypeError,
                     "format of field '%U' must be a str, not %.200s", name,
                     Py_TYPE(code_obj)->tp_name);
        return -1;
    }
    Py_ssize_t len;
    const char *code = PyUnicode_AsUTF8AndSize(code_obj, &len);
    if (code == NULL) {
        return -1;
    }
    Py_ssize_t digits = 0;
    unsigned long long count = 0;
    while (digits < len && code[digits] >= '0' && code[digits] <= '9') {
        count = count * 10 + (unsigned long long)(code[digits] - '0');
        if (count > MAX_DATA_BYTES) {
            break;
        }
        digits++;
    }
    char kind = digits + 1 == len ? code[digits] : '\0';
    int known = kind == 'd' || kind == 'q' || kind == 'Q'
                || (kind == '?' && digits == 0);
    if (!known || (digits && count == 0)) {
        PyErr_Format(PyExc_ValueError,
                     "bad format %R for field '%U': expected 'd', 'q', 'Q', "
                     "'?', or a count and 'd'/'q'/'Q' such as '16d'",
                     code_obj, name);
        return -1;
    }
    f->kind = kind;
    f->is_array = digits > 0;
    f->count = f->is_array ? (Py_ssize_t)count : 1;
    return 0;
}

void
layout_free(record_layout *layout)
{
    if (layout == NULL) {
        return;
    }
    for (Py_ssize_t i = 0; i < layout->nfields; i++) {
        Py_XDECREF(layout->fields[i].name);
    }
    Py_XDECREF(layout->names);
    Py_XDECREF(layout->index);
    Py_XDECREF(layout->format);
    Py_XDECREF(layout->descriptor);
    PyMem_Free(layout);
}

/* The (name, code) pairs of kwargs as a tuple of our own, names made
 * exact str: the loop below runs user code (a str subclass's __hash__ and
 * __eq__, via the index dict), which must not reach what it iterates. */
static PyObject *
field_items(PyObject *kwargs)
{
    PyObject *list = PyDict_Items(kwargs);
    if (list == NULL) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(list);
    PyObject *items = PyTuple_New(n);
    for (Py_ssize_t i = 0; items != NULL && i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(list, i);
        PyObject *name = PyUnicode_FromObject(PyTuple_GET_ITEM(pair, 0));
        PyObject *exact = name == NULL ? NULL
                          : PyTuple_Pack(2, name, PyTuple_GET_ITEM(pair, 1));
        Py_XDECREF(name);
        if (exact == NULL) {
            Py_CLEAR(items);
            break;
        }
        PyTuple_SET_ITEM(items, i, exact);
    }
    Py_DECREF(list);
    return items;
}

record_layout *
layout_from_kwargs(PyObject *kwargs)
{
    if (kwargs == NULL || PyDict_GET_SIZE(kwargs) == 0) {
        PyErr_SetString(PyExc_TypeError,
                        "a record needs at least one field, e.g. x='d'");
        return NULL;
    }
    PyObject *items = field_items(kwargs);
    if (items == NULL) {
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    record_layout *layout = PyMem_Calloc(
        1, sizeof(record_layout) + (size_t)n * sizeof(field_spec));
    if (layout == NULL) {
        Py_DECREF(items);
        PyErr_NoMemory();
        return NULL;
    }
    PyObject *format = NULL, *descriptor = NULL;
    layout->names = PyTuple_New(n);
    layout->index = PyDict_New();
    format = PyUnicode_FromStringAndSize(NULL, 0);
    descriptor = PyUnicode_FromStringAndSize(NULL, 0);
    if (layout->names == NULL || layout->index == NULL || format == NULL
        || descriptor == NULL) {
        goto error;
    }
    size_t offset = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(PyTuple_GET_ITEM(items, i), 0);
        PyObject *code = PyTuple_GET_ITEM(PyTuple_GET_ITEM(items, i), 1);
        field_spec *f = &layout->fields[i];
        if (PyUnicode_CompareWithASCIIString(name, "update") == 0) {
            PyErr_SetString(PyExc_ValueError,
                            "'update' cannot be a field name: it is a method "
                            "of the record's writer");
            goto error;
        }
        /* Names are keywords and writer attributes; and the layout
         * descriptor that attach() compares joins "name:code" with ';', so
         * a name holding ':' or ';' could make two layouts read alike. */
        int ident = PyUnicode_IsIdentifier(name);
        if (ident <= 0) {
            if (ident == 0) {
                PyErr_Format(PyExc_ValueError,
                             "field name %R is not an identifier", name);
            }
            goto error;
        }
        if (parse_code(name, code, f) < 0) {
            goto error;
        }
        f->name = Py_NewRef(name);
        layout->nfields++;
        f->item_size = kind_size(f->kind);
        offset = record_round_up(offset, f->item_size);
        f->offset = offset;
        offset += f->item_size * (size_t)f->count;
        if (offset > MAX_DATA_BYTES) {
            PyErr_SetString(PyExc_ValueError,
                            "record too large: a seqlock is for small data "
                            "(at most 16 MiB)");
            goto error;
        }
        PyObject *index = PyLong_FromSsize_t(i);
        if (index == NULL || PyDict_SetItem(layout->index, name, index) < 0) {
            Py_XDECREF(index);
            goto error;
        }
        Py_DECREF(index);
        if (PyDict_GET_SIZE(layout->index) != i + 1) {
            /* keys that were distinct str subclasses, equal as str */
            PyErr_Format(PyExc_ValueError, "field %R is given twice", name);
            goto error;
        }
        PyTuple_SET_ITEM(layout->names, i, Py_NewRef(name));
        /* Format grows by the code; the descriptor by "name:code;". */
        PyObject *piece = PyUnicode_FromFormat("%s%U:%U", i ? ";" : "", name,
                                               code);
        if (piece == NULL) {
            goto error;
        }
        PyUnicode_Append(&descriptor, piece);
        Py_DECREF(piece);
        Py_INCREF(code);
        PyUnicode_Append(&format, code);
        Py_DECREF(code);
        if (descriptor == NULL || format == NULL) {
            goto error;
        }
    }
    layout->data_bytes = offset;
    layout->format = format;
    layout->descriptor = PyUnicode_AsUTF8String(descriptor);
    Py_DECREF(descriptor);
    Py_DECREF(items);
    if (layout->descriptor == NULL) {
        layout_free(layout);
        return NULL;
    }
    return layout;

error:
    Py_DECREF(items);
    Py_XDECREF(format);
    Py_XDECREF(descriptor);
    layout_free(layout);
    return NULL;
}

const field_spec *
layout_find(const record_layout *layout, PyObject *name)
{
    if (!PyUnicode_Check(name)) {
        return NULL;
    }
    PyObject *index = PyDict_GetItemWithError(layout->index, name);
    if (index == NULL) {
        return NULL;
    }
    return &layout->fields[PyLong_AsSsize_t(index)];
}

/* ---- values <-> bytes ---- */

int
item_encode(const field_spec *f, PyObject *value, unsigned char *out)
{
    switch (f->kind) {
    case 'd': {
        double d = PyFloat_AsDouble(value);
        if (d == -1.0 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                goto wrong_type;
            }
            return -1;
        }
        memcpy(out, &d, sizeof d);
        return 0;
    }
    case 'q': case 'Q': {
        if (!PyIndex_Check(value)) {
            goto wrong_type;
        }
        PyObject *index = PyNumber_Index(value);
        if (index == NULL) {
            return -1;
        }
        if (f->kind == 'q') {
            long long v = PyLong_AsLongLong(index);
            Py_DECREF(index);
            if (v == -1 && PyErr_Occurred()) {
                goto out_of_range;
            }
            memcpy(out, &v, sizeof v);
        }
        else {
            unsigned long long v = PyLong_AsUnsignedLongLong(index);
            Py_DECREF(index);
            if (v == (unsigned long long)-1 && PyErr_Occurred()) {
                goto out_of_range;
            }
            memcpy(out, &v, sizeof v);
        }
        return 0;
    }
    case '?': {
        if (!PyBool_Check(value) && !PyLong_Check(value)) {
            goto wrong_type;
        }
        int truth = PyObject_IsTrue(value); /* an int subclass's __bool__ */
        if (truth < 0) {
            return -1;
        }
        *out = (unsigned char)truth;
        return 0;
    }
    default:
        PyErr_SetString(PyExc_SystemError, "unknown field kind");
        return -1;
    }

wrong_type:
    PyErr_Format(PyExc_TypeError, "field '%U' takes %s, not %.200s", f->name,
                 f->kind == 'd' ? "a float" : f->kind == '?' ? "a bool"
                                                              : "an int",
                 Py_TYPE(value)->tp_name);
    return -1;

out_of_range:
    if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
        PyErr_Format(PyExc_OverflowError, "value out of range for field '%U' "
                     "(%s)", f->name,
                     f->kind == 'q' ? "int64" : "uint64");
    }
    return -1;
}

int
field_encode(const field_spec *f, PyObject *value, unsigned char *out)
{
    if (!f->is_array) {
        return item_encode(f, value, out);
    }
    if (PyUnicode_Check(value) || PyBytes_Check(value)
        || PyByteArray_Check(value)) {
        PyErr_Format(PyExc_TypeError, "field '%U' takes a sequence of %zd "
                     "numbers, not %.200s", f->name, f->count,
                     Py_TYPE(value)->tp_name);
        return -1;
    }
    /* A tuple of our own: converting an item runs user code, which may
     * change a list under us (or another thread may, on a free-threaded
     * build); the tuple keeps every item alive and in place. */
    PyObject *items = PySequence_Tuple(value);
    if (items == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "field '%U' takes a sequence of "
                         "%zd numbers, not %.200s", f->name, f->count,
                         Py_TYPE(value)->tp_name);
        }
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    if (n != f->count) {
        PyErr_Format(PyExc_ValueError, "field '%U' takes %zd values, got %zd",
                     f->name, f->count, n);
        Py_DECREF(items);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (item_encode(f, PyTuple_GET_ITEM(items, i),
                        out + (size_t)i * f->item_size) < 0) {
            Py_DECREF(items);
            return -1;
        }
    }
    Py_DECREF(items);
    return 0;
}

PyObject *
item_decode(const field_spec *f, const unsigned char *in)
{
    switch (f->kind) {
    case 'd': {
        double d;
        memcpy(&d, in, sizeof d);
        return PyFloat_FromDouble(d);
    }
    case 'q': {
        long long v;
        memcpy(&v, in, sizeof v);
        return PyLong_FromLongLong(v);
    }
    case 'Q': {
        unsigned long long v;
        memcpy(&v, in, sizeof v);
        return PyLong_FromUnsignedLongLong(v);
    }
    default:
        return PyBool_FromLong(*in != 0);
    }
}

PyObject *
field_decode(const field_spec *f, const unsigned char *in)
{
    if (!f->is_array) {
        return item_decode(f, in);
    }
    PyObject *tuple = PyTuple_New(f->count);
    if (tuple == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < f->count; i++) {
        PyObject *item = item_decode(f, in + (size_t)i * f->item_size);
        if (item == NULL) {
            Py_DECREF(tuple);
            return NULL;
        }
        PyTuple_SET_ITEM(tuple, i, item);
    }
    return tuple;
}
