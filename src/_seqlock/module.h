/*
 * module.h - the _seqlock module's state and its types' specs
 * (module.c), and what every type shares.
 */
#ifndef SEQLOCK_PY_MODULE_H
#define SEQLOCK_PY_MODULE_H

#include "compat.h"

#include <stdatomic.h>
#include <stdint.h>

typedef struct {
    PyTypeObject *seqlock_type;
    PyTypeObject *write_section_type;
    PyTypeObject *seqrecord_type;
    PyTypeObject *record_writer_type;
    PyTypeObject *array_field_type;
    PyTypeObject *section_copy_type; /* not in the module's namespace */
    PyTypeObject *waiter_type;
    PyTypeObject *weak_waiter_type;
    PyTypeObject *seqring_type;
    PyTypeObject *ring_reader_type;
    PyTypeObject *reader_into_type;
    /* seqlock_py._news and ._ring, imported on first use (news.c,
     * seqring_type.c) */
    _Atomic(PyObject *) news_module;
    _Atomic(PyObject *) ring_module;
    /* "wait_async", interned: looked up in them per awaited wait */
    PyObject *wait_async_name;
    /* seqlock_py._snapshot and ._typed, imported on first use (snapshot.c) */
    _Atomic(PyObject *) snapshot_module;
    _Atomic(PyObject *) typed_module;
} module_state;

extern PyType_Spec seqlock_type_spec;
extern PyType_Spec write_section_type_spec;
extern PyType_Spec seqrecord_type_spec;
extern PyType_Spec record_writer_type_spec;
extern PyType_Spec array_field_type_spec;
extern PyType_Spec section_copy_type_spec;
extern PyType_Spec waiter_type_spec;
extern PyType_Spec weak_waiter_type_spec;
extern PyType_Spec seqring_type_spec;
extern PyType_Spec ring_reader_type_spec;
extern PyType_Spec reader_into_type_spec;

/* The module `name`, imported on first use and then kept in *slot (a
 * field of the module state): one compare-and-swap decides which of two
 * racing first imports is kept.  Borrowed, or NULL with an exception. */
PyObject *python_helper(_Atomic(PyObject *) *slot, const char *name);

/* What __reduce__ of an object that cannot be pickled or copied returns:
 * NULL with a TypeError that names self's type and says remedy, what to
 * do instead (module.c). */
PyObject *pickling_refused(PyObject *self, const char *remedy);

#endif /* SEQLOCK_PY_MODULE_H */
