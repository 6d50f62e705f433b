/*
 * module.c - the seqlock_py._seqlock extension module: multi-phase init,
 * heap types kept in module state, no GIL needed.
 */
#include "module.h"
#include "bus_guard.h"
#include "snapshot.h"

PyObject *
pickling_refused(PyObject *self, const char *remedy)
{
    PyErr_Format(PyExc_TypeError, "cannot pickle or copy '%.200s' object: %s",
                 Py_TYPE(self)->tp_name, remedy);
    return NULL;
}

PyObject *
python_helper(_Atomic(PyObject *) *slot, const char *name)
{
    PyObject *module = atomic_load_explicit(slot, memory_order_acquire);
    if (module != NULL) {
        return module;
    }
    PyObject *imported = PyImport_ImportModule(name);
    if (imported == NULL) {
        return NULL;
    }
    PyObject *expected = NULL;
    if (atomic_compare_exchange_strong_explicit(slot, &expected, imported,
                                                memory_order_acq_rel,
                                                memory_order_acquire)) {
        return imported;
    }
    Py_DECREF(imported); /* the same module: another thread's */
    return expected;
}

static int
module_exec(PyObject *module)
{
    module_state *state = PyModule_GetState(module);
    state->wait_async_name = PyUnicode_InternFromString("wait_async");
    if (state->wait_async_name == NULL) {
        return -1;
    }
    state->seqlock_type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &seqlock_type_spec, NULL);
    if (state->seqlock_type == NULL
        || PyModule_AddType(module, state->seqlock_type) < 0) {
        return -1;
    }
    state->write_section_type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &write_section_type_spec, NULL);
    if (state->write_section_type == NULL
        || PyModule_AddType(module, state->write_section_type) < 0) {
        return -1;
    }
    state->seqrecord_type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &seqrecord_type_spec, NULL);
    if (state->seqrecord_type == NULL
        || PyModule_AddType(module, state->seqrecord_type) < 0) {
        return -1;
    }
    state->record_writer_type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &record_writer_type_spec, NULL);
    if (state->record_writer_type == NULL
        || PyModule_AddType(module, state->record_writer_type) < 0) {
        return -1;
    }
    state->array_field_type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &array_field_type_spec, NULL);
    if (state->array_field_type == NULL
        || PyModule_AddType(module, state->array_field_type) < 0) {
        return -1;
    }
    /* What an array field's view exports: reachable from a view, never
     * made by name. */
    state->section_copy_type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &section_copy_type_spec, NULL);
    if (state->section_copy_type == NULL) {
        return -1;
    }
    state->waiter_type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &waiter_type_spec, NULL);
    if (state->waiter_type == NULL
        || PyModule_AddType(module, state->waiter_type) < 0) {
        return -1;
    }
    state->weak_waiter_type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &weak_waiter_type_spec, NULL);
    if (state->weak_waiter_type == NULL
        || PyModule_AddType(module, state->weak_waiter_type) < 0) {
        return -1;
    }
    state->seqring_type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &seqring_type_spec, NULL);
    if (state->seqring_type == NULL
        || PyModule_AddType(module, state->seqring_type) < 0) {
        return -1;
    }
    state->ring_reader_type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &ring_reader_type_spec, NULL);
    if (state->ring_reader_type == NULL
        || PyModule_AddType(module, state->ring_reader_type) < 0) {
        return -1;
    }
    state->reader_into_type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &reader_into_type_spec, NULL);
    if (state->reader_into_type == NULL
        || PyModule_AddType(module, state->reader_into_type) < 0) {
        return -1;
    }
    return 0;
}

static int
module_traverse(PyObject *module, visitproc visit, void *arg)
{
    module_state *state = PyModule_GetState(module);
    Py_VISIT(state->seqlock_type);
    Py_VISIT(state->write_section_type);
    Py_VISIT(state->seqrecord_type);
    Py_VISIT(state->record_writer_type);
    Py_VISIT(state->array_field_type);
    Py_VISIT(state->section_copy_type);
    Py_VISIT(state->waiter_type);
    Py_VISIT(state->weak_waiter_type);
    Py_VISIT(state->seqring_type);
    Py_VISIT(state->ring_reader_type);
    Py_VISIT(state->reader_into_type);
    Py_VISIT(atomic_load(&state->news_module));
    Py_VISIT(atomic_load(&state->snapshot_module));
    Py_VISIT(atomic_load(&state->typed_module));
    Py_VISIT(atomic_load(&state->ring_module));
    Py_VISIT(state->wait_async_name);
    return 0;
}

static int
module_clear(PyObject *module)
{
    module_state *state = PyModule_GetState(module);
    Py_CLEAR(state->seqlock_type);
    Py_CLEAR(state->write_section_type);
    Py_CLEAR(state->seqrecord_type);
    Py_CLEAR(state->record_writer_type);
    Py_CLEAR(state->array_field_type);
    Py_CLEAR(state->section_copy_type);
    Py_CLEAR(state->waiter_type);
    Py_CLEAR(state->weak_waiter_type);
    Py_CLEAR(state->seqring_type);
    Py_CLEAR(state->ring_reader_type);
    Py_CLEAR(state->reader_into_type);
    Py_XDECREF(atomic_exchange(&state->news_module, NULL));
    Py_XDECREF(atomic_exchange(&state->snapshot_module, NULL));
    Py_XDECREF(atomic_exchange(&state->typed_module, NULL));
    Py_XDECREF(atomic_exchange(&state->ring_module, NULL));
    Py_CLEAR(state->wait_async_name);
    return 0;
}

static void
module_free(void *module)
{
    (void)module_clear((PyObject *)module);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    SEQLOCK_PY_MOD_INTERP_SLOT
    SEQLOCK_PY_MOD_GIL_SLOT
    {0, NULL},
};

PyDoc_STRVAR(reassert_bus_guard_doc,
"_reassert_bus_guard($module, /)\n--\n\n"
"Put the SIGBUS handler that guards readers of records in files back in\n"
"place if something replaced it (seqlock_py wraps faulthandler's\n"
"enable/disable/register/unregister to call this).  Not public.");

static PyObject *
reassert_bus_guard(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    (void)module;
    if (bus_guard_reassert() != 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"_reassert_bus_guard", reassert_bus_guard, METH_NOARGS,
     reassert_bus_guard_doc},
    {"_snapshot_class", (PyCFunction)(void (*)(void))new_snapshot_class,
     METH_FASTCALL, PyDoc_STR(NEW_SNAPSHOT_CLASS_DOC)},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "seqlock_py._seqlock",
    .m_doc = "Sequence locks (the C core of seqlock_py).",
    .m_size = sizeof(module_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC
PyInit__seqlock(void)
{
    return PyModuleDef_Init(&module_def);
}
