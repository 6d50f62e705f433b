/*
 * own_memory.c - a record's or ring's own memory, refused before it is
 * allocated when the machine cannot hold it.
 *
 * The size comes from the caller (a ring's capacity times its entry), and
 * create's layout zeroes all of it at once (record_init(), ring_init()),
 * so every byte asked for becomes resident at construction.  glibc's
 * calloc() gets such memory from mmap(), which the kernel's default
 * overcommit policy refuses beyond RAM and swap: a MemoryError, if an
 * empty one.  mimalloc (the free-threaded build's allocator) reserves its
 * memory with MAP_NORESERVE, which that policy never refuses: the layout's
 * zeroing then ran until the OOM killer ended the process (a ring of 2^40
 * entries: 24 GB resident on a 25 GB machine).  So the bound the kernel
 * would have applied is applied here, the same for every allocator,
 * before anything is allocated; the kernel's own refusal of a smaller
 * size still comes back as a MemoryError that names the size.
 */
#include "own_memory.h"

#include <stdint.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/sysinfo.h>
#endif

/* Bytes of memory this machine has: RAM and swap, or SIZE_MAX if it
 * cannot say. */
static size_t
machine_memory_bytes(void)
{
    uint64_t total = 0, unit = 0;
#ifdef __linux__
    struct sysinfo si;
    if (sysinfo(&si) != 0) {
        return SIZE_MAX;
    }
    total = (uint64_t)si.totalram + (uint64_t)si.totalswap;
    unit = si.mem_unit == 0 ? 1 : si.mem_unit;
#elif defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) {
        return SIZE_MAX;
    }
    total = (uint64_t)pages;
    unit = (uint64_t)page;
#else
    return SIZE_MAX;
#endif
    if (total > UINT64_MAX / unit || total * unit > SIZE_MAX) {
        return SIZE_MAX;
    }
    return (size_t)(total * unit);
}

void *
own_memory_alloc(size_t size, const char *what, const char *remedy)
{
    size_t machine = machine_memory_bytes();
    if (size > machine) {
        PyErr_Format(PyExc_MemoryError,
                     "%s needs %zu bytes, more than this machine's memory "
                     "(%zu bytes of RAM and swap): %s", what, size, machine,
                     remedy);
        return NULL;
    }
    void *memory = PyMem_Calloc(1, size);
    if (memory == NULL) {
        PyErr_Format(PyExc_MemoryError,
                     "cannot allocate the %zu bytes of %s: %s", size, what,
                     remedy);
    }
    return memory;
}
