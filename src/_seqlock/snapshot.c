/*
 * snapshot.c - what SeqRecord.read() returns, chosen once when the record
 * is built: a named snapshot class per set of field names (made here, at
 * seqlock_py._snapshot's request, which caches them), or the class of a
 * typed declaration, whose fields seqlock_py._typed reads from its
 * annotations.  Both Python modules are imported on first use and kept in
 * the module state (python_helper()).
 *
 * A named snapshot class is a tuple subclass made here by the metaclass,
 * as a class statement makes one (see new_snapshot_class() for why not
 * from a spec), its fields member descriptors reading the tuple's items
 * where they lie.  Its instances are tuples in memory, allocated and freed
 * by the tuple allocator (its free list too), not by the generic
 * allocation and deallocation of a class made in Python.  That keeps
 * read() almost as cheap as it was with a plain tuple.
 */
#include "snapshot.h"

#include <stddef.h>

PyObject *
declared_fields(module_state *state, PyObject *decl)
{
    PyObject *typed = python_helper(&state->typed_module,
                                    "seqlock_py._typed");
    if (typed == NULL) {
        return NULL;
    }
    PyObject *name = PyUnicode_FromString("fields_of");
    if (name == NULL) {
        return NULL;
    }
    PyObject *fields = PyObject_CallMethodOneArg(typed, name, decl);
    Py_DECREF(name);
    if (fields != NULL && !PyDict_Check(fields)) {
        PyErr_SetString(PyExc_SystemError,
                        "seqlock_py._typed.fields_of() returned no dict");
        Py_CLEAR(fields);
    }
    return fields;
}

int
snapshot_is_plain(PyTypeObject *type)
{
    return PyType_IsSubtype(type, &PyTuple_Type)
           && type->tp_basicsize == PyTuple_Type.tp_basicsize
           && type->tp_itemsize == PyTuple_Type.tp_itemsize
           && type->tp_dictoffset == 0 && type->tp_weaklistoffset == 0
           && type->tp_alloc == PyType_GenericAlloc
           && (type->tp_flags & Py_TPFLAGS_HAVE_GC);
}

PyTypeObject *
snapshot_class(module_state *state, const record_layout *layout,
               PyObject *decl)
{
    PyObject *cls;
    if (decl != NULL) {
        cls = Py_NewRef(decl);
    }
    else {
        PyObject *named = python_helper(&state->snapshot_module,
                                        "seqlock_py._snapshot");
        if (named == NULL) {
            return NULL;
        }
        PyObject *name = PyUnicode_FromString("snapshot_class");
        if (name == NULL) {
            return NULL;
        }
        /* (one argument: the names tuple, never its items) */
        cls = PyObject_CallMethodOneArg(named, name, layout->names);
        Py_DECREF(name);
        if (cls == NULL) {
            return NULL;
        }
    }
    /* Snapshots are filled as tuples: only a tuple subclass (fields_of()
     * checked decl; this guards the allocation itself). */
    if (!PyType_Check(cls)
        || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)
        || ((PyTypeObject *)cls)->tp_itemsize != sizeof(PyObject *)) {
        PyErr_Format(PyExc_TypeError,
                     "a snapshot class must be a tuple subclass, not %R",
                     cls);
        Py_DECREF(cls);
        return NULL;
    }
    return (PyTypeObject *)cls;
}

/* Any class but a plain one (snapshot_new()): its tp_alloc. */
PyObject *
snapshot_new_slow(PyTypeObject *type, Py_ssize_t n)
{
    PyObject *snap = type->tp_alloc(type, n);
    if (snap != NULL) {
        tuple_reset_hash(snap);
    }
    return snap;
}

/* ---- a thread's spare snapshots (snapshot.h) ---- */

_Thread_local spares *spares_mine_
    __attribute__((tls_model("initial-exec")));

#define SPARES_CAPSULE "seqlock_py spare snapshots"

