/*
 * memory_kind.h - is a buffer's memory private or shared,
 * writable or not, backed by a file (memory_kind.c).
 */
#ifndef SEQLOCK_PY_MEMORY_KIND_H
#define SEQLOCK_PY_MEMORY_KIND_H

#include "lock_path.h"

/* The kind of a buffer's memory, for bound_lock_init(): BOUND_PRIVATE if
 * certainly private to this process (a bytearray, or /proc says so), else
 * BOUND_SHARED; with BOUND_READ_ONLY if the buffer is read-only or its
 * mapping is not writable; with BOUND_FILE if a file backs it (another
 * process may truncate it: readers then guard their accesses). */
int buffer_memory_kind(const Py_buffer *view);

#endif /* SEQLOCK_PY_MEMORY_KIND_H */
