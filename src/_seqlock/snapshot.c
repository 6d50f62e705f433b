/*
 * snapshot.c - what SeqRecord.read() returns, chosen once when the record
 * is built: a named snapshot class per set of field names (made here, at
 * seqlock_py._snapshot's request, which caches them), or the class of a
 * typed declaration, whose fields seqlock_py._typed reads from its
 * annotations.  Both Python modules are imported on first use and kept in
 * the module state (python_helper()).
 *
 * A named snapshot class is a tuple subclass made from a spec here, not by
 * type(): its fields are member descriptors reading the tuple's items
 * where they lie, and its instances are tuples in memory, allocated and
 * freed by the tuple allocator (its free list too), not by the generic
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

/* A plain class's instance is a tuple in memory (snapshot_is_plain()): it
 * takes its memory from the tuple allocator, free list included, as a
 * tuple whose type is then set to the class; a named snapshot gives it
 * back the same way (named_dealloc()).  Any other class: its tp_alloc. */
PyObject *
snapshot_new(PyTypeObject *type, int plain, Py_ssize_t n)
{
    PyObject *snap;
    if (plain && n > 0) {
        snap = PyTuple_New(n);
        if (snap != NULL) {
            Py_SET_TYPE(snap, (PyTypeObject *)Py_NewRef(type));
        }
        return snap;
    }
    snap = type->tp_alloc(type, n);
    if (snap != NULL) {
        tuple_reset_hash(snap);
    }
    return snap;
}

/* ---- named snapshot classes ---- */

static int
named_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    for (Py_ssize_t i = Py_SIZE(self); --i >= 0;) {
        Py_VISIT(PyTuple_GET_ITEM(self, i));
    }
    return 0;
}

/* A named snapshot back to the tuple allocator (snapshot_new()): with
 * the type set to tuple, the tuple's own dealloc drops the items and keeps
 * the memory on its free list.  Freed here instead: an empty one (only
 * type(snap)(()) makes one: the tuple's dealloc takes an empty tuple for
 * the singleton), and any once someone gave seqlock_py.Snapshot a __del__
 * (the collector may have marked it finalized, which a tuple on the free
 * list must not be; the __del__ does not run: snapshots have none). */
static void
named_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    if (Py_SIZE(self) == 0 || type->tp_finalize != NULL
        || type->tp_del != NULL) {
        PyObject_GC_UnTrack(self);
        Py_TRASHCAN_BEGIN(self, named_dealloc)
        for (Py_ssize_t i = Py_SIZE(self); --i >= 0;) {
            Py_XDECREF(PyTuple_GET_ITEM(self, i));
        }
        type->tp_free(self);
        Py_TRASHCAN_END
    }
    else {
        Py_SET_TYPE(self, &PyTuple_Type);
        PyTuple_Type.tp_dealloc(self);
    }
    Py_DECREF(type);
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

/* The class attributes of a new named snapshot class. */
static int
set_class_attributes(PyObject *cls, PyObject *names)
{
    PyObject *visible = PyList_New(0); /* names with an attribute */
    if (visible == NULL) {
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        if (!is_dunder(name) && PyList_Append(visible, name) < 0) {
            Py_DECREF(visible);
            return -1;
        }
    }
    PyObject *match_args = PyList_AsTuple(visible);
    Py_DECREF(visible);
    int err = match_args == NULL
              || PyObject_SetAttrString(cls, "__field_names__", names) < 0
              || PyObject_SetAttrString(cls, "_fields", names) < 0
              || PyObject_SetAttrString(cls, "__match_args__", match_args) < 0;
    Py_XDECREF(match_args);
    return err ? -1 : 0;
}

PyDoc_STRVAR(named_doc,
"One consistent snapshot of a SeqRecord: a tuple of its fields in order,\n"
"which are also attributes (snap.x).");

PyObject *
new_snapshot_class(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
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
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    PyMemberDef *members = PyMem_Calloc((size_t)n + 1, sizeof *members);
    if (members == NULL) {
        return PyErr_NoMemory();
    }
    PyObject *cls = NULL;
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
         * class holds names (__field_names__).  The class copies the
         * members; a member reads its name only to say that an item is
         * NULL, which no snapshot anyone sees has. */
        const char *text = PyUnicode_AsUTF8(name);
        if (text == NULL) {
            goto done;
        }
        members[count++] = (PyMemberDef){
            text, Py_T_OBJECT_EX,
            (Py_ssize_t)(offsetof(PyTupleObject, ob_item)
                         + (size_t)i * sizeof(PyObject *)),
            Py_READONLY, NULL};
    }
    PyType_Slot slots[] = {
        {Py_tp_dealloc, named_dealloc},
        {Py_tp_traverse, named_traverse},
        {Py_tp_doc, (void *)named_doc},
        {Py_tp_members, members},
        {0, NULL},
    };
    if (count == 0) {
        slots[3] = (PyType_Slot){0, NULL}; /* no attribute at all */
    }
    PyType_Spec spec = {
        .name = "seqlock_py.Snapshot",
        /* Mutable like a namedtuple class: an immutable class may not
         * derive from seqlock_py.Snapshot, a class made in Python. */
        .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
        .slots = slots,
    };
    cls = PyType_FromModuleAndSpec(module, &spec, (PyObject *)base);
    if (cls != NULL && set_class_attributes(cls, names) < 0) {
        Py_CLEAR(cls);
    }
done:
    PyMem_Free(members); /* the class keeps a copy */
    return cls;
}
