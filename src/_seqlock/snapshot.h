/*
 * snapshot.h - what SeqRecord.read() returns: the class of a record's
 * snapshots (a named snapshot class per layout, or the user's
 * typing.NamedTuple class) and the allocation of one snapshot (snapshot.c).
 *
 * A snapshot is a tuple subclass instance allocated here and filled like a
 * tuple: no __new__ or __init__ of its class runs per read.
 */
#ifndef SEQLOCK_PY_SNAPSHOT_H
#define SEQLOCK_PY_SNAPSHOT_H

#include "module.h"
#include "record_layout.h"

/* The fields {name: code} that a typed declaration (a typing.NamedTuple
 * class) gives, from seqlock_py._typed.fields_of(): a new dict, or NULL
 * with TypeError if decl is no such class or an annotation has no code. */
PyObject *declared_fields(module_state *state, PyObject *decl);

/* The class of a record's snapshots: decl if not NULL (the class whose
 * fields made layout), else seqlock_py._snapshot.snapshot_class() of the
 * layout's field names.  A new reference, or NULL with an exception. */
PyTypeObject *snapshot_class(module_state *state, const record_layout *layout,
                             PyObject *decl);

/* Whether type's instances are exactly a tuple's (no __dict__, no weak
 * references, the generic allocator): snapshot_new() may then allocate
 * them without going through tp_alloc. */
int snapshot_is_plain(PyTypeObject *type);

/* A new snapshot of n items, all NULL; plain: the class's
 * snapshot_is_plain().  The caller sets every item with PyTuple_SET_ITEM
 * before anyone else sees it (one that failed half way is freed with
 * Py_DECREF).  No __new__ or __init__ of the class runs.  NULL with
 * MemoryError. */
PyObject *snapshot_new_slow(PyTypeObject *type, Py_ssize_t n);

static inline PyObject *
snapshot_new(PyTypeObject *type, int plain, Py_ssize_t n)
{
    /* A plain class's instance is a tuple in memory: it takes its memory
     * from the tuple allocator, free list included, as a tuple whose type
     * is then set to the class; a named snapshot gives it back the same
     * way (snapshot.c: named_dealloc()).  Inline: read()'s every call. */
    if (plain && n > 0) {
        PyObject *snap = PyTuple_New(n);
        if (snap != NULL) {
            Py_SET_TYPE(snap, (PyTypeObject *)Py_NewRef(type));
        }
        return snap;
    }
    return snapshot_new_slow(type, n);
}

/* seqlock_py._seqlock._snapshot_class(base, names): a named snapshot
 * class (for seqlock_py._snapshot). */
PyObject *new_snapshot_class(PyObject *module, PyObject *const *args,
                             Py_ssize_t nargs);
#define NEW_SNAPSHOT_CLASS_DOC                                              \
    "_snapshot_class($module, base, names, /)\n--\n\n"                     \
    "A new named snapshot class: a subclass of base (seqlock_py.Snapshot)\n" \
    "whose fields, named by the tuple of str names, are read-only\n"         \
    "attributes (a dunder name gets none).  For seqlock_py._snapshot; not\n" \
    "public."

#endif /* SEQLOCK_PY_SNAPSHOT_H */
