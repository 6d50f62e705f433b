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

#ifdef __linux__
/* The number of the given base (16 or 10) at *p, moving *p past it: 0 if
 * it has no digit (or overflows).  Not sscanf(): under _GNU_SOURCE, glibc
 * 2.38 and later redirect it to __isoc23_sscanf, and an extension built
 * there would need that glibc to load. */
static int
take_number(const char **p, unsigned base, uintptr_t *value)
{
    const char *q = *p;
    uintptr_t v = 0;
    for (;; q++) {
        unsigned digit;
        if (*q >= '0' && *q <= '9') {
            digit = (unsigned)(*q - '0');
        }
        else if (base == 16 && *q >= 'a' && *q <= 'f') {
            digit = (unsigned)(*q - 'a') + 10;
        }
        else {
            break;
        }
        if (v > (UINTPTR_MAX - digit) / base) {
            return 0;
        }
        v = v * base + digit;
    }
    if (q == *p) {
        return 0;
    }
    *p = q;
    *value = v;
    return 1;
}

/* A line of /proc/self/maps, "start-end perms offset device inode ...":
 * 1 with its fields, else 0. */
static int
parse_mapping(const char *line, uintptr_t *start, uintptr_t *end,
              char perms[5], uintptr_t *inode)
{
    const char *p = line;
    uintptr_t offset;
    if (!take_number(&p, 16, start) || *p++ != '-'
        || !take_number(&p, 16, end) || *p++ != ' ') {
        return 0;
    }
    for (int i = 0; i < 4; i++) {
        if (*p == '\0' || *p == ' ') {
            return 0;
        }
        perms[i] = *p++;
    }
    perms[4] = '\0';
    if (*p++ != ' ' || !take_number(&p, 16, &offset) || *p++ != ' ') {
        return 0;
    }
    while (*p != '\0' && *p != ' ') { /* the device, "fd:01" */
        p++;
    }
    return *p++ == ' ' && take_number(&p, 10, inode);
}
#endif

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
        uintptr_t start, end, inode;
        if (starts_here && parse_mapping(line, &start, &end, perms, &inode)
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
