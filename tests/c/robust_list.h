/*
 * robust_list.h - whether the kernel keeps a robust futex list for the
 * calling thread: what every test of a dead holder rests on (the kernel
 * walks the list when the thread dies and marks each robust mutex it held
 * FUTEX_OWNER_DIED).  glibc registers one for every thread; qemu-user
 * answers set_robust_list and get_robust_list with ENOSYS, as it cannot
 * walk a guest's list when a guest thread dies, so under emulation no
 * dead holder is ever marked and those tests are skipped, with the reason.
 */
#ifndef ROBUST_LIST_H
#define ROBUST_LIST_H

#include <errno.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <unistd.h>

/* 0 if the calling thread has a robust futex list, else why not (an errno
 * value: ENOSYS under qemu-user, ENOENT if none is registered, EPERM if a
 * seccomp filter refuses the call). */
static inline int
robust_list_error(void)
{
    void *head = NULL;
    size_t len = 0;
    if (syscall(SYS_get_robust_list, 0, &head, &len) != 0) {
        return errno;
    }
    return head != NULL ? 0 : ENOENT;
}

/* ENOSYS where no robust futex list can exist (qemu-user, a kernel without
 * futexes): the only reason to skip a test of a dead holder.  Any other
 * answer is 0: on a real kernel a thread without a list (ENOENT) or a
 * refused call is a fault the tests must show by failing, not a reason to
 * skip them (robust_list_error() itself is checked by test_dead_owner.c). */
static inline int
robust_list_missing(void)
{
    return robust_list_error() == ENOSYS ? ENOSYS : 0;
}

/* What a test or phase skipped for robust_list_missing() says. */
#define ROBUST_LIST_MISSING_REASON                                         \
    "no robust futex list here (get_robust_list: ENOSYS, as under "        \
    "qemu-user): the kernel marks no dead holder"


#endif /* ROBUST_LIST_H */
