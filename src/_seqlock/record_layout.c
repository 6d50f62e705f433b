/*
 * record_layout.c - a SeqRecord's fields: parsing SeqRecord(**fields),
 * the native struct layout, and converting values to and from bytes.
 *
 * A field is one struct format code: d f (float64/32), q i h b (signed
 * 64/32/16/8-bit), Q I H B (unsigned), ? (bool); with a count for a
 * fixed-length array ("16d", "8?"), or a shape ("(3,3)d"), which is laid
 * out flat, in C order.  Fields are laid out in keyword order with native
 * alignment, exactly as struct.calcsize(rec.format) does (a shape counts
 * as its number of elements there: "(3,3)d" is "9d" in rec.format), so
 * rec.read_into() fills a buffer that struct.unpack(rec.format, ...) or a
 * numpy array of rec.dtype can read.
 */
#include "record_layout.h"

#include "field_choice.h"
#include "record.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MAX_DATA_BYTES (1u << 24) /* 16 MiB: a seqlock is for small data */

/* The element kinds: struct code, size (= native alignment), numpy name,
 * and what a value must be. */
typedef struct {
    char code;
    unsigned char size;
    const char *name;
} kind_info;

static_assert(sizeof(int) == 4 && sizeof(short) == 2
                  && sizeof(long long) == 8 && sizeof(float) == 4
                  && sizeof(double) == 8,
              "struct's native sizes of i, h, q, f, d");

static const kind_info KINDS[] = {
    {'d', 8, "float64"}, {'f', 4, "float32"}, {'q', 8, "int64"},
    {'Q', 8, "uint64"},  {'i', 4, "int32"},   {'I', 4, "uint32"},
    {'h', 2, "int16"},   {'H', 2, "uint16"},  {'b', 1, "int8"},
    {'B', 1, "uint8"},   {'?', 1, "bool"},
};

static const kind_info *
kind_of(char code)
{
    for (size_t i = 0; i < sizeof KINDS / sizeof KINDS[0]; i++) {
        if (KINDS[i].code == code) {
            return &KINDS[i];
        }
    }
    return NULL;
}

size_t
kind_size(char kind)
{
    const kind_info *k = kind_of(kind);
    return k == NULL ? 0 : k->size;
}

const char *
kind_name(char kind)
{
    const kind_info *k = kind_of(kind);
    return k == NULL ? "?" : k->name;
}

/* A decimal count at *p (advanced past it), at most MAX_DATA_BYTES; 0 if
 * there is none or it is larger. */
static unsigned long long
parse_count(const char **p, const char *end)
{
    unsigned long long count = 0;
    const char *s = *p;
    if (s == end || *s < '0' || *s > '9') {
        return 0;
    }
    while (s < end && *s >= '0' && *s <= '9') {
        count = count * 10 + (unsigned long long)(*s - '0');
        if (count > MAX_DATA_BYTES) {
            return 0;
        }
        s++;
    }
    *p = s;
    return count;
}

#define ACCEPTED_CODES \
    "expected a struct code: 'd' 'f' (float64/32), 'q' 'i' 'h' 'b' " \
    "(signed 64/32/16/8-bit), 'Q' 'I' 'H' 'B' (unsigned), '?' (bool); a " \
    "count and a code for an array ('16d', '8?'); or a shape and a code " \
    "('(3,3)d', '(2,3,4)f')"