/* The thread state's dictionary lets its spares go (the thread ended, or
 * its state was cleared): freed, as the dead tuples they are.  The struct
 * too, unless another OS thread's spares_mine_ may point to it (a state
 * cleared from elsewhere, at finalization): then it stays, empty and
 * owned by none, and that thread makes itself new ones. */
static void
spares_free(PyObject *capsule)
{
    spares *s = PyCapsule_GetPointer(capsule, SPARES_CAPSULE);
    if (s == NULL) {
        PyErr_WriteUnraisable(capsule);
        return;
    }
    for (int n = 0; n <= SPARE_ITEMS; n++) {
        while (s->count[n] > 0) {
            PyObject_GC_Del(s->spare[n][--s->count[n]]);
        }
    }
    s->owner = NULL;
    if (spares_mine_ == s) {
        spares_mine_ = NULL;
        PyMem_RawFree(s);
    }
    else if (s->thread == PyThread_get_thread_ident()) {
        PyMem_RawFree(s); /* this thread's, and it moved on from them */
    }
}

spares *
spares_of_this_thread(PyThreadState *ts)
{
    /* A key of our own in the thread state's dictionary (its str is made
     * once per call here, which is once per thread). */
    PyObject *dict = PyThreadState_GetDict(); /* borrowed; NULL: none */
    spares *s = PyMem_RawCalloc(1, sizeof *s);
    PyObject *capsule = NULL;
    if (dict == NULL || s == NULL) {
        goto failed;
    }
    s->owner = ts;
    s->thread = PyThread_get_thread_ident();
    capsule = PyCapsule_New(s, SPARES_CAPSULE, spares_free);
    if (capsule == NULL) {
        goto failed;
    }
    if (PyDict_SetItemString(dict, SPARES_CAPSULE, capsule) < 0) {
        s = NULL; /* the capsule's destructor frees it */
        goto failed;
    }
    Py_DECREF(capsule);
    spares_mine_ = s;
    return s;
failed:
    /* No spares: the snapshot comes from the tuple allocator instead,
     * which reports a lack of memory itself. */
    if (capsule != NULL) {
        Py_DECREF(capsule);
    }
    else {
        PyMem_RawFree(s);
    }
    PyErr_Clear();
    return NULL;
}

/* ---- named snapshot classes ---- */

/* A named snapshot made by snapshot_new() (read(), a ring's poll()) is
 * not tracked by the collector, and holds what the record's decoding
 * made: numbers, tuples of numbers.  Dropping them runs no Python code
 * and frees no other snapshot (so no trashcan is needed); it then goes to
 * the thread's spares if it has room for its size (its items left NULL,
 * its type set to tuple: a dead tuple, freed as one, since
 * PyObject_GC_Del() reads the type), else to the tuple allocator.  One the
 * class made (type(snap)(items): tracked, any items) goes back to the
 * tuple allocator as a tuple: with the type set to tuple, the tuple's own
 * dealloc drops the items and keeps the memory on its free list.  Freed
 * here instead: an empty one (only the class makes one: the tuple's
 * dealloc takes an empty tuple for the singleton), a subclass's, and any
 * once someone
 * gave seqlock_py.Snapshot a __del__ (the collector may have marked it
 * finalized, which a tuple on a free list must not be; the __del__ does
 * not run: snapshots have none). */
