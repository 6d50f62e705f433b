/*
 * own_memory.h - the memory a record or ring made without a buffer
 * (SeqRecord(), SeqRing()) allocates for itself: a size sized by the
 * caller's declaration, refused before allocating if the machine could
 * not hold it, and named in every error (own_memory.c).
 */
#ifndef SEQLOCK_PY_OWN_MEMORY_H
#define SEQLOCK_PY_OWN_MEMORY_H

#include "compat.h"

#include <stddef.h>

/* size zeroed bytes (size > 0) for what, e.g. "SeqRing(1024, ...)", to
 * free with PyMem_Free(); or NULL with a MemoryError naming size and
 * what, and saying remedy ("give a smaller capacity"): beyond
 * the machine's RAM and swap without trying, or refused by the allocator. */
void *own_memory_alloc(size_t size, const char *what, const char *remedy);

#endif /* SEQLOCK_PY_OWN_MEMORY_H */
