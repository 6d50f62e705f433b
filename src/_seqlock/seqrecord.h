/*
 * seqrecord.h - what the files of SeqRecord share: its objects (the
 * record, the write section's RecordWriter, an array field's proxy), the
 * reader's snapshot, and the writer's protocol (record_read.c,
 * record_writer.c, seqrecord_type.c).
 */
#ifndef SEQLOCK_PY_SEQRECORD_H
#define SEQLOCK_PY_SEQRECORD_H

#include "lock_path.h"
#include "module.h"
#include "record_layout.h"

typedef struct {
    PyObject_HEAD
    bound_lock lock;         /* the one locking path's view of rec */
    bound_record rec;        /* where the record is (this process's own
                                geometry, never re-read from the header),
                                whether it may write it, what to guard */
    record_layout *layout;
    PyTypeObject *snapshot_type; /* what read() returns (snapshot.h) */
    int snapshot_kind;           /* snapshot_kind(snapshot_type) */
    void *memory;    /* a record's own memory (SeqRecord()), else NULL */
    Py_buffer view;  /* create()/attach()'s buffer (view.obj NULL if none) */
    /* The token of a thread whose open section's RecordWriter was freed
     * by another thread: it undoes that section at its next write. */
    _Atomic uint64_t dropped_section;
    /* Write sections this object opened (written by the holder only): a
     * RecordWriter's section is the lock's current one only while this
     * still counts what it did at __enter__, which "this thread holds the
     * lock" alone does not tell after a take-over or a fork. */
    _Atomic uint64_t sections;
    /* Called by close() once the buffer is let go (create_shared(),
     * attach_shared(): closes, and for the creator unlinks, the shared
     * memory), or NULL. */
    PyObject *closer;
    PyObject *weakreflist;
} SeqRecordObject;

typedef struct {
    PyObject_HEAD
    SeqRecordObject *record;
    int64_t timeout_ns;
    _Atomic int active; /* between __enter__ and __exit__ */
    uint64_t section;   /* record->sections when it entered */
    /* Per field, NULL or the SectionCopy that an exported array field
     * (np.asarray(w.state)) is a view of, this section's copy of the
     * field: every access of the field in the section goes to it, and it
     * is stored into the record when the section commits.  After the
     * section, the exports write a copy nothing reads.  Its size is
     * fixed: no user-visible object owns memory the section copies. */
    PyObject **staged;
} RecordWriterObject;

typedef struct {
    PyObject_HEAD
    RecordWriterObject *writer;
    const field_spec *field;
} ArrayFieldObject;

/* ValueError if self is closed: the first line of a method that touches
 * the record's memory, so that it says so before anything else (the
 * touches themselves pin, or check under the GIL: lock_path.h). */
#define RETURN_IF_CLOSED(self, error)                                       \
    do {                                                                    \
        if (record_is_closed(&(self)->rec)) {                               \
            (void)set_record_closed(&(self)->rec);                          \
            return (error);                                                 \
        }                                                                   \
    } while (0)

/* Small snapshots are copied to the stack; larger ones to the heap. */
#define STACK_SNAPSHOT_BYTES 512


static inline module_state *
state_of(PyObject *self)
{
    return PyType_GetModuleState(Py_TYPE(self));
}

/* The buffer read_into(buffer, field=field) copies into (field NULL or
 * None: the whole record), exported in *view (the caller releases it),
 * with the data bytes [*offset, +*n) it takes.  0, or -1 with TypeError,
 * ValueError (naming call) or KeyError, nothing held. */
int read_into_target(SeqRecordObject *self, PyObject *buffer,
                     PyObject *field, const char *call, Py_buffer *view,
                     size_t *offset, size_t *n);

/* ---- consistent snapshots (record_read.c) ---- */

/* Latch read passes a reader makes with the interpreter released, once it
 * has run out of lock-free retries, before it looks for signals again;
 * one that may take the lock word tries it after fewer. */
#define DETACHED_PASSES 1024

/* Up to `passes` latch read passes of data bytes [offset, +n) into dst,
 * yielding the CPU before each if `yield`; whole: one was not overlapped,
 * with its count in seq. */
typedef struct {
    const record_view *rv;
    read_budget *budget;
    void *dst;
    size_t offset, n;
    int passes, yield;
    seqlock_t *ask_turn_of; /* ask writers for a turn before each pass */
    uint64_t seq;
} latch_read;

/* snapshot()'s slow path: 0, or -1 with an exception. */
int snapshot_retrying(SeqRecordObject *self, latch_read *r);

/* What snapshot() returns when it failed: odd, so never the sequence
 * number of a snapshot (even). */
#define SNAPSHOT_FAILED UINT64_MAX

/* Copy data bytes [offset, +n) of one consistent snapshot into dst and
 * return its sequence number: the count at the end of the section that
 * wrote it (even; while a section is open, the count before it).
 * A latch reader: it never waits for a writer and never takes the lock,
 * so a writer stopped or dead at any point cannot hold it up.  A write
 * storm that keeps overlapping its copies past max_retries makes it go
 * on with the interpreter released, yielding the CPU between passes (so
 * that writers of this process can finish, and a stop-the-world pause is
 * not held up); read_fallbacks counts those reads.  SNAPSHOT_FAILED with
 * OSError (the file behind the record was truncated) or what a signal
 * handler raised meanwhile.  (The number is returned, not stored through
 * a pointer: the inline case then keeps it in a register, and its
 * callers need no stack canary.) */
uint64_t snapshot_slow(SeqRecordObject *self, void *dst, size_t offset,
                       size_t n);