/* Parse one format code into *f; -1 with ValueError if it is not one.
 * "(16,)d" and "(16)d" are "16d": one dimension, a flat tuple. */
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
    const char *p = code, *end = code + len;
    int ndim = 0;
    unsigned long long count = 1;
    if (p < end && *p == '(') {
        p++;
        while (p < end && *p == ' ') {
            p++;
        }
        while (p < end && *p != ')') {
            unsigned long long dim = parse_count(&p, end);
            if (dim == 0 || ndim == FIELD_MAX_DIMS) {
                goto bad;
            }
            f->shape[ndim++] = (Py_ssize_t)dim;
            count *= dim;
            if (count > MAX_DATA_BYTES) {
                goto bad;
            }
            while (p < end && *p == ' ') {
                p++;
            }
            if (p < end && *p == ',') {
                p++;
                while (p < end && *p == ' ') {
                    p++;
                }
            }
            else if (p < end && *p != ')') {
                goto bad;
            }
        }
        if (p == end || ndim == 0) {
            goto bad;
        }
        p++; /* ')' */
    }
    else if (p < end && *p >= '0' && *p <= '9') {
        count = parse_count(&p, end);
        if (count == 0) {
            goto bad;
        }
        f->shape[ndim++] = (Py_ssize_t)count;
    }
    if (p + 1 != end || kind_of(*p) == NULL) {
        goto bad;
    }
    f->kind = *p;
    f->ndim = ndim;
    f->is_array = ndim > 0;
    f->count = (Py_ssize_t)count;
    f->item_size = kind_size(f->kind);
    return 0;
bad:
    PyErr_Format(PyExc_ValueError, "bad format %R for field '%U': "
                 ACCEPTED_CODES, code_obj, name);
    return -1;
}

/* The canonical spelling of f's code ("d", "16d", "(3,3)d"), which the
 * stored layout holds, and its struct spelling ("9d" for "(3,3)d"). */
static PyObject *
field_code(const field_spec *f, int for_struct)
{
    char text[16 + FIELD_MAX_DIMS * 12];
    size_t n = 0;
    if (f->ndim == 1 || (for_struct && f->ndim > 1)) {
        n += (size_t)snprintf(text, sizeof text, "%zd", f->count);
    }
    else if (f->ndim > 1) {
        text[n++] = '(';
        for (int i = 0; i < f->ndim; i++) {
            n += (size_t)snprintf(text + n, sizeof text - n, "%s%zd",
                                  i ? "," : "", f->shape[i]);
        }
        text[n++] = ')';
    }
    text[n++] = f->kind;
    return PyUnicode_FromStringAndSize(text, (Py_ssize_t)n);
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
    layout_forget_choices(layout);
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
        /* Interned: update() matches a call's keywords (interned
         * constants) to fields by identity first. */
        Py_INCREF(name);
        PyUnicode_InternInPlace(&name);
        f->name = name; /* the items tuple keeps the original alive */
        layout->nfields++;
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
        /* Format grows by the struct code; the descriptor by
         * "name:code;" in the canonical spelling, so that "(3, 3)d" and
         * "(3,3)d" lay out and attach alike. */
        PyObject *canonical = field_code(f, 0);
        PyObject *piece = canonical == NULL ? NULL
                          : PyUnicode_FromFormat("%s%U:%U", i ? ";" : "",
                                                 name, canonical);
        Py_XDECREF(canonical);
        if (piece == NULL) {
            goto error;
        }
        PyUnicode_Append(&descriptor, piece);
        Py_DECREF(piece);
        PyObject *struct_code = descriptor == NULL ? NULL
                                : field_code(f, 1);
        if (struct_code == NULL) {
            goto error;
        }
        PyUnicode_Append(&format, struct_code);
        Py_DECREF(struct_code);
        if (format == NULL) {
            goto error;
        }
    }
    layout->data_bytes = offset;
    layout->all_float64 = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (layout->fields[i].kind != 'd' || layout->fields[i].is_array
            || layout->fields[i].offset != (size_t)i * sizeof(double)) {
            layout->all_float64 = 0;
        }
    }
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

const field_spec *
layout_match(const record_layout *layout, PyObject *name, Py_ssize_t *next)
{
    Py_ssize_t nf = layout->nfields;
    Py_ssize_t j = *next;
    for (Py_ssize_t k = 0; k < nf; k++) {
        if (layout->fields[j].name == name) {
            *next = j + 1 == nf ? 0 : j + 1;
            return &layout->fields[j];
        }
        j = j + 1 == nf ? 0 : j + 1;
    }
    return layout_find(layout, name);
}

/* ---- values <-> bytes ---- */

