/*
 * record_layout.h - a SeqRecord's fields: their layout in a C
 * struct, and their values to and from bytes (record_layout.c).
 */
#ifndef SEQLOCK_PY_RECORD_LAYOUT_H
#define SEQLOCK_PY_RECORD_LAYOUT_H

#include "compat.h"

#include <stdatomic.h>
#include <string.h>

/* Keyword tuples a layout remembers the field choice of. */
#define FIELD_CHOICES 4

/* Dimensions a field's shape may have ("(2,3,4)f" has 3). */
#define FIELD_MAX_DIMS 8

typedef struct {
    PyObject *name;   /* str */
    char kind;        /* struct code: d f (float64/32), q Q i I h H b B
                         (signed/unsigned 64/32/16/8-bit), ? (bool) */
    int is_array;     /* declared with a count or a shape: ndim > 0 */
    int ndim;         /* 0 scalar, 1 for "16d", 2 for "(3,3)d"... */
    Py_ssize_t shape[FIELD_MAX_DIMS]; /* ndim of them */
    Py_ssize_t count; /* elements: the shape's product; 1 for a scalar */
    size_t item_size; /* bytes per element (its native alignment too) */
    size_t offset;    /* native struct offset of the first element */
} field_spec;

typedef struct {
    Py_ssize_t nfields;
    size_t data_bytes;     /* struct.calcsize(format) */
    PyObject *names;       /* tuple of str, in order */
    PyObject *index;       /* dict: name -> position */
    PyObject *format;      /* str: native struct format of all fields */
    PyObject *descriptor;  /* bytes: "name:code;..." stored in the header */
    int all_float64;       /* every field a scalar 'd', field i the
                              float64 at 8 * i: a record's read() and a
                              ring's entries decode them with no per-field
                              switch (float64_snapshot()) */
    /* update()'s field choices for its first keyword tuples
     * (field_choice.h); freed with the layout. */
    _Atomic(struct field_choice *) choices[FIELD_CHOICES];
    field_spec fields[];
} record_layout;

/* The layout SeqRecord(**kwargs) describes; NULL with an exception. */
record_layout *layout_from_kwargs(PyObject *kwargs);
void layout_free(record_layout *layout);
/* The field called name, or NULL (an exception only if lookup failed). */
const field_spec *layout_find(const record_layout *layout, PyObject *name);
/* layout_find() for the keywords of one call, in turn: first by identity
 * (field names are interned, as are the keywords of a call written in the
 * source), starting where the previous keyword's field ended (*next: 0 at
 * the first), since calls tend to name fields in order; then by lookup (a
 * str built at run time, a str subclass). */
const field_spec *layout_match(const record_layout *layout, PyObject *name,
                               Py_ssize_t *next);
/* Convert value for field f to its bytes in out (f->count * f->item_size
 * of them); -1 with TypeError/ValueError/OverflowError, or whatever the
 * value's own conversion methods raised.  Runs user code (__float__,
 * __index__, __bool__, a sequence's items): callers check their state
 * after it, not before. */
int field_encode(const field_spec *f, PyObject *value, unsigned char *out);
int item_encode(const field_spec *f, PyObject *value, unsigned char *out);
/* field_encode() with its commonest case, an exact float for a scalar
 * float64, inlined: it runs no user code. */
static inline int
field_encode_inline(const field_spec *f, PyObject *value, unsigned char *out)
{
    if (f->kind == 'd' && !f->is_array && PyFloat_CheckExact(value)) {
        double d = PyFloat_AS_DOUBLE(value);
        memcpy(out, &d, sizeof d);
        return 0;
    }
    return field_encode(f, value, out);
}
/* The Python value of field f from its bytes: a number for a scalar, a
 * tuple for "16d", nested tuples of the shape for "(3,3)d" (what numpy's
 * tolist() gives, as tuples). */
PyObject *field_decode(const field_spec *f, const unsigned char *in);
/* field_decode() with its commonest case, a scalar float64, inlined: a
 * read() of floats makes no call per field but PyFloat_FromDouble(). */
static inline PyObject *
field_decode_inline(const field_spec *f, const unsigned char *in)
{
    if (f->kind == 'd' && !f->is_array) {
        double d;
        memcpy(&d, in, sizeof d);
        return PyFloat_FromDouble(d);
    }
    return field_decode(f, in);
}
PyObject *item_decode(const field_spec *f, const unsigned char *in);

/* Elements of field f, laid out flat from `in`, as nested tuples of
 * shape[0..ndim) (ndim >= 1). */
PyObject *shape_decode(const field_spec *f, const Py_ssize_t *shape, int ndim,
                       const unsigned char *in);

/* Whether a buffer (PyBUF_RECORDS_RO) holds exactly field f's elements:
 * its element type (kind and size; byte order native), C-contiguous, and
 * f's shape.  0, or -1 with TypeError (element type) or ValueError
 * (contiguity, ndim, shape). */
int buffer_fits_field(const field_spec *f, const Py_buffer *view);

/* The element that a PEP 3118 format code (with an optional byte-order
 * prefix: '@', '=', '<', '>', '!') describes, as one of our kinds ('q'
 * for numpy's 'l' on LP64...), or '\0' if it is none of them.  *rest, if
 * not NULL, gets what follows the code. */
char buffer_code_kind(const char *format, const char **rest);

/* Whether a buffer (PyBUF_RECORDS) may take a whole snapshot of layout:
 * bytes; elements of the record's only element type; or a structured
 * array of its dtype (PEP 3118 "T{...}" naming its fields, offsets, kinds
 * and shapes).  0, or -1 with TypeError naming rec.dtype (or ValueError:
 * not C-contiguous).  Its length is the caller's to check. */
int buffer_fits_record(const record_layout *layout, const Py_buffer *view);

/* The numpy name of a kind ("float64"), for messages. */
const char *kind_name(char kind);
size_t kind_size(char kind);

#endif /* SEQLOCK_PY_RECORD_LAYOUT_H */
