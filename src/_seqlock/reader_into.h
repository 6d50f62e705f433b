/*
 * reader_into.h - SeqRecord.reader_into(buffer): read_into() bound once to
 * a buffer it checked, for the reader that copies into the same buffer in
 * a loop (reader_into.c).
 */
#ifndef SEQLOCK_PY_READER_INTO_H
#define SEQLOCK_PY_READER_INTO_H

#include "seqrecord.h"

/* rec.reader_into(buffer, /, *, field=None): a new ReaderInto. */
PyObject *reader_into_new(SeqRecordObject *rec, PyObject *const *args,
                          Py_ssize_t nargsf, PyObject *kwnames);
#define READER_INTO_DOC                                                     \
    "reader_into($self, buffer, /, *, field=None)\n--\n\n"                  \
    "A ReaderInto: read_into(buffer, field=field) bound to the buffer,\n"   \
    "which is checked once, here, as read_into() checks it (the same\n"    \
    "errors).  Calling it, into(), copies one consistent snapshot into the\n" \
    "buffer and returns its sequence number, as read_into(buffer) does,\n" \
    "without exporting and checking the buffer again: the fast form of a\n" \
    "loop that copies into one buffer.  It holds the buffer's export until\n" \
    "it is dropped (a bytearray cannot be resized meanwhile).  One per\n"   \
    "thread: two threads calling one copy into one buffer at once."

#endif /* SEQLOCK_PY_READER_INTO_H */