/* A shape as a tuple of ints, for messages. */
static PyObject *
shape_tuple(const Py_ssize_t *shape, int ndim)
{
    PyObject *t = PyTuple_New(ndim);
    for (int i = 0; t != NULL && i < ndim; i++) {
        PyObject *n = PyLong_FromSsize_t(shape[i]);
        if (n == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, n);
    }
    return t;
}

static int
wrong_type(const field_spec *f, PyObject *value)
{
    PyErr_Format(PyExc_TypeError, "field '%U' takes %s, not %.200s", f->name,
                 f->kind == 'd' || f->kind == 'f' ? "a float"
                 : f->kind == '?'                 ? "a bool"
                                                  : "an int",
                 Py_TYPE(value)->tp_name);
    return -1;
}

static int
out_of_range(const field_spec *f)
{
    if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_OverflowError)) {
        return -1;
    }
    PyErr_Clear();
    switch (f->kind) {
    case 'q': case 'Q':
        PyErr_Format(PyExc_OverflowError,
                     "value out of range for field '%U' (%s)", f->name,
                     kind_name(f->kind));
        break;
    default: {
        long long lo = 0, hi = 0;
        switch (f->kind) {
        case 'i': lo = INT32_MIN; hi = INT32_MAX; break;
        case 'I': hi = UINT32_MAX; break;
        case 'h': lo = INT16_MIN; hi = INT16_MAX; break;
        case 'H': hi = UINT16_MAX; break;
        case 'b': lo = INT8_MIN; hi = INT8_MAX; break;
        default: hi = UINT8_MAX; break;
        }
        PyErr_Format(PyExc_OverflowError,
                     "value out of range for field '%U' (%s: %lld..%lld)",
                     f->name, kind_name(f->kind), lo, hi);
    }
    }
    return -1;
}

/* A bool field's value that is neither bool nor int: numpy's bool
 * (np.bool_, arr.any(), an element or 0-d array of dtype bool), taken as
 * what its buffer holds, one item of format '?' (as a 'd' field takes
 * numpy's floats).  Anything else is the field's TypeError.  0 or -1. */
static int
one_bool_of_buffer(const field_spec *f, PyObject *value, unsigned char *out)
{
    if (!PyObject_CheckBuffer(value)) {
        return wrong_type(f, value);
    }
    Py_buffer view;
    if (PyObject_GetBuffer(value, &view, PyBUF_RECORDS_RO) < 0) {
        return -1;
    }
    int one = view.len == 1 && view.itemsize == 1 && view.format != NULL
              && strcmp(view.format, "?") == 0;
    unsigned char byte = one ? *(const unsigned char *)view.buf : 0;
    PyBuffer_Release(&view);
    if (!one) {
        return wrong_type(f, value);
    }
    *out = byte != 0;
    return 0;
}

