#include "field_choice.h"

#include <stdatomic.h>

static const field_choice no_keywords = {NULL, 0, 0};

/* A new choice for kwnames (n >= 1 names); NULL with an exception. */
static field_choice *
choose(const record_layout *layout, PyObject *kwnames, Py_ssize_t n,
       const char *call, const char *noun)
{
    field_choice *c = PyMem_Malloc(sizeof *c + (size_t)n * sizeof c->chosen[0]);
    if (c == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    Py_ssize_t next = 0;
    size_t at = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        const field_spec *f = layout_match(layout, name, &next);
        if (f == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_Format(PyExc_TypeError, "the %s has no field %R", noun,
                             name);
            }
            goto error;
        }
        for (Py_ssize_t k = 0; k < i; k++) {
            if (c->chosen[k].f == f) { /* two names equal to one field */
                PyErr_Format(PyExc_TypeError,
                             "%s got multiple values for field %R", call,
                             name);
                goto error;
            }
        }
        c->chosen[i].f = f;
        c->chosen[i].at = at;
        at += record_round_up(f->item_size * (size_t)f->count, 8);
    }
    c->kwnames = Py_NewRef(kwnames);
    c->n = n;
    c->total = at;
    return c;
error:
    PyMem_Free(c);
    return NULL;
}

const field_choice *
layout_choose(record_layout *layout, PyObject *kwnames, const char *call,
              const char *noun, field_choice **made)
{
    *made = NULL;
    if (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0) {
        return &no_keywords;
    }
    int free_slot = -1;
    for (int i = 0; i < FIELD_CHOICES; i++) {
        field_choice *c = atomic_load_explicit(&layout->choices[i],
                                               memory_order_acquire);
        if (c == NULL) {
            free_slot = i;
            break;
        }
        if (c->kwnames == kwnames) {
            return c;
        }
    }
    field_choice *c = choose(layout, kwnames, PyTuple_GET_SIZE(kwnames),
                             call, noun);
    if (c == NULL) {
        return NULL;
    }
    /* The release publishes c's contents with it.  A slot another thread
     * (or user code run by choose()) filled meanwhile is looked past. */
    for (int i = free_slot; i >= 0 && i < FIELD_CHOICES; i++) {
        field_choice *empty = NULL;
        if (atomic_compare_exchange_strong_explicit(
                &layout->choices[i], &empty, c, memory_order_release,
                memory_order_relaxed)) {
            return c;
        }
    }
    *made = c;
    return c;
}

void
field_choice_free(field_choice *c)
{
    if (c != NULL) {
        Py_DECREF(c->kwnames);
        PyMem_Free(c);
    }
}

void
layout_forget_choices(record_layout *layout)
{
    for (int i = 0; i < FIELD_CHOICES; i++) {
        field_choice_free(atomic_load_explicit(&layout->choices[i],
                                               memory_order_relaxed));
    }
}