static void
named_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    Py_ssize_t n = Py_SIZE(self);
    /* A subclass's instance (a class statement's: its dealloc called this
     * one) may have memory a tuple has not, a dict before its address
     * (3.12+) or after its items: only its class's tp_free frees it. */
    if (n == 0 || type->tp_dealloc != named_dealloc
        || type->tp_finalize != NULL || type->tp_del != NULL) {
        PyObject_GC_UnTrack(self);
        Py_TRASHCAN_BEGIN(self, named_dealloc)
        for (Py_ssize_t i = n; --i >= 0;) {
            Py_XDECREF(PyTuple_GET_ITEM(self, i));
        }
        type->tp_free(self);
        /* inside: a deallocation the trashcan put off comes back here */
        Py_DECREF(type);
        Py_TRASHCAN_END
        return;
    }
    if (n <= SPARE_ITEMS && !PyObject_GC_IsTracked(self)) {
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = PyTuple_GET_ITEM(self, i);
            PyTuple_SET_ITEM(self, i, NULL);
            Py_XDECREF(item);
        }
        Py_SET_TYPE(self, &PyTuple_Type);
        spares *s = spares_mine_;
        if (s != NULL && s->count[n] < SPARE_DEPTH
            && s->owner == PyThreadState_Get()) {
            s->spare[n][s->count[n]++] = self;
        }
        else {
            PyTuple_Type.tp_dealloc(self);
        }
        Py_DECREF(type);
        return;
    }
    Py_SET_TYPE(self, &PyTuple_Type);
    PyTuple_Type.tp_dealloc(self);
    Py_DECREF(type);
}

int
snapshot_kind(PyTypeObject *type)
{
    if (!snapshot_is_plain(type)) {
        return SNAPSHOT_OTHER;
    }
    return type->tp_dealloc == named_dealloc ? SNAPSHOT_NAMED
                                             : SNAPSHOT_PLAIN;
}

static int
is_dunder(PyObject *name)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(name);
    return n > 4 && PyUnicode_READ_CHAR(name, 0) == '_'
           && PyUnicode_READ_CHAR(name, 1) == '_'
           && PyUnicode_READ_CHAR(name, n - 1) == '_'
           && PyUnicode_READ_CHAR(name, n - 2) == '_';
}

PyDoc_STRVAR(named_doc,
"One consistent snapshot of a SeqRecord: a tuple of its fields in order,\n"
"which are also attributes (snap.x).");

/* A named class's member descriptors point into a PyMemberDef array that
 * a capsule in the class's namespace owns: the class is made immutable, so
 * the capsule lives as long as the class, and every descriptor holds the
 * class. */
#define MEMBERS_CAPSULE "seqlock_py.Snapshot members"

static void
free_members(PyObject *capsule)
{
    PyMem_Free(PyCapsule_GetPointer(capsule, MEMBERS_CAPSULE));
}

/* The namespace of a named snapshot class, as its class statement would
 * make it, and in *members the array its attributes will point to (the
 * fields without a dunder name, then a zeroed end).  NULL with an
 * exception. */
static PyObject *
class_namespace(PyObject *names, PyMemberDef **members)
{
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    PyMemberDef *m = PyMem_Calloc((size_t)n + 1, sizeof *m);
    if (m == NULL) {
        return PyErr_NoMemory();
    }
    PyObject *capsule = PyCapsule_New(m, MEMBERS_CAPSULE, free_members);
    if (capsule == NULL) {
        PyMem_Free(m);
        return NULL;
    }
    PyObject *ns = NULL, *shown = PyList_New(0), *match_args = NULL;
    if (shown == NULL) {
        goto done;
    }
    Py_ssize_t count = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        if (!PyUnicode_CheckExact(name)) {
            PyErr_SetString(PyExc_TypeError, "field names must be str");
            goto done;
        }
        if (is_dunder(name)) {
            continue;
        }
        /* The UTF-8 text lives in the str, which names holds, and the
         * class holds names (__field_names__).  A member reads its name
         * only to say that an item is NULL, which no snapshot anyone sees
         * has. */
        const char *text = PyUnicode_AsUTF8(name);
        if (text == NULL || PyList_Append(shown, name) < 0) {
            goto done;
        }
        m[count++] = (PyMemberDef){
            text, Py_T_OBJECT_EX,
            (Py_ssize_t)(offsetof(PyTupleObject, ob_item)
                         + (size_t)i * sizeof(PyObject *)),
            Py_READONLY, NULL};
    }
    match_args = PyList_AsTuple(shown);
    PyObject *empty = match_args == NULL ? NULL : PyTuple_New(0);
    PyObject *doc = empty == NULL ? NULL : PyUnicode_FromString(named_doc);
    PyObject *module = doc == NULL ? NULL : PyUnicode_FromString("seqlock_py");
    PyObject *qualname = module == NULL ? NULL
                                        : PyUnicode_FromString("Snapshot");
    ns = qualname == NULL ? NULL : PyDict_New();
    if (ns != NULL
        && (PyDict_SetItemString(ns, "__slots__", empty) < 0
            || PyDict_SetItemString(ns, "__doc__", doc) < 0
            || PyDict_SetItemString(ns, "__module__", module) < 0
            || PyDict_SetItemString(ns, "__qualname__", qualname) < 0
            || PyDict_SetItemString(ns, "__field_names__", names) < 0
            || PyDict_SetItemString(ns, "_fields", names) < 0
            || PyDict_SetItemString(ns, "__match_args__", match_args) < 0
            || PyDict_SetItemString(ns, "__snapshot_members__", capsule)
                   < 0)) {
        Py_CLEAR(ns);
    }
    Py_XDECREF(empty);
    Py_XDECREF(doc);
    Py_XDECREF(module);
    Py_XDECREF(qualname);
    *members = m;
