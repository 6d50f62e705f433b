/*
 * compat.h - every CPython-version and platform shim in one place.
 */
#ifndef SEQLOCK_PY_COMPAT_H
#define SEQLOCK_PY_COMPAT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX < 0x030b0000
#error "seqlock_py needs CPython 3.11 or newer"
#endif

/* Py_mod_gil (3.13): importing us never re-enables the GIL. */
#if PY_VERSION_HEX >= 0x030d0000
#define SEQLOCK_PY_MOD_GIL_SLOT {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#else
#define SEQLOCK_PY_MOD_GIL_SLOT
#endif

/* Per-interpreter GIL support (3.12): all state is per module. */
#if PY_VERSION_HEX >= 0x030c0000
#define SEQLOCK_PY_MOD_INTERP_SLOT \
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#else
#define SEQLOCK_PY_MOD_INTERP_SLOT
#endif

/* Deferred reference counting (3.14): on the free-threaded build the
 * interpreter then loads the object from globals, attributes and locals
 * without writing its reference count, so threads reading one shared
 * SeqLock or SeqRecord through `rec.read()` or `self.rec` stop contending
 * on that word.  The object must be a GC type; where there is no such
 * thing (before 3.14, or with the GIL) the call does nothing. */
static inline void
defer_refcount(PyObject *obj)
{
#if PY_VERSION_HEX >= 0x030e0000
    (void)PyUnstable_Object_EnableDeferredRefcount(obj);
#else
    (void)obj;
#endif
}

/* Whether the collector may be shown a memoryview that we export (a
 * record's buffer): before CPython gh-77894 (fixed in 3.12.7 and 3.13.0)
 * memoryview's tp_clear dropped its managed buffer even while exported,
 * and releasing the export afterwards crashed (SIGSEGV in the collector).
 * Checked at run time: the extension may run on another patch release
 * than the headers it was built with. */
static inline int
gc_may_clear_exported_memoryviews(void)
{
    return Py_Version >= 0x030d00f0
           || (Py_Version >= 0x030c07f0 && Py_Version < 0x030d0000);
}

/* PyMemberDef constants got Py_ names in 3.12. */
#if PY_VERSION_HEX < 0x030c0000
#include <structmember.h>
#define Py_T_PYSSIZET T_PYSSIZET
#define Py_T_OBJECT_EX T_OBJECT_EX
#define Py_READONLY READONLY
#endif

/* PyErr_GetRaisedException/SetRaisedException (3.12): the one-object
 * form of saving and restoring the current exception. */
#if PY_VERSION_HEX < 0x030c0000
static inline PyObject *
PyErr_GetRaisedException(void)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (type == NULL) {
        return NULL;
    }
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL) {
        PyException_SetTraceback(value, traceback);
        Py_DECREF(traceback);
    }
    Py_DECREF(type);
    return value;
}

static inline void
PyErr_SetRaisedException(PyObject *exc)
{
    if (exc == NULL) {
        PyErr_Clear();
        return;
    }
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc,
                  PyException_GetTraceback(exc));
}
#endif

/* A tuple's cached hash (3.14): "not computed yet" is -1, and a tuple
 * subclass instance that tp_alloc zeroed would otherwise hash as 0. */
static inline void
tuple_reset_hash(PyObject *tuple)
{
#if PY_VERSION_HEX >= 0x030e0000
    ((PyTupleObject *)tuple)->ob_hash = -1;
#else
    (void)tuple;
#endif
}

/* An exact bytearray's memory held for a copy into it as its buffer export
 * holds it, without the export's Py_buffer: the count of exports that its
 * resize checks (BufferError while nonzero), moved as the bytearray's
 * own bf_getbuffer and bf_releasebuffer move it from 3.11 to 3.13 (and
 * atomically on 3.13t, below), and on a GIL build of any version.  The
 * free-threaded 3.14 moves
 * it inside the object's critical section: there a caller exports the
 * buffer (BYTEARRAY_HOLD 0).  Filling and releasing a Py_buffer costs
 * read_into() ~80 instructions of ~300. */
#if defined(Py_GIL_DISABLED) && PY_VERSION_HEX >= 0x030e0000
#define BYTEARRAY_HOLD 0
#else
#define BYTEARRAY_HOLD 1
/* Without a GIL (3.13t) nothing orders two threads' holds of one
 * bytearray, so they are read-modify-writes: plain ones lost updates, and
 * reads into one bytearray from two threads left it unresizable for good,
 * or resizable while exported (3.13t's own export moves the count plainly
 * too: a race of its own that these do not join). */
static inline void
bytearray_hold(PyObject *bytearray)
{
#ifdef Py_GIL_DISABLED
    (void)__atomic_fetch_add(&((PyByteArrayObject *)bytearray)->ob_exports,
                             1, __ATOMIC_RELAXED);
#else
    ((PyByteArrayObject *)bytearray)->ob_exports++;
#endif
}

static inline void
bytearray_unhold(PyObject *bytearray)
{
#ifdef Py_GIL_DISABLED
    (void)__atomic_fetch_sub(&((PyByteArrayObject *)bytearray)->ob_exports,
                             1, __ATOMIC_RELAXED);
#else
    ((PyByteArrayObject *)bytearray)->ob_exports--;
#endif
}
#endif

/* Calls of a builtin method made by PyCFunction_NewEx() that go through
 * its vectorcall (every call where the interpreter does not specialize
 * it, which 3.13t's never does) reach fn directly instead of CPython's
 * trampoline for its METH_ flags (a recursion guard and the same
 * argument checks, ~30 instructions).  fn must do what that trampoline
 * and the method do; the method's own C function stays what specialized
 * calls and introspection see.  The field is PyCFunctionObject's own
 * (cpython/methodobject.h, 3.9 on). */
static inline void
builtin_method_vectorcall(PyObject *method, vectorcallfunc fn)
{
    ((PyCFunctionObject *)method)->vectorcall = fn;
}

#endif /* SEQLOCK_PY_COMPAT_H */