int
item_encode(const field_spec *f, PyObject *value, unsigned char *out)
{
    /* The common cases first: an exact float or int runs no user code. */
    if (f->kind == 'd' && PyFloat_CheckExact(value)) {
        double d = PyFloat_AS_DOUBLE(value);
        memcpy(out, &d, sizeof d);
        return 0;
    }
    if (f->kind == 'q' && PyLong_CheckExact(value)) {
        long long v = PyLong_AsLongLong(value);
        if (v == -1 && PyErr_Occurred()) {
            return out_of_range(f);
        }
        memcpy(out, &v, sizeof v);
        return 0;
    }
    switch (f->kind) {
    case 'd': case 'f': {
        double d = PyFloat_AsDouble(value);
        if (d == -1.0 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                return wrong_type(f, value);
            }
            return -1;
        }
        if (f->kind == 'd') {
            memcpy(out, &d, sizeof d);
            return 0;
        }
        /* struct's 'f' (3.12 on): OverflowError for a finite double too
         * large for a float32, inf and nan as they are. */
        if (PyFloat_Pack4(d, (char *)out, PY_LITTLE_ENDIAN) < 0) {
            if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_OverflowError, "value out of range for "
                             "field '%U' (float32)", f->name);
            }
            return -1;
        }
        return 0;
    }
    case '?': {
        if (!PyBool_Check(value) && !PyLong_Check(value)) {
            return one_bool_of_buffer(f, value, out);
        }
        int truth = PyObject_IsTrue(value); /* an int subclass's __bool__ */
        if (truth < 0) {
            return -1;
        }
        *out = (unsigned char)truth;
        return 0;
    }
    default: break;
    }
    if (!PyIndex_Check(value)) {
        return wrong_type(f, value);
    }
    PyObject *index = PyNumber_Index(value);
    if (index == NULL) {
        return -1;
    }
    if (f->kind == 'Q') {
        unsigned long long v = PyLong_AsUnsignedLongLong(index);
        Py_DECREF(index);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) {
            return out_of_range(f);
        }
        memcpy(out, &v, sizeof v);
        return 0;
    }
    long long v = PyLong_AsLongLong(index);
    Py_DECREF(index);
    if (v == -1 && PyErr_Occurred()) {
        return out_of_range(f);
    }
    switch (f->kind) {
    case 'q':
        memcpy(out, &v, sizeof v);
        return 0;
    case 'i': case 'I': {
        if (f->kind == 'i' ? v < INT32_MIN || v > INT32_MAX
                           : v < 0 || v > UINT32_MAX) {
            return out_of_range(f);
        }
        uint32_t u = (uint32_t)v;
        memcpy(out, &u, sizeof u);
        return 0;
    }
    case 'h': case 'H': {
        if (f->kind == 'h' ? v < INT16_MIN || v > INT16_MAX
                           : v < 0 || v > UINT16_MAX) {
            return out_of_range(f);
        }
        uint16_t u = (uint16_t)v;
        memcpy(out, &u, sizeof u);
        return 0;
    }
    case 'b': case 'B':
        if (f->kind == 'b' ? v < INT8_MIN || v > INT8_MAX
                           : v < 0 || v > UINT8_MAX) {
            return out_of_range(f);
        }
        *out = (unsigned char)v;
        return 0;
    default:
        PyErr_SetString(PyExc_SystemError, "unknown field kind");
        return -1;
    }
}

char
buffer_code_kind(const char *format, const char **rest)
{
    if (format == NULL) {
        format = "B"; /* PEP 3118: no format means unsigned bytes */
    }
    char order = '@';
    if (*format && strchr("@=<>!^", *format)) {
        order = *format++;
    }
    char code = *format;
    char kind = '\0';
    size_t native = 0;
    switch (code) {
    case 'd': case 'f': case 'q': case 'Q': case 'i': case 'I': case 'h':
    case 'H': case 'b': case 'B': case '?':
        kind = code;
        native = kind_size(code);
        break;
    case 'c': kind = 'B'; native = 1; break;
    case 'l': case 'L': /* long: numpy's int64 on LP64 */
        native = sizeof(long);
        kind = native == 8 ? (code == 'l' ? 'q' : 'Q')
                           : (code == 'l' ? 'i' : 'I');
        break;
    case 'n': case 'N':
        native = sizeof(Py_ssize_t);
        kind = native == 8 ? (code == 'n' ? 'q' : 'Q')
                           : (code == 'n' ? 'i' : 'I');
        break;
    default:
        return '\0';
    }
    if (order != '@' && order != '^' && code != 'l' && code != 'L'
        && code != 'n' && code != 'N') {
        /* standard sizes: struct's, equal to the native ones here */
        native = kind_size(kind);
    }
    if (order != '@' && order != '^' && (code == 'l' || code == 'L')) {
        native = 4; /* standard long */
        kind = code == 'l' ? 'i' : 'I';
    }
#if PY_LITTLE_ENDIAN
    int foreign = order == '>' || order == '!';
#else
    int foreign = order == '<';
#endif
    if (foreign && native > 1) {
        return '\0';
    }
    if (rest != NULL) {
        *rest = format + 1;
    }
    return kind;
}

