/*
 * section_copy.h - a write section's copy of one array field, for the
 * buffer protocol (np.asarray(w.state)): memory of the field's size, fixed
 * when the copy is made, that no Python code can resize or free while the
 * section, or any view exported from it, still uses it (section_copy.c).
 */
#ifndef SEQLOCK_PY_SECTION_COPY_H
#define SEQLOCK_PY_SECTION_COPY_H

#include "record_layout.h"

/* A new copy of field f (of type, the module's section_copy_type), its
 * f->count * f->item_size bytes for the caller to fill; NULL with an
 * exception. */
PyObject *section_copy_new(PyTypeObject *type, const field_spec *f);

/* The copy's bytes: exactly the field's size, for as long as the caller
 * holds a reference to the copy. */
unsigned char *section_copy_bytes(PyObject *copy);

#endif /* SEQLOCK_PY_SECTION_COPY_H */
