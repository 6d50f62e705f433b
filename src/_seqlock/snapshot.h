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

/* How snapshot_new() allocates a class's instances. */
enum {
    SNAPSHOT_OTHER = 0, /* tp_alloc */
    SNAPSHOT_PLAIN = 1, /* snapshot_is_plain(): a tuple, its type set */
    SNAPSHOT_NAMED = 2, /* a named snapshot class (new_snapshot_class()):
                           plain, and freed by this module, which keeps a
                           few of each size for the thread's next reads */
};
int snapshot_kind(PyTypeObject *type);

/* ---- a thread's spare snapshots ---- */

/* A read() allocates a snapshot and its caller soon drops it: the tuple
 * allocator's way there and back (PyTuple_New(), the tuple's dealloc with
 * its trashcan) costs more than the copy and the decoding together.  So
 * each thread keeps a few dead named snapshots of each size, untracked,
 * for its next reads (as CPython's own free lists keep tuples and
 * floats).  Per thread, so that readers on the free-threaded build write
 * nothing another thread reads; per thread state, so that a snapshot
 * never moves to another interpreter (each has its allocator from 3.12):
 * owner is the thread state they belong to, whose dictionary holds them
 * and frees them with it (snapshot.c). */
#define SPARE_ITEMS 16 /* snapshots of up to this many items are kept */
#define SPARE_DEPTH 4  /* of each size */

typedef struct {
    PyThreadState *owner; /* NULL once its thread state let it go */
    unsigned long thread; /* the OS thread whose spares_mine_ it may be */
    int count[SPARE_ITEMS + 1];
    PyObject *spare[SPARE_ITEMS + 1][SPARE_DEPTH];
} spares;

/* The calling thread's spares (NULL until its first read); initial-exec,
 * as in_use_mine_ (in_use.h). */
extern _Thread_local spares *spares_mine_
    __attribute__((tls_model("initial-exec")));

/* The calling thread's spares, made and registered with its thread state
 * if it has none (NULL if that failed: no exception is left set). */
spares *spares_of_this_thread(PyThreadState *ts);

/* A new snapshot of n items, all NULL; kind: the class's snapshot_kind().
 * The caller sets every item with PyTuple_SET_ITEM before anyone else
 * sees it (one that failed half way is freed with Py_DECREF), to what a
 * record's decoding makes: numbers, or tuples of numbers.  A named
 * snapshot is not tracked by the collector (no cycle can run through
 * it), which tells named_dealloc() that it holds only those.  No __new__
 * or __init__ of the class runs.  NULL with MemoryError. */
PyObject *snapshot_new_slow(PyTypeObject *type, Py_ssize_t n);

static inline PyObject *
snapshot_new(PyTypeObject *type, int kind, Py_ssize_t n)
{
    if (kind == SNAPSHOT_NAMED && n <= SPARE_ITEMS) {
        PyThreadState *ts = PyThreadState_Get();
        spares *s = spares_mine_;
        if (__builtin_expect(s == NULL || s->owner != ts, 0)) {
            s = spares_of_this_thread(ts);
        }
        if (s != NULL && s->count[n] > 0) {
            PyObject *snap = s->spare[n][--s->count[n]];
            /* its reference count and type, as a new object's; its items
             * were left NULL by named_dealloc() */
            (void)PyObject_InitVar((PyVarObject *)snap, type, n);
            tuple_reset_hash(snap);
            return snap;
        }
    }
    /* A plain class's instance is a tuple in memory: it takes its memory
     * from the tuple allocator, free list included, as a tuple whose type
     * is then set to the class; a named snapshot goes back to the spares
     * or the same way (snapshot.c: named_dealloc()).  Inline: read()'s
     * every call. */
    if (kind != SNAPSHOT_OTHER && n > 0) {
        PyObject *snap = PyTuple_New(n);
        if (snap != NULL) {
            Py_SET_TYPE(snap, (PyTypeObject *)Py_NewRef(type));
            if (kind == SNAPSHOT_NAMED) {
                /* as a spare one: untracked, which named_dealloc() takes
                 * as "made here" */
                PyObject_GC_UnTrack(snap);
            }
        }
        return snap;
    }
    return snapshot_new_slow(type, n);
}

/* The snapshot of the n float64 values at buf, in order (a layout whose
 * fields are all scalar float64: record_layout.all_float64), each a fresh
 * float: no per-field decoding.  For a record's read() and a ring's
 * entries.  NULL with an exception. */
static inline PyObject *
float64_snapshot(PyTypeObject *type, int kind, const unsigned char *buf,
                 Py_ssize_t n)
{
    PyObject *tuple = snapshot_new(type, kind, n);
    if (tuple == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        double d;
        memcpy(&d, buf + (size_t)i * sizeof d, sizeof d);
        PyObject *value = PyFloat_FromDouble(d);
        if (value == NULL) {
            Py_DECREF(tuple);
            return NULL;
        }
        PyTuple_SET_ITEM(tuple, i, value);
    }
    return tuple;
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