done:
    Py_XDECREF(match_args);
    Py_XDECREF(shown);
    Py_DECREF(capsule); /* ns holds it, or it frees m */
    return ns;
}

/* Each member of the class as its attribute (a member descriptor, which
 * the interpreter reads as it reads a __slots__ attribute).  0 or -1. */
static int
set_members(PyTypeObject *cls, PyMemberDef *members)
{
    for (PyMemberDef *m = members; m->name != NULL; m++) {
        PyObject *descr = PyDescr_NewMember(cls, m);
        if (descr == NULL) {
            return -1;
        }
        int err = PyObject_SetAttrString((PyObject *)cls, m->name, descr);
        Py_DECREF(descr);
        if (err < 0) {
            return -1;
        }
    }
    return 0;
}

PyObject *
new_snapshot_class(PyObject *Py_UNUSED(module), PyObject *const *args,
                   Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "_snapshot_class() takes a base class and a tuple of "
                        "field names");
        return NULL;
    }
    PyTypeObject *base = (PyTypeObject *)args[0];
    PyObject *names = args[1];
    if (!snapshot_is_plain(base)) {
        PyErr_SetString(PyExc_TypeError,
                        "_snapshot_class(): the base must be a tuple "
                        "subclass with __slots__ = ()");
        return NULL;
    }
    PyMemberDef *members = NULL;
    PyObject *ns = class_namespace(names, &members);
    if (ns == NULL) {
        return NULL;
    }
    /* Made by the metaclass, as a class statement makes a class, not from
     * a spec: where reference counts are per object and atomic (3.13t),
     * the interpreter gives such a class's count to no single thread
     * (deferred, and immortal once a second thread runs, in 3.13; counted
     * per thread from 3.14), while a spec-made class's count is one word
     * every snapshot's allocation and free writes, from every thread:
     * readers in two threads then do no more reads than one. */
    PyObject *cls = PyObject_CallFunction((PyObject *)Py_TYPE(base), "s(O)O",
                                          "Snapshot", (PyObject *)base, ns);
    Py_DECREF(ns);
    if (cls == NULL) {
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    if (!snapshot_is_plain(type) || set_members(type, members) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_SystemError,
                            "a named snapshot class came out not plain");
        }
        Py_DECREF(cls);
        return NULL;
    }
    /* Its instances go back to the tuple allocator (named_dealloc()); no
     * attribute of the class can change from here on (the capsule above
     * stays), nor can an instance's __class__. */
    type->tp_dealloc = named_dealloc;
    type->tp_flags |= Py_TPFLAGS_IMMUTABLETYPE;
    PyType_Modified(type);
    return cls;
}
