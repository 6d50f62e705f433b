/*
 * memory_kind.c - what kind of memory a buffer lies in: shared with other
 * processes or private, writable or read-only.
 *
 * A record laid out in a caller's buffer may be in shared memory (a
 * SharedMemory block, a MAP_SHARED mmap: after fork() the child and the
 * parent see one record, whose holder is a live thread of either) or in
 * private memory (a bytearray, a MAP_PRIVATE mmap: after fork() the child
 * has its own copy, whose holder, if not the forking thread, is gone).
 * And it may be memory this process can only read (a PROT_READ mapping),
 * whatever the buffer's exporter says: writing it would kill the process.
 * The kernel says both in /proc/self/maps (the permissions column: 'w'
 * second, 's' or 'p' fourth).  Only create() and attach() ask, with the
 * GIL; a bytearray's memory is private and writable without asking.
 */
#include "memory_kind.h"

#include <stdio.h>
#include <string.h>

/* The permissions of the mapping holding addr ("rw-s"), in perms[5], and
 * in *file whether a file backs it (an inode other than 0); 0 if found,
 * -1 if the kernel does not say. */
static int
mapping_permissions(const void *addr, char perms[5], int *file)
{
#ifdef __linux__
    FILE *maps = fopen("/proc/self/maps", "re");
    if (maps == NULL) {
        return -1;
    }
    uintptr_t at = (uintptr_t)addr;
    int result = -1, line_start = 1;
    char line[256];
    while (fgets(line, sizeof line, maps) != NULL) {
        /* Only a line's beginning holds "start-end perms"; the rest of a
         * long line (a path) arrives in further pieces: skip those. */
        int starts_here = line_start;
        line_start = strchr(line, '\n') != NULL;
        unsigned long start, end, offset, inode;
        char device[32];
        if (starts_here
            && sscanf(line, "%lx-%lx %4s %lx %31s %lu", &start, &end, perms,
                      &offset, device, &inode) == 6
            && at >= start && at < end) {
            *file = inode != 0;
            result = 0;
            break;
        }
    }
    fclose(maps);
    return result;
#else
    (void)addr;
    (void)perms;
    (void)file;
    return -1;
#endif
}

int
buffer_memory_kind(const Py_buffer *view)
{
    /* A bytearray's memory is the heap's: private and writable, whatever
     * /proc says (and where /proc cannot be read: a chroot, no free
     * descriptor). */
    PyObject *exporter = view->obj;
    while (exporter != NULL && PyMemoryView_Check(exporter)) {
        exporter = PyMemoryView_GET_BASE(exporter);
    }
    int kind = view->readonly ? BOUND_READ_ONLY : 0;
    if (exporter != NULL && PyByteArray_Check(exporter)) {
        return kind | BOUND_PRIVATE;
    }
    char perms[5];
    int file = 0;
    if (mapping_permissions(view->buf, perms, &file) < 0) {
        /* unknown: never repair it, and guard it */
        return kind | BOUND_SHARED | BOUND_FILE;
    }
    if (perms[1] != 'w') {
        kind |= BOUND_READ_ONLY;
    }
    if (file) {
        kind |= BOUND_FILE;
    }
    return kind | (perms[3] == 's' ? BOUND_SHARED : BOUND_PRIVATE);
}