int
buffer_fits_field(const field_spec *f, const Py_buffer *view)
{
    const char *rest;
    char kind = buffer_code_kind(view->format, &rest);
    if (kind != f->kind || *rest != '\0'
        || (size_t)view->itemsize != f->item_size) {
        PyErr_Format(PyExc_TypeError,
                     "field '%U' takes %s elements (struct code '%c'), the "
                     "buffer holds %s elements (format %s)", f->name,
                     kind_name(f->kind), f->kind,
                     kind ? kind_name(kind) : "other",
                     view->format ? view->format : "B");
        return -1;
    }
    if (!PyBuffer_IsContiguous(view, 'C')) {
        PyErr_Format(PyExc_ValueError,
                     "field '%U' takes a C-contiguous buffer: this one is "
                     "strided (copy it first, e.g. numpy."
                     "ascontiguousarray())", f->name);
        return -1;
    }
    int same = view->ndim == f->ndim;
    for (int i = 0; same && i < f->ndim; i++) {
        same = view->shape != NULL ? view->shape[i] == f->shape[i]
               : f->ndim == 1 && view->len / view->itemsize == f->count;
    }
    if (!same) {
        PyObject *want = shape_tuple(f->shape, f->ndim);
        PyObject *got = view->shape != NULL
                            ? shape_tuple(view->shape, view->ndim)
                            : PyLong_FromSsize_t(view->len / view->itemsize);
        if (want != NULL && got != NULL) {
            PyErr_Format(PyExc_ValueError,
                         "field '%U' takes %zd values of shape %R, the "
                         "buffer has shape %R", f->name, f->count, want, got);
        }
        Py_XDECREF(want);
        Py_XDECREF(got);
        return -1;
    }
    return 0;
}

/* The elements of a buffer that fits f, copied into out: 1 if value
 * exports a buffer and was used, 0 if it exports none, -1 with an
 * exception.  Running the exporter is the only user code here; the
 * buffer's memory is read once, by one memcpy. */
static int
buffer_encode(const field_spec *f, PyObject *value, unsigned char *out)
{
    if (!PyObject_CheckBuffer(value)) {
        return 0;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(value, &view, PyBUF_RECORDS_RO) < 0) {
        return -1;
    }
    int fits = buffer_fits_field(f, &view);
    if (fits == 0) {
        memcpy(out, view.buf, f->item_size * (size_t)f->count);
    }
    PyBuffer_Release(&view);
    return fits == 0 ? 1 : -1;
}

/* Items of a nested sequence of shape[0..ndim) into out, flat. */
static int
shape_encode(const field_spec *f, const Py_ssize_t *shape, int ndim,
             PyObject *value, unsigned char *out)
{
    if (PyUnicode_Check(value) || PyBytes_Check(value)
        || PyByteArray_Check(value)) {
        goto not_a_sequence;
    }
    /* A tuple of our own: converting an item runs user code, which may
     * change a list under us (or another thread may, on a free-threaded
     * build); the tuple keeps every item alive and in place. */
    PyObject *items = PySequence_Tuple(value);
    if (items == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            goto not_a_sequence;
        }
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    if (n != shape[0]) {
        if (f->ndim == 1) {
            PyErr_Format(PyExc_ValueError,
                         "field '%U' takes %zd values, got %zd", f->name,
                         f->count, n);
        }
        else {
            PyObject *want = shape_tuple(f->shape, f->ndim);
            if (want != NULL) {
                PyErr_Format(PyExc_ValueError,
                             "field '%U' takes nested sequences of shape "
                             "%R: got %zd items where %zd belong (or pass "
                             "a buffer of that shape)", f->name, want, n,
                             shape[0]);
                Py_DECREF(want);
            }
        }
        Py_DECREF(items);
        return -1;
    }
    size_t stride = f->item_size;
    for (int d = 1; d < ndim; d++) {
        stride *= (size_t)shape[d];
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(items, i);
        unsigned char *at = out + (size_t)i * stride;
        if ((ndim == 1 ? item_encode(f, item, at)
                       : shape_encode(f, shape + 1, ndim - 1, item, at))
            < 0) {
            Py_DECREF(items);
            return -1;
        }
    }
    Py_DECREF(items);
    return 0;

not_a_sequence:
    PyErr_Format(PyExc_TypeError, "field '%U' takes a sequence of %zd "
                 "numbers%s, not %.200s", f->name, f->count,
                 f->ndim > 1 ? " (nested, in its shape) or a buffer" : "",
                 Py_TYPE(value)->tp_name);
    return -1;
}

