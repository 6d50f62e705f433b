/*
 * field_choice.h - the fields one call's keywords name, remembered per
 * keyword tuple (field_choice.c).
 *
 * update(x=..., y=...) and append() name their fields by keyword.  Matching the names to
 * fields and checking that no field is named twice is most of what such a
 * call does beside the write itself; yet a call written in the source
 * passes the same keyword tuple (a constant of its code object) every
 * time.  A layout remembers the choice made for the first few tuples it
 * sees, keyed by the tuple's identity (it holds a reference, so the
 * identity cannot be reused); any other tuple is matched afresh.
 */
#ifndef SEQLOCK_PY_FIELD_CHOICE_H
#define SEQLOCK_PY_FIELD_CHOICE_H

#include "record_layout.h"
#include "record.h"

/* One keyword's field, and where its value goes in the call's scratch. */
typedef struct {
    const field_spec *f;
    size_t at;
} chosen_field;

typedef struct field_choice {
    PyObject *kwnames;  /* the tuple this was chosen for (a reference) */
    Py_ssize_t n;       /* its length */
    size_t total;       /* scratch bytes: each value rounded up to 8 */
    chosen_field chosen[];
} field_choice;

/* The fields kwnames (a call's keyword tuple, or NULL: none) names in
 * layout, for call of a noun ("record", "ring": in its messages).  Borrowed from the layout (it lives
 * as long as the layout) if remembered there; else made for this call and
 * also stored in *made, which the caller frees (field_choice_free()).  NULL
 * with TypeError (a name no field has, or two names of one field) or
 * MemoryError.  Matching a name may run user code (a str subclass's
 * __eq__), which sees nothing half made.  Thread-safe: a remembered
 * choice is published once (compare-and-swap into an empty slot) and
 * never changed. */
const field_choice *layout_choose(record_layout *layout, PyObject *kwnames,
                                  const char *call, const char *noun,
                                  field_choice **made);

void field_choice_free(field_choice *c);

/* Frees the choices layout remembers; for layout_free(). */
void layout_forget_choices(record_layout *layout);

#endif /* SEQLOCK_PY_FIELD_CHOICE_H */
