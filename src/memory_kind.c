/*
 * memory_kind.c - is a buffer's memory shared with other processes?
 *
 * A record laid out in a caller's buffer may be in shared memory (a
 * SharedMemory block, a MAP_SHARED mmap: after fork() the child and the
 * parent see one record, whose holder is a live thread of either) or in
 * private memory (a bytearray, a MAP_PRIVATE mmap: after fork() the child
 * has its own copy, whose holder, if not the forking thread, is gone).
 * The kernel says which in /proc/self/maps ('s' or 'p' in the fourth
 * column of permissions).  Only create() and attach() ask, with the GIL;
 * a bytearray's memory is private without asking.
 */
#include "binding.h"

#include <stdio.h>
#include <string.h>

int
memory_is_shared(const void *addr, size_t len)
{
    (void)len; /* one object's buffer lies inside one mapping */
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
        unsigned long start, end;
        char perms[5];
        if (starts_here
            && sscanf(line, "%lx-%lx %4s", &start, &end, perms) == 3
            && at >= start && at < end) {
            result = perms[3] == 's';
            break;
        }
    }
    fclose(maps);
    return result;
#else
    (void)addr;
    return -1;
#endif
}

int
buffer_is_private(const Py_buffer *view)
{
    /* A bytearray's memory is the heap's: private, whatever /proc says
     * (and where /proc cannot be read: a chroot, no free descriptor). */
    PyObject *exporter = view->obj;
    while (exporter != NULL && PyMemoryView_Check(exporter)) {
        exporter = PyMemoryView_GET_BASE(exporter);
    }
    if (exporter != NULL && PyByteArray_Check(exporter)) {
        return 1;
    }
    return memory_is_shared(view->buf, (size_t)view->len) == 0;
}
