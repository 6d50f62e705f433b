/*
 * reader_into.h - SeqRecord.reader_into(buffer): read_into() bound once to
 * a buffer it checked, for the reader that copies into the same buffer in
 * a loop (reader_into.c).
 */
#ifndef SEQLOCK_PY_READER_INTO_H
#define SEQLOCK_PY_READER_INTO_H

#include "seqrecord.h"

/* rec.reader_into(buffer, /, *, field=None): the into method of a new
 * ReaderInto, bound. */
PyObject *reader_into_new(SeqRecordObject *rec, PyObject *const *args,
                          Py_ssize_t nargsf, PyObject *kwnames);
#define READER_INTO_DOC                                                     \
    "reader_into($self, buffer, /, *, field=None)\n--\n\n"                  \
    "read_into(buffer, field=field) bound to the buffer, which is checked\n" \
    "once, here, as read_into() checks it (the same errors): into =\n"     \
    "rec.reader_into(buf) makes a ReaderInto and returns its bound method\n" \
    "into (into.__self__ is the ReaderInto).  Each into() copies one\n"     \
    "consistent snapshot into the buffer and returns its sequence number,\n" \
    "as read_into(buffer) does, without exporting and checking the buffer\n" \
    "again: the fast form of a loop that copies into one buffer.  The\n"   \
    "ReaderInto holds the buffer's export until it is dropped (a bytearray\n" \
    "cannot be resized meanwhile).  One per thread: two threads calling\n" \
    "one copy into one buffer at once."

#endif /* SEQLOCK_PY_READER_INTO_H */