int
field_encode(const field_spec *f, PyObject *value, unsigned char *out)
{
    if (!f->is_array) {
        return item_encode(f, value, out);
    }
    /* A buffer (a numpy array, array.array, memoryview...) of the right
     * element type and shape: one copy.  bytes and bytearray are buffers
     * of uint8: they fit a 'B' array and no other. */
    int used = buffer_encode(f, value, out);
    if (used != 0) {
        return used < 0 ? -1 : 0;
    }
    return shape_encode(f, f->shape, f->ndim, value, out);
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
    case 'f': {
        float v;
        memcpy(&v, in, sizeof v);
        return PyFloat_FromDouble((double)v);
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
    case 'i': {
        int32_t v;
        memcpy(&v, in, sizeof v);
        return PyLong_FromLong(v);
    }
    case 'I': {
        uint32_t v;
        memcpy(&v, in, sizeof v);
        return PyLong_FromUnsignedLong(v);
    }
    case 'h': {
        int16_t v;
        memcpy(&v, in, sizeof v);
        return PyLong_FromLong(v);
    }
    case 'H': {
        uint16_t v;
        memcpy(&v, in, sizeof v);
        return PyLong_FromLong(v);
    }
    case 'b':
        return PyLong_FromLong((signed char)*in);
    case 'B':
        return PyLong_FromLong(*in);
    default:
        return PyBool_FromLong(*in != 0);
    }
}

PyObject *
shape_decode(const field_spec *f, const Py_ssize_t *shape, int ndim,
             const unsigned char *in)
{
    PyObject *tuple = PyTuple_New(shape[0]);
    if (tuple == NULL) {
        return NULL;
    }
    size_t stride = f->item_size;
    for (int d = 1; d < ndim; d++) {
        stride *= (size_t)shape[d];
    }
    for (Py_ssize_t i = 0; i < shape[0]; i++) {
        const unsigned char *at = in + (size_t)i * stride;
        PyObject *item = ndim == 1 ? item_decode(f, at)
                                   : shape_decode(f, shape + 1, ndim - 1, at);
        if (item == NULL) {
            Py_DECREF(tuple);
            return NULL;
        }
        PyTuple_SET_ITEM(tuple, i, item);
    }
    return tuple;
}

PyObject *
field_decode(const field_spec *f, const unsigned char *in)
{
    if (!f->is_array) {
        return item_decode(f, in);
    }
    return shape_decode(f, f->shape, f->ndim, in);
}

/* ---- buffers that hold a whole snapshot ---- */

/* Whether the PEP 3118 struct format "T{...}" at fmt describes exactly
 * layout's fields: the same names in order, each at its offset, of its
 * kind and shape ("l" and "q" alike where long is 64-bit; padding spelt
 * "x"; '@' aligns as struct does, '=' '<' '^' do not).  Parsed rather
 * than compared as text: numpy spells int64 "l" or "q" as the dtype was
 * made and writes padding as it likes, and numpy's dtype equality is what
 * users expect. */
