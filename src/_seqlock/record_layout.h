/*
 * record_layout.h - a SeqRecord's fields: their layout in a C
 * struct, and their values to and from bytes (record_layout.c).
 */
#ifndef SEQLOCK_PY_RECORD_LAYOUT_H
#define SEQLOCK_PY_RECORD_LAYOUT_H

#include "compat.h"

typedef struct {
    PyObject *name;   /* str */
    char kind;        /* 'd' float64, 'q' int64, 'Q' uint64, '?' bool */
    int is_array;     /* declared with a count ("16d"): values are tuples */
    Py_ssize_t count; /* elements; 1 for a scalar */
    size_t item_size; /* bytes per element */
    size_t offset;    /* native struct offset of the first element */
} field_spec;

typedef struct {
    Py_ssize_t nfields;
    size_t data_bytes;     /* struct.calcsize(format) */
    PyObject *names;       /* tuple of str, in order */
    PyObject *index;       /* dict: name -> position */
    PyObject *format;      /* str: native struct format of all fields */
    PyObject *descriptor;  /* bytes: "name:code;..." stored in the header */
    field_spec fields[];
} record_layout;

/* The layout SeqRecord(**kwargs) describes; NULL with an exception. */
record_layout *layout_from_kwargs(PyObject *kwargs);
void layout_free(record_layout *layout);
/* The field called name, or NULL (an exception only if lookup failed). */
const field_spec *layout_find(const record_layout *layout, PyObject *name);
/* Convert value for field f to its bytes in out (f->count * f->item_size
 * of them); -1 with TypeError/ValueError/OverflowError, or whatever the
 * value's own conversion methods raised.  Runs user code (__float__,
 * __index__, __bool__, a sequence's items): callers check their state
 * after it, not before. */
int field_encode(const field_spec *f, PyObject *value, unsigned char *out);
int item_encode(const field_spec *f, PyObject *value, unsigned char *out);
/* The Python value of field f (a tuple for an array) from its bytes. */
PyObject *field_decode(const field_spec *f, const unsigned char *in);
PyObject *item_decode(const field_spec *f, const unsigned char *in);

#endif /* SEQLOCK_PY_RECORD_LAYOUT_H */
