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

/* PyMemberDef constants got Py_ names in 3.12. */
#if PY_VERSION_HEX < 0x030c0000
#include <structmember.h>
#define Py_T_PYSSIZET T_PYSSIZET
#define Py_READONLY READONLY
#endif

#endif /* SEQLOCK_PY_COMPAT_H */