static int
struct_format_matches(const record_layout *layout, const char *fmt)
{
    if (fmt[0] != 'T' || fmt[1] != '{') {
        return 0;
    }
    const char *p = fmt + 2;
    char order = '@';
    size_t offset = 0;
    Py_ssize_t i = 0;
    while (*p != '}') {
        if (*p == '\0') {
            return 0;
        }
        if (strchr("@=<>!^", *p)) {
            order = *p++;
            continue;
        }
        Py_ssize_t shape[FIELD_MAX_DIMS];
        int ndim = 0;
        unsigned long long count = 1;
        const char *end = p + strlen(p);
        if (*p == '(') {
            p++;
            while (*p != ')') {
                unsigned long long dim = parse_count(&p, end);
                if (dim == 0 || ndim == FIELD_MAX_DIMS) {
                    return 0;
                }
                shape[ndim++] = (Py_ssize_t)dim;
                count *= dim;
                if (count > MAX_DATA_BYTES) {
                    return 0;
                }
                if (*p == ',') {
                    p++;
                }
                else if (*p != ')') {
                    return 0;
                }
            }
            p++;
        }
        else if (*p >= '1' && *p <= '9') {
            count = parse_count(&p, end);
            if (count == 0) {
                return 0;
            }
            if (*p != 'x') {
                shape[ndim++] = (Py_ssize_t)count;
            }
        }
        if (ndim > 0 && *p != '\0' && strchr("@=<>!^", *p)) {
            order = *p++; /* numpy: "(3)@f" in an array of several rows */
        }
        if (*p == 'x') { /* padding */
            if (ndim > 1) {
                return 0;
            }
            offset += (size_t)count;
            p++;
            continue;
        }
        char code[3] = {order, *p, '\0'};
        char kind = buffer_code_kind(code, NULL);
        if (kind == '\0' || i == layout->nfields || p[1] != ':') {
            return 0;
        }
        const field_spec *f = &layout->fields[i++];
        size_t size = kind_size(kind);
        if (order == '@') {
            offset = record_round_up(offset, size);
        }
        if (kind != f->kind || offset != f->offset || ndim != f->ndim) {
            return 0;
        }
        for (int d = 0; d < ndim; d++) {
            if (shape[d] != f->shape[d]) {
                return 0;
            }
        }
        offset += size * (size_t)count;
        const char *name = p + 2;
        const char *colon = strchr(name, ':');
        Py_ssize_t name_len;
        const char *want = PyUnicode_AsUTF8AndSize(f->name, &name_len);
        if (colon == NULL || want == NULL || colon - name != name_len
            || memcmp(name, want, (size_t)name_len) != 0) {
            PyErr_Clear(); /* only a name too odd to encode: no match */
            return 0;
        }
        p = colon + 1;
    }
    return p[1] == '\0' && i == layout->nfields;
}

int
buffer_fits_record(const record_layout *layout, const Py_buffer *view)
{
    /* Plain contiguous bytes (a bytearray, a memoryview of bytes), the
     * common case, at once: read_into() is the cheapest read there is. */
    if ((view->format == NULL
         || (view->format[0] == 'B' && view->format[1] == '\0'))
        && view->itemsize == 1 && view->ndim <= 1
        && (view->strides == NULL || view->strides[0] == 1)) {
        return 0;
    }
    const char *format = view->format == NULL ? "B" : view->format;
    const char *rest;
    char kind = buffer_code_kind(format, &rest);
    int fits;
    if (kind != '\0' && *rest == '\0') {
        /* Bytes, as ever; or elements of the record's only element type
         * (a record of "16d" into np.empty(16)). */
        fits = view->itemsize == 1 && (kind == 'B' || kind == 'b');
        for (Py_ssize_t i = 0; !fits && i < layout->nfields; i++) {
            if (layout->fields[i].kind != kind
                || (size_t)view->itemsize != layout->fields[i].item_size) {
                break;
            }
            fits = i + 1 == layout->nfields;
        }
    }
    else {
        fits = (size_t)view->itemsize == layout->data_bytes
               && struct_format_matches(layout, format);
    }
    if (!fits) {
        PyErr_Format(PyExc_TypeError,
                     "read_into() takes bytes (a bytearray, a memoryview "
                     "of bytes...) or an array of rec.dtype (numpy.empty((),"
                     " rec.dtype)): this buffer holds elements of format "
                     "'%s', which are not the record's %R", format,
                     layout->format);
        return -1;
    }
    if (!PyBuffer_IsContiguous(view, 'C')) {
        PyErr_SetString(PyExc_ValueError,
                        "read_into() takes a C-contiguous buffer: this one "
                        "is strided");
        return -1;
    }
    return 0;
}