Py_ALWAYS_INLINE static inline uint64_t
snapshot_pinned(SeqRecordObject *self, void *dst, size_t offset, size_t n)
{
    /* Inline, the common case only: memory no file backs (a guard's
     * sigsetjmp() would keep the compiler from inlining) and a first pass
     * no write overlapped. */
    uint64_t seq;
    if (SEQLOCK_LIKELY(self->rec.guarded == NULL)
        && SEQLOCK_LIKELY(record_try_read(&self->rec.view, dst, offset, n,
                                          &seq))) {
        return seq & ~(uint64_t)1;
    }
    return snapshot_slow(self, dst, offset, n);
}

/* ... as above, on an open record: ValueError once it is closed.  A
 * free-threaded build pins the record throughout (close() waits for the
 * copy to end); the GIL build holds the GIL from the check to the last
 * touch, but in the slow path (snapshot_retrying() pins).  Inlined in every
 * reader, always: the call would cost a tenth of a short read. */
Py_ALWAYS_INLINE static inline uint64_t
snapshot(SeqRecordObject *self, void *dst, size_t offset, size_t n)
{
    const bound_record *b = &self->rec;
    if (record_pin_ft(b) < 0) {
        return SNAPSHOT_FAILED;
    }
    uint64_t seq = snapshot_pinned(self, dst, offset, n);
    record_unpin_ft(b);
    return seq;
}

/* A buffer for n bytes of snapshot: the stack one if it fits. */
static inline unsigned char *
scratch(unsigned char *stack, size_t n)
{
    if (n <= STACK_SNAPSHOT_BYTES) {
        return stack;
    }
    unsigned char *heap = PyMem_Malloc(n);
    if (heap == NULL) {
        PyErr_NoMemory();
    }
    return heap;
}

static inline void
scratch_free(unsigned char *buf, unsigned char *stack)
{
    if (buf != stack) {
        PyMem_Free(buf);
    }
}

/* The field named by key, or NULL with KeyError. */
static inline const field_spec *
field_or_keyerror(SeqRecordObject *self, PyObject *key)
{
    const field_spec *f = layout_find(self->layout, key);
    if (f == NULL && !PyErr_Occurred()) {
        PyErr_SetObject(PyExc_KeyError, key);
    }
    return f;
}

/* ---- the writer's protocol (record_writer.c) ---- */

/* Open a write section (lock_write()), first undoing a section of this
 * thread's whose writer another thread freed. */
lock_status begin_write(SeqRecordObject *self, int64_t timeout_ns);

/* update(**values), as METH_FASTCALL | METH_KEYWORDS hands it over, into
 * writer's section if one is given, else a section of its own.  0 or -1. */
int update_fields(SeqRecordObject *self, RecordWriterObject *writer,
                  PyObject *const *args, Py_ssize_t nargsf,
                  PyObject *kwnames);

/* ---- what SeqRing (seqring_type.c) shares with SeqRecord ---- */

/* The layout and the snapshot class that decl (a NamedTuple class) or
 * fields (keywords) declare, for SeqRecord's and SeqRing's constructors:
 * 0, or -1 with an exception. */
int typed_layout(PyTypeObject *type, PyObject *decl, PyObject *fields,
                 record_layout **layout, PyTypeObject **snapshot_type);
/* A declaration's layout: of the typing.NamedTuple class decl if not
 * NULL, else of the fields given as keywords.  NULL with an exception. */
record_layout *declared_layout(PyTypeObject *type, PyObject *decl,
                               PyObject *fields);
/* A positional declaration: NULL for None (the signatures' default). */
PyObject *no_declaration(PyObject *decl);
/* TypeError for a declaration given both ways; -1. */
int declared_twice(const char *method);
/* -1 with a TypeError if obj, given to the constructor type() (SeqRecord
 * or SeqRing), is a buffer: it makes memory of its own, and the error
 * names the calls that take a buffer (create_args: "buffer, **fields");
 * else 0. */
int refuse_buffer(const char *type, PyObject *obj, const char *create_args);
/* The guard for accesses to the whole of a buffer: none unless a file
 * backs it (another process may truncate it). */
bound_record buffer_guard(const Py_buffer *view, int memory_kind);
/* "name:code;name:code" (a header's layout text, copied out) as the dict
 * of fields SeqRecord(**fields) takes; NULL with ValueError naming what
 * ("SeqRecord", "SeqRing") if the text is no layout. */
PyObject *fields_of_layout_text(const char *text, size_t len,
                                const char *what);
/* The last step of close() for an object closed by this call, whose
 * buffer is gone: mark r closed, then call *closer (if any; NULL after),
 * which may close its shared memory now.  Py_None, or NULL with its
 * exception. */
PyObject *finish_close(bound_record *r, PyObject **closer);
/* _close_with(closer): *slot = closer (close() calls it after letting the
 * buffer go: seqlock_py._shared), once; r not closed.  Py_None, or NULL
 * with an exception. */
PyObject *set_closer(bound_record *r, PyObject **slot, PyObject *closer);
/* type.<method>(*args, **kwargs) as seqlock_py._shared.<method>(type,
 * *args, **kwargs): create_shared() and attach_shared().  TypeError saying
 * usage unless min_args <= len(args) <= max_args. */
PyObject *call_shared(const char *method, PyTypeObject *type, PyObject *args,
                      PyObject *kwargs, Py_ssize_t min_args,
                      Py_ssize_t max_args, const char *usage);
/* numpy.dtype of a layout (numpy imported here only); NULL with an
 * exception. */
PyObject *layout_dtype(const record_layout *layout);

#endif /* SEQLOCK_PY_SEQRECORD_H */
