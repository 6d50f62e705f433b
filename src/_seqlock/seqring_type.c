/*
 * seqring_type.c - SeqRing: a broadcast ring of entries that share one
 * record layout (ring.h), and its readers (RingReader).
 *
 * The layout, the conversions, the snapshot classes and the dtype are a
 * SeqRecord's (record_layout.c, snapshot.c); the lock is taken and given
 * back by the one locking path (lock_path.c: owner death, signals,
 * timeouts); a buffer is untrusted and, if a file backs it, guarded
 * (bus_guard.h); close() waits for the calls inside the ring (in_use.h).
 * What is the ring's own: an append converts every value into private
 * scratch first (user code runs there, never under the lock), then takes
 * the lock word and writes the whole slot (every word: it holds an older
 * entry's) between ring_open_append() and ring_close_append(); a reader
 * is private state (ring_reader) that copies entries out with the
 * per-slot seqlock and never writes the ring's memory.
 *
 * The ring's bound_record carries what the locking path asks of any
 * record-like owner (closed, readonly, the guarded span); its record view
 * is unused: the lock is bound without a record (so a fork's child
 * abandons a section another thread left open, and the next append hears
 * EOWNERDEAD and repairs it with ring_repair()), then pointed at it for
 * the closed checks and guards of its waits.
 */
#include "seqrecord.h"

#include "args.h"
#include "field_choice.h"
#include "memory_kind.h"
#include "news.h"
#include "open_memory.h"
#include "own_memory.h"
#include "ring.h"
#include "snapshot.h"
#include "unheld.h"

#include <errno.h>
#include <time.h>

typedef struct {
    PyObject_HEAD
    bound_lock lock;
    bound_record rec;  /* closed, readonly, guarded (view unused) */
    ring_view ring;    /* this process's geometry, never re-read */
    record_layout *layout;
    PyTypeObject *snapshot_type;
    int snapshot_kind; /* snapshot_kind(snapshot_type) */
    /* poll()'s batches, from this process's geometry: the first, on the
     * stack (0: an entry is larger than the stack buffer), then the
     * later ones (at most 1 MiB of entries; at least 1, at most
     * capacity). */
    size_t poll_first, poll_batch;
    void *memory;      /* SeqRing()'s own memory, else NULL */
    Py_buffer view;    /* create()/attach()'s buffer (view.obj NULL if none) */
    PyObject *closer;  /* close() calls it after releasing view, or NULL */
    PyObject *weakreflist;
} SeqRingObject;

typedef struct {
    PyObject_HEAD
    SeqRingObject *ring;
    ring_reader r;
    _Atomic int busy; /* a call is using r: one thread at a time */
    /* 1 for good once a call saw the head below the reader's place (the
     * ring was rewound, or its head overwritten): the place means nothing
     * in the ring now, and a head that passes it again would hand out the
     * new ring's entries as if they followed them.  Any call that sees it
     * sets it, also on its copy of r (wait()): r.next only grows, so a
     * head below a copy's place is below the reader's own. */
    _Atomic int rewound;
} RingReaderObject;

#define APPENDING_TWICE "this thread already holds the ring's lock"
/* Entries a poll() copies to the stack: its first batch, at most. */
#define POLL_STACK_ENTRIES 8
#define MAX_CAPACITY ((uint64_t)1 << 40)

/* ---- construction ---- */

static size_t
ring_bytes(const record_layout *layout, uint64_t capacity)
{
    return ring_size((uint32_t)PyBytes_GET_SIZE(layout->descriptor),
                     (uint32_t)layout->data_bytes, capacity);
}

/* ring_bytes(), or 0 with exc (MemoryError for SeqRing(), OverflowError
 * for buffer_size()) if that size does not fit in a size_t. */
static size_t
ring_bytes_or_error(const record_layout *layout, uint64_t capacity,
                    PyObject *exc)
{
    size_t size = ring_bytes(layout, capacity);
    if (size == 0) {
        PyErr_Format(exc,
                     "a ring of %llu entries of %zu bytes takes more than "
                     "%zu bytes: give a smaller capacity or smaller entries",
                     (unsigned long long)capacity,
                     ring_slot_words(layout->data_bytes) * SEQLOCK_WORD_SIZE,
                     (size_t)SIZE_MAX);
    }
    return size;
}

/* capacity as a number of slots: 1 to MAX_CAPACITY.  0 or -1. */
static int
capacity_arg(PyObject *obj, uint64_t *capacity)
{
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "capacity must be an int, not %.100s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    int overflow;
    long long n = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (n == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow != 0 || n < 1 || (uint64_t)n > MAX_CAPACITY) {
        PyErr_Format(PyExc_ValueError,
                     "capacity must be between 1 and %llu entries",
                     (unsigned long long)MAX_CAPACITY);
        return -1;
    }
    *capacity = (uint64_t)n;
    return 0;
}

static SeqRingObject *
ring_alloc(PyTypeObject *type, PyObject *decl, PyObject *fields)
{
    record_layout *layout;
    PyTypeObject *snapshot_type;
    if (typed_layout(type, decl, fields, &layout, &snapshot_type) < 0) {
        return NULL;
    }
    SeqRingObject *self = (SeqRingObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(snapshot_type);
        layout_free(layout);
        return NULL;
    }
    self->layout = layout;
    self->snapshot_type = snapshot_type;
    self->snapshot_kind = snapshot_kind(snapshot_type);
    return self;
}

/* Point the ring at its memory with its own geometry, and bind its lock
 * (see the file's comment).  0, or -1 with MemoryError. */
static int
bind_ring(SeqRingObject *self, void *memory, uint64_t capacity,
          int memory_kind)
{
    if (record_memory_opened(&self->rec, memory,
                             ring_bytes(self->layout, capacity)) < 0) {
        return -1;
    }
    self->ring = ring_view_of(
        memory, (uint32_t)PyBytes_GET_SIZE(self->layout->descriptor),
        (uint32_t)self->layout->data_bytes, capacity);
    self->rec.readonly = (memory_kind & BOUND_READ_ONLY) != 0;
    self->rec.kind = "ring"; /* its errors say "the ring is closed" */
    self->rec.guarded = NULL;
    self->rec.guarded_len = 0;
    if ((memory_kind & BOUND_FILE) && bus_guard_install() == 0
        && bus_guard_reassert() == 0) {
        self->rec.guarded = memory;
        self->rec.guarded_len = ring_bytes(self->layout, capacity);
    }
    bound_lock_init(&self->lock, self->ring.lock, NULL, (PyObject *)self,
                    memory_kind);
    self->lock.record = &self->rec;
    size_t eb = self->ring.entry_bytes;
    size_t batch = ((size_t)1 << 20) / eb;
    if (batch == 0) {
        batch = 1;
    }
    if (capacity < batch) {
        batch = (size_t)capacity;
    }
    size_t first = STACK_SNAPSHOT_BYTES / eb;
    if (first > POLL_STACK_ENTRIES) {
        first = POLL_STACK_ENTRIES;
    }
    self->poll_first = first < batch ? first : batch;
    self->poll_batch = batch;
    return 0;
}

/* The declaration of SeqRing(capacity, declaration=None, /, **fields)
 * and buffer_size(): args[first] if given.  0 or -1. */
static int
ring_declaration(const char *method, PyObject *args, Py_ssize_t first,
                 PyObject *kwargs, PyObject **decl)
{
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if (nargs < first || nargs > first + 1) {
        PyErr_Format(PyExc_TypeError,
                     "%s() takes %s then a typing.NamedTuple class or the "
                     "fields as keywords, e.g. %s(1024, x='d', n='q')",
                     method, first == 2 ? "the buffer and the capacity"
                                        : "the capacity",
                     method);
        return -1;
    }
    *decl = nargs == first + 1 ? no_declaration(PyTuple_GET_ITEM(args, first))
                               : NULL;
    if (*decl != NULL && kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        return declared_twice(method);
    }
    return 0;
}

static PyObject *
SeqRing_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *decl;
    uint64_t capacity;
    if ((PyTuple_GET_SIZE(args) >= 1
         && refuse_buffer("SeqRing", PyTuple_GET_ITEM(args, 0),
                          "buffer, capacity, **fields") < 0)
        || ring_declaration("SeqRing", args, 1, kwargs, &decl) < 0
        || capacity_arg(PyTuple_GET_ITEM(args, 0), &capacity) < 0) {
        return NULL;
    }
    SeqRingObject *self = ring_alloc(type, decl, kwargs);
    if (self == NULL) {
        return NULL;
    }
    size_t size = ring_bytes_or_error(self->layout, capacity,
                                      PyExc_MemoryError);
    char what[48];
    (void)snprintf(what, sizeof what, "SeqRing(%llu, ...)",
                   (unsigned long long)capacity);
    self->memory = size == 0 ? NULL
                             : own_memory_alloc(size, what,
                                                "give a smaller capacity");
    if (self->memory == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    int err = ring_init(self->memory,
                        PyBytes_AS_STRING(self->layout->descriptor),
                        (uint32_t)PyBytes_GET_SIZE(self->layout->descriptor),
                        (uint32_t)self->layout->data_bytes, capacity);
    if (err != 0) {
        PyMem_Free(self->memory);
        self->memory = NULL;
        Py_DECREF(self);
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (bind_ring(self, self->memory, capacity, BOUND_PRIVATE) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

PyDoc_STRVAR(SeqRing_buffer_size_doc,
"buffer_size($type, capacity, declaration=None, /, **fields)\n--\n\n"
"Bytes of buffer that create() needs for a ring of capacity entries of\n"
"these fields (keywords, or a typing.NamedTuple class).  OverflowError\n"
"if that is more than a size_t holds.");

static PyObject *
SeqRing_buffer_size(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *decl;
    uint64_t capacity;
    if (ring_declaration("buffer_size", args, 1, kwargs, &decl) < 0
        || capacity_arg(PyTuple_GET_ITEM(args, 0), &capacity) < 0) {
        return NULL;
    }
    record_layout *layout = declared_layout(type, decl, kwargs);
    if (layout == NULL) {
        return NULL;
    }
    size_t size = ring_bytes_or_error(layout, capacity, PyExc_OverflowError);
    layout_free(layout);
    return size == 0 ? NULL : PyLong_FromSize_t(size);
}

/* ---- create() and attach(): a ring in the caller's buffer ---- */

/* What attach() reads of a buffer's header, copied out once under the
 * guard: geometry and layout text, then checked as any caller's. */
#define MAX_STORED_LAYOUT_BYTES (1u << 20)

typedef struct {
    const ring_header *h;
    size_t len;
    enum ring_mismatch mismatch;
    uint32_t version, lock_abi, entry_bytes;
    uint64_t capacity;
    char *text; /* MAX_STORED_LAYOUT_BYTES */
    size_t text_len;
} stored_ring;

static int
copy_stored_ring(void *arg)
{
    stored_ring *s = arg;
    const volatile ring_header *h = s->h;
    if (s->len < sizeof(uint32_t)
        || atomic_load_explicit(&((ring_header *)s->h)->magic,
                                memory_order_acquire) != RING_MAGIC) {
        s->mismatch = RING_NO_MAGIC;
        return 0;
    }
    /* The version first: every version's sits here, and another
     * version's header may be shorter than this one's. */
    if (s->len < offsetof(ring_header, version) + sizeof h->version) {
        s->mismatch = RING_TOO_SMALL;
        return 0;
    }
    s->version = h->version;
    if (s->version != RING_VERSION) {
        s->mismatch = RING_OTHER_VERSION;
        return 0;
    }
    if (s->len < RING_HEADER_SIZE) {
        s->mismatch = RING_TOO_SMALL;
        return 0;
    }
    s->lock_abi = h->lock_abi;
    s->entry_bytes = h->entry_bytes;
    s->capacity = h->capacity;
    size_t n = h->layout_bytes; /* read once */
    if (n > s->len - RING_HEADER_SIZE || n > MAX_STORED_LAYOUT_BYTES) {
        s->mismatch = RING_TOO_SMALL;
        return 0;
    }
    memcpy(s->text, ring_layout_text(s->h), n);
    s->text_len = n;
    s->mismatch = RING_MATCHES;
    return 0;
}

/* The ValueError of a mismatch; -1. */
static int
ring_mismatch_error(enum ring_mismatch m, uint32_t version, uint32_t abi)
{
    switch (m) {
    case RING_NO_MAGIC:
        PyErr_SetString(PyExc_ValueError,
                        "the buffer holds no SeqRing (no magic number): it "
                        "is other memory, or a ring overwritten");
        break;
    case RING_OTHER_VERSION:
        PyErr_Format(PyExc_ValueError,
                     "the buffer holds a SeqRing of layout version %u; this "
                     "seqlock_py reads version %u only", version,
                     RING_VERSION);
        break;
    case RING_OTHER_LOCK_ABI:
        PyErr_Format(PyExc_ValueError,
                     "the buffer's SeqRing was created by a build with "
                     "another C library, word size or lock layout (lock ABI "
                     "0x%x, this build 0x%x)", abi, RING_LOCK_ABI);
        break;
    case RING_TOO_SMALL:
        PyErr_SetString(PyExc_ValueError,
                        "buffer too small for the ring its header describes");
        break;
    case RING_BROKEN_LOCK:
        PyErr_SetString(PyExc_ValueError,
                        "the buffer's SeqRing has no working lock word "
                        "(overwritten, or not laid out by create())");
        break;
    case RING_OTHER_CAPACITY:
        PyErr_SetString(PyExc_ValueError,
                        "the buffer's SeqRing has another capacity");
        break;
    default:
        PyErr_SetString(PyExc_ValueError,
                        "the buffer holds a SeqRing with other fields (or a "
                        "header that does not add up: overwritten?)");
        break;
    }
    return -1;
}

typedef struct {
    const ring_header *h;
    size_t len;
    const record_layout *layout;
    uint64_t capacity;
    enum ring_mismatch mismatch;
} ring_check;

static int
check_ring(void *arg)
{
    ring_check *c = arg;
    c->mismatch = ring_matches(
        c->h, c->len, PyBytes_AS_STRING(c->layout->descriptor),
        (uint32_t)PyBytes_GET_SIZE(c->layout->descriptor),
        (uint32_t)c->layout->data_bytes, c->capacity);
    return 0;
}

enum { LAID_OUT, ALREADY_A_RING, RING_IN_USE, INIT_FAILED };

typedef struct {
    void *memory;
    const record_layout *layout;
    uint64_t capacity;
    int overwrite;
    int err;
} laying_out;

static int
lay_out(void *arg)
{
    laying_out *l = arg;
    ring_header *h = l->memory;
    uint32_t magic = atomic_load_explicit(&h->magic, memory_order_acquire);
    if (magic == RING_MAGIC || magic == RING_LAYING_OUT) {
        if (!l->overwrite) {
            return ALREADY_A_RING;
        }
        l->err = ring_lay_out_over(
            h, PyBytes_AS_STRING(l->layout->descriptor),
            (uint32_t)PyBytes_GET_SIZE(l->layout->descriptor),
            (uint32_t)l->layout->data_bytes, l->capacity);
        return l->err == 0        ? LAID_OUT
               : l->err == EBUSY ? RING_IN_USE
                                 : INIT_FAILED;
    }
    l->err = ring_init(h, PyBytes_AS_STRING(l->layout->descriptor),
                       (uint32_t)PyBytes_GET_SIZE(l->layout->descriptor),
                       (uint32_t)l->layout->data_bytes, l->capacity);
    return l->err == 0 ? LAID_OUT : INIT_FAILED;
}

/* kwargs without overwrite= (create()'s), into *fields (a new dict or
 * NULL); 0 or -1. */
static int
pop_overwrite(PyObject *kwargs, PyObject **fields, int *overwrite)
{
    *overwrite = 0;
    *fields = kwargs == NULL ? NULL : PyDict_Copy(kwargs);
    if (kwargs == NULL) {
        return 0;
    }
    if (*fields == NULL) {
        return -1;
    }
    PyObject *value = PyDict_GetItemString(*fields, "overwrite");
    if (value == NULL) {
        return 0; /* a dict of str keys: no lookup error to lose */
    }
    int ok = PyBool_Check(value);
    *overwrite = value == Py_True;
    if (!ok) {
        Py_CLEAR(*fields);
        PyErr_SetString(PyExc_TypeError,
                        "create()'s overwrite must be True or False (so no "
                        "field can be called overwrite in create())");
        return -1;
    }
    if (PyDict_DelItemString(*fields, "overwrite") < 0) {
        Py_CLEAR(*fields);
        return -1;
    }
    return 0;
}

static int
check_aligned(const Py_buffer *view)
{
    if ((uintptr_t)view->buf % 8 != 0) {
        PyErr_SetString(PyExc_ValueError,
                        "buffer must be 8-byte aligned (shared memory and "
                        "mmap buffers are)");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(SeqRing_create_doc,
"create($type, buffer, capacity, declaration=None, /, *, overwrite=False,\n"
"       **fields)\n--\n\n"
"Lay out a new, empty ring of capacity entries in a writable buffer and\n"
"return it.\n\n"
"The fields are keywords as for SeqRecord(), or a typing.NamedTuple\n"
"class.  The buffer (shared memory, an mmap) must hold\n"
"``SeqRing.buffer_size(capacity, **fields)`` bytes, 8-byte aligned; other\n"
"processes open it with SeqRing.attach().  Raises ValueError if the\n"
"buffer already holds a ring, unless overwrite=True (its readers then\n"
"see the ring rewound: RingReader.poll() raises RuntimeError).");

static PyObject *
SeqRing_create(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *decl, *fields;
    uint64_t capacity;
    int overwrite;
    if (pop_overwrite(kwargs, &fields, &overwrite) < 0) {
        return NULL;
    }
    if (ring_declaration("create", args, 2, fields, &decl) < 0
        || capacity_arg(PyTuple_GET_ITEM(args, 1), &capacity) < 0) {
        Py_XDECREF(fields);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(args, 0), &view, PyBUF_WRITABLE)
        < 0) {
        Py_XDECREF(fields);
        return NULL;
    }
    int memory_kind = buffer_memory_kind(&view);
    SeqRingObject *self = ring_alloc(type, decl, fields);
    Py_XDECREF(fields);
    if (self == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    self->view = view;
    if (memory_kind & BOUND_READ_ONLY) {
        PyErr_SetString(PyExc_TypeError,
                        "create() needs writable memory: the buffer is "
                        "mapped read-only");
        goto error;
    }
    size_t need = ring_bytes_or_error(self->layout, capacity,
                                      PyExc_ValueError);
    if (need == 0) {
        goto error;
    }
    if ((size_t)view.len < need) {
        PyErr_Format(PyExc_ValueError,
                     "buffer too small: the ring needs %zu bytes, the buffer "
                     "has %zd", need, view.len);
        goto error;
    }
    if (check_aligned(&view) < 0) {
        goto error;
    }
    bound_record guard = buffer_guard(&view, memory_kind);
    laying_out l = {view.buf, self->layout, capacity, overwrite, 0};
    int outcome;
    if (call_guarded(&guard, lay_out, &l, &outcome) < 0) {
        goto error;
    }
    switch (outcome) {
    case LAID_OUT:
        break;
    case ALREADY_A_RING:
        PyErr_SetString(PyExc_ValueError,
                        "the buffer already holds a SeqRing: attach() to "
                        "it, or create(..., overwrite=True) to lay a new one "
                        "over it");
        goto error;
    case RING_IN_USE:
        PyErr_SetString(PyExc_ValueError,
                        "create(overwrite=True): the buffer's SeqRing is "
                        "locked by a writer");
        goto error;
    default:
        errno = l.err;
        PyErr_SetFromErrno(PyExc_OSError);
        goto error;
    }
    if (bind_ring(self, view.buf, capacity, memory_kind) < 0) {
        goto error;
    }
    return (PyObject *)self;
error:
    Py_DECREF(self);
    return NULL;
}

PyDoc_STRVAR(SeqRing_attach_doc,
"attach($type, buffer, declaration=None, /, **fields)\n--\n\n"
"Open the ring that SeqRing.create() laid out in buffer.\n\n"
"Its capacity and, without fields, its fields are read from the\n"
"buffer's header once and checked as any caller's; with fields (or a\n"
"typing.NamedTuple class, whose instances poll() then returns),\n"
"ValueError if the ring's differ.  A read-only buffer gives a read-only\n"
"ring: readers poll and wait writing no byte of it; append() raises\n"
"TypeError.  The buffer is untrusted: whatever another process writes\n"
"into it, this ring stays inside it.");

static PyObject *
SeqRing_attach(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if (nargs != 1 && nargs != 2) {
        PyErr_SetString(PyExc_TypeError,
                        "attach() takes the buffer, then optionally a "
                        "typing.NamedTuple class or the fields as keywords");
        return NULL;
    }
    PyObject *decl = nargs == 2 ? no_declaration(PyTuple_GET_ITEM(args, 1))
                                : NULL;
    int given = kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0;
    if (decl != NULL && given) {
        declared_twice("attach");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(args, 0), &view, PyBUF_SIMPLE)
        < 0) {
        return NULL;
    }
    if (check_aligned(&view) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    int memory_kind = buffer_memory_kind(&view);
    bound_record guard = buffer_guard(&view, memory_kind);
    stored_ring s = {view.buf, (size_t)view.len, RING_NO_MAGIC, 0, 0, 0, 0,
                     PyMem_Malloc(MAX_STORED_LAYOUT_BYTES), 0};
    if (s.text == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    int unused;
    PyObject *fields = NULL;
    if (call_guarded(&guard, copy_stored_ring, &s, &unused) == 0) {
        if (s.mismatch != RING_MATCHES) {
            (void)ring_mismatch_error(s.mismatch, s.version, s.lock_abi);
        }
        else if (s.capacity == 0 || s.capacity > MAX_CAPACITY) {
            (void)ring_mismatch_error(RING_TOO_SMALL, 0, 0);
        }
        else if (decl != NULL || given) {
            fields = Py_NewRef(given ? kwargs : Py_None);
        }
        else {
            fields = fields_of_layout_text(s.text, s.text_len, "SeqRing");
        }
    }
    PyMem_Free(s.text);
    if (fields == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    SeqRingObject *self = ring_alloc(type, decl,
                                     fields == Py_None ? NULL : fields);
    Py_DECREF(fields);
    if (self == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    self->view = view;
    ring_check c = {view.buf, (size_t)view.len, self->layout, s.capacity,
                    RING_NO_MAGIC};
    if (call_guarded(&guard, check_ring, &c, &unused) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    if (c.mismatch != RING_MATCHES) {
        (void)ring_mismatch_error(c.mismatch, s.version, s.lock_abi);
        Py_DECREF(self);
        return NULL;
    }
    if (bind_ring(self, view.buf, s.capacity, memory_kind) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* ---- touching the ring's memory ---- */

/* *result = fn(arg) on an open ring: pinned on a free-threaded build (the
 * GIL build holds the GIL throughout), inside the SIGBUS guard if a file
 * backs the memory.  0, or -1 with ValueError (closed) or OSError (the
 * file was truncated). */
static inline int
ring_call(SeqRingObject *self, int (*fn)(void *arg), void *arg, int *result)
{
    if (record_pin_ft(&self->rec) < 0) {
        return -1;
    }
    int err = 0;
    if (SEQLOCK_LIKELY(self->rec.guarded == NULL)) {
        *result = fn(arg); /* inline: no guard's sigsetjmp() in the way */
    }
    else {
        err = call_guarded(&self->rec, fn, arg, result);
    }
    record_unpin_ft(&self->rec);
    return err;
}

typedef struct {
    const ring_view *v;
    uint64_t value;
} ring_word;

static int
load_head(void *arg)
{
    ring_word *w = arg;
    w->value = ring_head(w->v);
    return 0;
}

static int
load_lock_count(void *arg)
{
    ring_word *w = arg;
    w->value = seqcount_latch_read64(seqlock_latch(w->v->lock));
    return 0;
}

static int
load_recoveries(void *arg)
{
    ring_word *w = arg;
    w->value = atomic_load_explicit(&w->v->header->recoveries,
                                    memory_order_relaxed);
    return 0;
}

static PyObject *
ring_word_of(SeqRingObject *self, int (*fn)(void *arg))
{
    ring_word w = {&self->ring, 0};
    int unused;
    if (ring_call(self, fn, &w, &unused) < 0) {
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(w.value);
}

/* ---- append() ---- */

typedef struct {
    const ring_view *v;
    int took_over;
    const unsigned char *entry; /* words * 8 bytes */
    uint64_t n;
} appending;

static int
append_entry(void *arg)
{
    appending *a = arg;
    const ring_view *v = a->v;
    int err = ring_open_append(v, a->took_over, &a->n);
    if (err != 0) {
        return err;
    }
    /* Every word of the slot: it holds an older entry's. */
    seqlock_write_copy(ring_entry(v, a->n), a->entry,
                       v->words * SEQLOCK_WORD_SIZE);
    return ring_close_append(v, a->n, 0);
}

PyDoc_STRVAR(SeqRing_append_doc,
"append($self, /, **values)\n--\n\n"
"Append one entry and return its sequence number (0 for the first entry\n"
"ever appended, then 1, 2, ...).\n\n"
"Each keyword names a field and gives its value (as SeqRecord.update()\n"
"takes them); a field not named is 0.  The values are converted first,\n"
"then the ring's lock is taken (writers of every process serialise on\n"
"it; a writer that died holding it is taken over, its half-written\n"
"entry never delivered: recoveries counts it) and the whole entry is\n"
"written.  Never waits for a reader.  TypeError on a read-only ring.");

static PyObject *
SeqRing_append(SeqRingObject *self, PyObject *const *args, Py_ssize_t nargsf,
               PyObject *kwnames)
{
    if (PyVectorcall_NARGS(nargsf) != 0) {
        PyErr_SetString(PyExc_TypeError,
                        "append() takes the values as keywords only");
        return NULL;
    }
    if (record_is_closed(&self->rec)) {
        (void)set_record_closed(&self->rec);
        return NULL;
    }
    if (self->rec.readonly) {
        PyErr_SetString(PyExc_TypeError,
                        "the ring is read-only (attached to a read-only "
                        "buffer): it cannot be appended to");
        return NULL;
    }
    field_choice *made;
    const field_choice *choice = layout_choose(self->layout, kwnames,
                                               "append()", "ring", &made);
    if (choice == NULL) {
        return NULL;
    }
    size_t bytes = self->ring.words * SEQLOCK_WORD_SIZE;
    unsigned char stack[STACK_SNAPSHOT_BYTES];
    unsigned char *buf = scratch(stack, bytes);
    PyObject *result = NULL;
    if (buf == NULL) {
        goto done;
    }
    memset(buf, 0, bytes);
    /* Conversions run user code: none of it with the ring locked. */
    for (Py_ssize_t i = 0; i < choice->n; i++) {
        const field_spec *f = choice->chosen[i].f;
        if (field_encode_inline(f, args[i], buf + f->offset) < 0) {
            goto done;
        }
    }
    /* Pinned after the conversions: they may close the ring. */
    if (record_pin(&self->rec) < 0) {
        goto done;
    }
    lock_status taken = take_lock_word(&self->lock, -1, APPENDING_TWICE);
    if (taken > LOCK_TIMED_OUT) {
        appending a = {&self->ring, taken == LOCK_TAKEN_OVER, buf, 0};
        int err = 0;
        int failed = call_guarded(&self->rec, append_entry, &a, &err) < 0;
        if (!failed && err != 0) {
            PyErr_SetString(PyExc_RuntimeError,
                            "the ring's lock is not this thread's (its words "
                            "were rewritten?)");
            failed = 1;
        }
        if (release_lock(&self->lock) < 0) {
            failed = 1;
        }
        if (!failed) {
            result = PyLong_FromUnsignedLongLong(a.n);
        }
    }
    else if (taken == LOCK_TIMED_OUT) {
        PyErr_SetString(PyExc_TimeoutError,
                        "timed out waiting for the ring's lock");
    }
    record_unpin(&self->rec);
done:
    scratch_free(buf, stack);
    field_choice_free(made);
    return result;
}

/* ---- readers ---- */

/* A snapshot of one entry's bytes: the declared class or a named one. */
static PyObject *
entry_snapshot(SeqRingObject *ring, const unsigned char *buf)
{
    const record_layout *layout = ring->layout;
    Py_ssize_t nfields = layout->nfields;
    if (layout->all_float64) {
        return float64_snapshot(ring->snapshot_type, ring->snapshot_kind, buf,
                                nfields);
    }
    PyObject *tuple = snapshot_new(ring->snapshot_type, ring->snapshot_kind,
                                   nfields);
    if (tuple == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nfields; i++) {
        const field_spec *f = &layout->fields[i];
        PyObject *value = field_decode_inline(f, buf + f->offset);
        if (value == NULL) {
            Py_DECREF(tuple);
            return NULL;
        }
        PyTuple_SET_ITEM(tuple, i, value);
    }
    return tuple;
}

static int
reader_enter(RingReaderObject *self)
{
    int expected = 0;
    if (!atomic_compare_exchange_strong(&self->busy, &expected, 1)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the reader is in use by another thread: give each "
                        "thread its own ring.reader()");
        return -1;
    }
    return 0;
}

static void
reader_leave(RingReaderObject *self)
{
    atomic_store_explicit(&self->busy, 0, memory_order_release);
}

static int
set_rewound(void)
{
    PyErr_SetString(PyExc_RuntimeError,
                    "the ring was rewound: its head is below this reader's "
                    "place (created anew over the same buffer, or its head "
                    "overwritten); make a new reader");
    return -1;
}

/* The reader saw the ring rewound: for good (RingReaderObject.rewound). */
static void
reader_mark_rewound(RingReaderObject *self)
{
    atomic_store_explicit(&self->rewound, 1, memory_order_relaxed);
}

static int
reader_is_rewound(RingReaderObject *self)
{
    return atomic_load_explicit(&self->rewound, memory_order_relaxed);
}

PyDoc_STRVAR(RingReader_poll_doc,
"poll($self, /, max_entries=None)\n--\n\n"
"Return the entries appended since the last poll, in order, as a list of\n"
"(sequence, snapshot) pairs (snapshots named as SeqRecord.read()'s), or\n"
"an empty list.  At most capacity entries per call, and at most\n"
"max_entries (an int >= 1) if given: the rest wait for the next call.  A\n"
"reader behind by more than capacity skips to the oldest retained entry,\n"
"counting the rest in missed, as it counts an entry overwritten while it\n"
"copied it.  Never waits, writes nothing shared.  RuntimeError once the\n"
"ring was seen rewound (created anew over the same buffer, or its head\n"
"overwritten), and at every call after: the reader's place means nothing\n"
"in that ring; make a new reader.");

/* One batch of a poll(): the reader's next entries, at most max of them,
 * copied out.  Each batch loads head once (below the reader's place: the
 * ring was rewound) and reads no further than the head the first batch
 * saw, so that a writer faster than the reader cannot keep one call
 * going for ever.  A poll of one entry is one pass, inlined into poll()
 * (its call and frame were 24 instructions of a poll's 1,567). */
typedef struct {
    ring_reader *r;
    const ring_view *v;
    unsigned char *out; /* room for max entries of entry_bytes */
    uint64_t *seqs;
    size_t max, got;
    uint64_t stop;      /* the first batch's head (UINT64_MAX before it) */
    int rewound;
} polling;

static inline Py_ALWAYS_INLINE int
poll_entries(void *arg)
{
    polling *g = arg;
    ring_reader *r = g->r;
    uint64_t head = ring_head(g->v);
    if (head < r->next) {
        g->rewound = 1;
        return 0;
    }
    if (head < g->stop) {
        g->stop = head; /* not below r->next: it only grows up to it */
    }
    size_t eb = g->v->entry_bytes;
    while (g->got < g->max
           && ring_read_below(r, g->v, g->stop, g->out + g->got * eb,
                              &g->seqs[g->got])
                  == RING_ENTRY) {
        g->got++;
    }
    return 0;
}

/* max_entries: None (0 here: no bound but capacity), or an int >= 1. */
static int
poll_bound(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
           uint64_t *bound)
{
    PyObject *given = NULL;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs + nkw > 1) {
        PyErr_SetString(PyExc_TypeError,
                        "poll() takes at most one argument, max_entries");
        return -1;
    }
    if (nargs == 1) {
        given = args[0];
    }
    else if (nkw == 1) {
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0),
                                             "max_entries") != 0) {
            PyErr_Format(PyExc_TypeError,
                         "poll() got an unexpected keyword argument '%U'",
                         PyTuple_GET_ITEM(kwnames, 0));
            return -1;
        }
        given = args[0];
    }
    return max_entries_from_object(given, bound);
}

/* (seq, snapshot) */
static PyObject *
entry_pair(SeqRingObject *ring, uint64_t seq, const unsigned char *buf)
{
    PyObject *pair = PyTuple_New(2);
    if (pair == NULL) {
        return NULL;
    }
    PyObject *number = PyLong_FromUnsignedLongLong(seq);
    if (number == NULL) {
        Py_DECREF(pair);
        return NULL;
    }
    PyTuple_SET_ITEM(pair, 0, number);
    PyObject *snap = entry_snapshot(ring, buf);
    if (snap == NULL) {
        Py_DECREF(pair);
        return NULL;
    }
    PyTuple_SET_ITEM(pair, 1, snap);
    return pair;
}

/* The pairs of g's batch into list: set from index `at` if the list was
 * made that long for them (the first batch), else appended.  0, or -1
 * with an exception (a list item left NULL is safe to free). */
static int
batch_pairs(SeqRingObject *ring, PyObject *list, const polling *g,
            int preset)
{
    size_t eb = ring->ring.entry_bytes;
    for (size_t i = 0; i < g->got; i++) {
        PyObject *pair = entry_pair(ring, g->seqs[i], g->out + i * eb);
        if (pair == NULL) {
            return -1;
        }
        if (preset) {
            PyList_SET_ITEM(list, (Py_ssize_t)i, pair);
            continue;
        }
        int err = PyList_Append(list, pair);
        Py_DECREF(pair);
        if (err < 0) {
            return -1;
        }
    }
    return 0;
}

static PyObject *
RingReader_poll(RingReaderObject *self, PyObject *const *args,
                Py_ssize_t nargsf, PyObject *kwnames)
{
    SeqRingObject *ring = self->ring;
    /* At most capacity entries, and max_entries if given. */
    uint64_t limit = ring->ring.capacity;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (SEQLOCK_UNLIKELY(nargs != 0 || kwnames != NULL)) {
        uint64_t bound;
        if (poll_bound(args, nargs, kwnames, &bound) < 0) {
            return NULL;
        }
        if (bound != 0 && bound < limit) {
            limit = bound;
        }
    }
    if (reader_enter(self) < 0) {
        return NULL;
    }
    PyObject *list = NULL;
    unsigned char stack_out[STACK_SNAPSHOT_BYTES];
    uint64_t stack_seqs[POLL_STACK_ENTRIES];
    unsigned char *out = stack_out;
    uint64_t *seqs = stack_seqs;
    if (reader_is_rewound(self)) {
        (void)set_rewound();
        goto done;
    }
    /* Batches (ring->poll_first, then poll_batch entries), each copied
     * out whole before its objects are built: user code may run there
     * (the collector), and it may close the ring. */
    size_t eb = ring->ring.entry_bytes;
    size_t first = ring->poll_first;
    if (first == 0) { /* an entry larger than the stack buffer */
        first = 1;
        out = PyMem_Malloc(eb);
        if (out == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    if (limit < first) {
        first = (size_t)limit;
    }
    polling g = {&self->r, &ring->ring, out, seqs, first, 0, UINT64_MAX, 0};
    int unused;
    if (ring_call(ring, poll_entries, &g, &unused) < 0) {
        goto done;
    }
    list = PyList_New((Py_ssize_t)g.got); /* the first batch's length */
    if (list == NULL) {
        goto done;
    }
    for (int preset = 1;; preset = 0) {
        if (batch_pairs(ring, list, &g, preset) < 0) {
            Py_CLEAR(list);
            goto done;
        }
        if (g.rewound) {
            /* What this call got came before: the next call raises. */
            reader_mark_rewound(self);
            if (PyList_GET_SIZE(list) == 0) {
                Py_CLEAR(list);
                (void)set_rewound();
            }
            goto done;
        }
        uint64_t have = (uint64_t)PyList_GET_SIZE(list);
        if (g.got < g.max || have >= limit || self->r.next >= g.stop) {
            break;
        }
        size_t want = ring->poll_batch;
        if (limit - have < want) {
            want = (size_t)(limit - have);
        }
        if (seqs == stack_seqs) { /* later batches: on the heap */
            if (out != stack_out) {
                PyMem_Free(out);
            }
            out = PyMem_Malloc(ring->poll_batch * eb);
            seqs = PyMem_Malloc(ring->poll_batch * sizeof *seqs);
            if (out == NULL || seqs == NULL) {
                PyErr_NoMemory();
                Py_CLEAR(list);
                goto done;
            }
        }
        g.out = out;
        g.seqs = seqs;
        g.max = want;
        g.got = 0;
        if (ring_call(ring, poll_entries, &g, &unused) < 0) {
            Py_CLEAR(list);
            goto done;
        }
    }
done:
    if (seqs != stack_seqs) {
        PyMem_Free(seqs);
    }
    if (out != stack_out) {
        PyMem_Free(out);
    }
    reader_leave(self);
    return list;
}

PyDoc_STRVAR(RingReader_poll_one_doc,
"poll_one($self, /)\n--\n\n"
"Return the next entry this reader has not polled, as poll(1) would but\n"
"the snapshot alone (its sequence number is then self.next_sequence - 1),\n"
"or None if no entry is there yet.  Skips and counts what it was lapped\n"
"past in missed, as poll() does; RuntimeError once the ring was seen\n"
"rewound.  The cheapest way to take entries one at a time: no list and\n"
"no pair are made.  Never waits, writes nothing shared.");

static PyObject *
RingReader_poll_one(RingReaderObject *self, PyObject *const *Py_UNUSED(args),
                    Py_ssize_t nargs)
{
    if (takes_no_arguments("poll_one", nargs) < 0) {
        return NULL;
    }
    SeqRingObject *ring = self->ring;
    if (reader_enter(self) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    unsigned char stack_out[STACK_SNAPSHOT_BYTES];
    unsigned char *out = scratch(stack_out, ring->ring.entry_bytes);
    uint64_t seq;
    if (out == NULL) {
        goto done;
    }
    if (reader_is_rewound(self)) {
        (void)set_rewound();
        goto done;
    }
    /* Copied out whole before its snapshot is built, as poll()'s. */
    polling g = {&self->r, &ring->ring, out, &seq, 1, 0, UINT64_MAX, 0};
    int unused;
    if (ring_call(ring, poll_entries, &g, &unused) < 0) {
        goto done;
    }
    if (g.rewound) {
        reader_mark_rewound(self);
        (void)set_rewound();
    }
    else if (g.got == 0) {
        result = Py_NewRef(Py_None);
    }
    else {
        result = entry_snapshot(ring, out);
    }
done:
    if (out != NULL) {
        scratch_free(out, stack_out);
    }
    reader_leave(self);
    return result;
}

typedef struct {
    const ring_reader *r;
    const ring_view *v;
    uint64_t count;
    int available, rewound;
} looking;

/* ring_wait()'s look: the count, then head (ring_available()'s one load),
 * which also tells a rewind. */
static int
look(void *arg)
{
    looking *l = arg;
    l->count = seqcount_latch_read64(seqlock_latch(l->v->lock));
    uint64_t head = ring_head(l->v);
    l->available = head != l->r->next;
    l->rewound = head < l->r->next;
    return 0;
}

/* 1 once an entry (or a rewind: poll() raises) is there, 0 on timeout, -1
 * with an exception: the loop of ring_wait(), through the locking path's
 * waits (detached, signals, close(), the guard; read-only rings poll). */
static int
reader_wait(RingReaderObject *self, int64_t timeout_ns)
{
    SeqRingObject *ring = self->ring;
    ring_reader mine;
    if (reader_enter(self) < 0) {
        return -1;
    }
    mine = self->r;
    reader_leave(self);
    if (reader_is_rewound(self)) {
        return 1;
    }
    int64_t deadline = seqlock_deadline(timeout_ns);
    for (;;) {
        looking l = {&mine, &ring->ring, 0, 0, 0};
        int unused;
        if (ring_call(ring, look, &l, &unused) < 0) {
            return -1;
        }
        if (l.rewound) {
            reader_mark_rewound(self); /* before the head passes mine */
        }
        if (l.available) {
            return 1;
        }
        int64_t left = seqlock_time_left(deadline);
        if (left == 0) {
            return 0;
        }
        /* Slices: a writer that died after storing head woke nobody. */
        int64_t slice = SEQLOCK_WAITER_NAP_MS * 1000000LL;
        if (left > 0 && left < slice) {
            slice = left;
        }
        uint64_t now;
        if (wait_for_change(&ring->lock, l.count & ~(uint64_t)1, slice, NULL,
                            0, &now)
            < 0) {
            return -1;
        }
    }
}

PyDoc_STRVAR(RingReader_wait_doc,
"wait($self, /, timeout=None)\n--\n\n"
"Return True once an entry this reader has not polled is there (at once\n"
"if one is, or if the ring was rewound: poll() raises), False if timeout\n"
"seconds pass first (None: wait until then).  The thread sleeps on the\n"
"ring's sequence word (a futex: a writer in another process wakes it),\n"
"the GIL released; a read-only\n"
"ring's reader polls instead, writing nothing.  A signal's handler runs\n"
"meanwhile (Ctrl-C ends the wait); close() of the ring ends it with\n"
"ValueError.");

static PyObject *
RingReader_wait(RingReaderObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    int64_t timeout_ns;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:wait", kwlist,
                                     &timeout)
        || timeout_to_ns(timeout, &timeout_ns) < 0) {
        return NULL;
    }
    int got = reader_wait(self, timeout_ns);
    return got < 0 ? NULL : PyBool_FromLong(got);
}

PyDoc_STRVAR(RingReader_wait_async_doc,
"wait_async($self, /, timeout=None)\n--\n\n"
"A coroutine: await it for wait(timeout)'s answer without blocking the\n"
"event loop.  One watcher thread per ring sleeps for every awaited wait\n"
"on it in this process (as SeqRecord.wait_async()); cancelling the await\n"
"withdraws it at once.");

static PyObject *
RingReader_wait_async(RingReaderObject *self, PyObject *args,
                      PyObject *kwargs)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    int64_t timeout_ns;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:wait_async", kwlist,
                                     &timeout)
        || timeout_to_ns(timeout, &timeout_ns) < 0) {
        return NULL;
    }
    /* The converted timeout, never the caller's object: the Python layer
     * takes the same values as wait() (-1 for ever, a Decimal). */
    PyObject *seconds = timeout_ns_to_seconds(timeout_ns);
    if (seconds == NULL) {
        return NULL;
    }
    module_state *state = PyType_GetModuleState(Py_TYPE(self));
    PyObject *helper = state == NULL ? NULL
                                     : python_helper(&state->ring_module,
                                                     "seqlock_py._ring");
    if (helper == NULL) {
        Py_DECREF(seconds);
        return NULL;
    }
    PyObject *call[] = {helper, (PyObject *)self, seconds};
    PyObject *coroutine = PyObject_VectorcallMethod(state->wait_async_name,
                                                    call, 3, NULL);
    Py_DECREF(seconds);
    return coroutine;
}

/* The ring's own news, for seqlock_py._news (as a record's sequence, wait()
 * and _waiter()): its lock's count moves by 2 with every append, so one
 * watcher thread per ring sleeps for all of its readers' wait_async(). */

static PyObject *
SeqRing_news_since(SeqRingObject *self, PyObject *seq)
{
    return news_since(&self->lock, seq);
}

static PyObject *
SeqRing_waiter(SeqRingObject *self, PyObject *args, PyObject *kwargs)
{
    return news_waiter((PyObject *)self, &self->lock, args, kwargs);
}

static PyObject *
SeqRing_weak_waiter(SeqRingObject *self, PyObject *Py_UNUSED(ignored))
{
    return news_weak_waiter((PyObject *)self, &self->lock);
}

static PyObject *
SeqRing_get_news_sequence(SeqRingObject *self, void *Py_UNUSED(closure))
{
    return ring_word_of(self, load_lock_count);
}

static PyObject *
RingReader_get_missed(RingReaderObject *self, void *Py_UNUSED(closure))
{
    if (reader_enter(self) < 0) {
        return NULL;
    }
    uint64_t missed = self->r.missed;
    reader_leave(self);
    return PyLong_FromUnsignedLongLong(missed);
}

static PyObject *
RingReader_get_next(RingReaderObject *self, void *Py_UNUSED(closure))
{
    if (reader_enter(self) < 0) {
        return NULL;
    }
    uint64_t next = self->r.next;
    reader_leave(self);
    return PyLong_FromUnsignedLongLong(next);
}

static PyObject *
RingReader_get_ring(RingReaderObject *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->ring);
}

static int
RingReader_traverse(RingReaderObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->ring);
    return 0;
}

/* No tp_clear: a reader's one reference, its ring, stays while the reader
 * lives (every call follows it).  A cycle through a reader runs through
 * its ring, whose clear breaks it (SeqRing_clear()): code run by that
 * clear may keep the reader alive, and then finds the ring closed. */
static void
RingReader_dealloc(RingReaderObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->ring);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyObject *
RingReader_reduce(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return pickling_refused(
        self, "in another process, open the ring with "
              "SeqRing.attach_shared(name) (create_shared()'s name, passed "
              "to it) and make a reader of it there with ring.reader()");
}

static PyMethodDef RingReader_methods[] = {
    {"poll", (PyCFunction)(void (*)(void))RingReader_poll,
     METH_FASTCALL | METH_KEYWORDS, RingReader_poll_doc},
    {"poll_one", (PyCFunction)(void (*)(void))RingReader_poll_one,
     METH_FASTCALL, RingReader_poll_one_doc},
    {"wait", (PyCFunction)(void (*)(void))RingReader_wait,
     METH_VARARGS | METH_KEYWORDS, RingReader_wait_doc},
    {"wait_async", (PyCFunction)(void (*)(void))RingReader_wait_async,
     METH_VARARGS | METH_KEYWORDS, RingReader_wait_async_doc},
    {"__reduce__", RingReader_reduce, METH_NOARGS,
     PyDoc_STR("__reduce__($self, /)\n--\n\n"
               "Raise TypeError: a reader cannot be pickled or copied.")},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef RingReader_getset[] = {
    {"missed", (getter)RingReader_get_missed, NULL,
     PyDoc_STR("Entries this reader was lapped past: overwritten before it "
               "could copy them, or while it did.  Every sequence number "
               "from the reader's start is delivered by poll() once or "
               "counted here once."), NULL},
    {"next_sequence", (getter)RingReader_get_next, NULL,
     PyDoc_STR("The sequence number of the next entry this reader wants."),
     NULL},
    {"ring", (getter)RingReader_get_ring, NULL,
     PyDoc_STR("The SeqRing this reader follows."), NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(RingReader_doc,
"A reader of a SeqRing: ring.reader() makes one.\n\n"
"Its place (the next sequence number it wants) and its missed count are\n"
"its own, in this process's memory: it writes nothing the ring shares.\n"
"One thread at a time uses a reader (RuntimeError otherwise).");

static PyType_Slot RingReader_slots[] = {
    {Py_tp_dealloc, RingReader_dealloc},
    {Py_tp_traverse, RingReader_traverse},
    {Py_tp_methods, RingReader_methods},
    {Py_tp_getset, RingReader_getset},
    {Py_tp_doc, (void *)RingReader_doc},
    {0, NULL},
};

PyType_Spec ring_reader_type_spec = {
    .name = "seqlock_py.RingReader",
    .basicsize = sizeof(RingReaderObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
             | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = RingReader_slots,
};

typedef struct {
    ring_reader *r;
    const ring_view *v;
    uint64_t count;
    int from_oldest;
} starting;

static int
start_reader(void *arg)
{
    starting *s = arg;
    if (s->from_oldest < 0) {
        ring_reader_init_last(s->r, s->v, s->count);
    }
    else {
        ring_reader_init(s->r, s->v, s->from_oldest);
    }
    return 0;
}

PyDoc_STRVAR(SeqRing_reader_doc,
"reader($self, /, *, oldest=False)\n--\n\n"
"A new RingReader whose first entry is the next one appended, or, with\n"
"oldest=True, the oldest entry the ring still holds.");

static PyObject *
SeqRing_reader(SeqRingObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"oldest", NULL};
    int oldest = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$p:reader", kwlist,
                                     &oldest)) {
        return NULL;
    }
    module_state *state = PyType_GetModuleState(Py_TYPE(self));
    if (state == NULL) {
        return NULL;
    }
    RingReaderObject *reader = PyObject_GC_New(RingReaderObject,
                                               state->ring_reader_type);
    if (reader == NULL) {
        return NULL;
    }
    reader->ring = (SeqRingObject *)Py_NewRef(self);
    atomic_init(&reader->busy, 0);
    atomic_init(&reader->rewound, 0);
    memset(&reader->r, 0, sizeof reader->r);
    PyObject_GC_Track(reader);
    starting s = {&reader->r, &self->ring, 0, oldest};
    int unused;
    if (ring_call(self, start_reader, &s, &unused) < 0) {
        Py_DECREF(reader);
        return NULL;
    }
    return (PyObject *)reader;
}

/* ---- read_last(): the newest entries into a numpy array ---- */

typedef struct {
    const ring_view *v;
    uint64_t n;
    unsigned char *out; /* n entries of entry_bytes */
    uint64_t first, got;
    int rewound;
} last_entries;

/* The newest n entries, oldest first; an entry missed (overwritten while
 * copied) drops what came before it, so what is kept is consecutive. */
static int
read_last_entries(void *arg)
{
    last_entries *l = arg;
    ring_reader r;
    ring_reader_init_last(&r, l->v, l->n);
    l->got = 0;
    uint64_t end = r.next + l->n; /* at most n: later appends are not ours */
    size_t eb = l->v->entry_bytes;
    while (r.next < end && l->got < l->n) {
        uint64_t seq, missed = r.missed;
        int found = ring_read_next(&r, l->v, l->out + l->got * eb, &seq);
        if (found == RING_REWOUND) {
            l->rewound = 1;
            return 0;
        }
        if (found == RING_NOTHING) {
            break;
        }
        if (l->got != 0 && r.missed != missed) {
            /* a gap: keep the consecutive rest, from this entry on */
            memmove(l->out, l->out + l->got * eb, eb);
            l->got = 0;
        }
        if (l->got == 0) {
            l->first = seq;
        }
        l->got++;
        if (seq + 1 >= end) {
            break;
        }
    }
    return 0;
}

PyDoc_STRVAR(SeqRing_read_last_doc,
"read_last($self, n, /, out=None)\n--\n\n"
"Return (first, array): the newest entries, at most n (and at most\n"
"capacity), oldest first, as a numpy structured array of self.dtype,\n"
"and the sequence number of its first row; row i is entry first + i.\n\n"
"Fewer rows than n if fewer entries were appended, or if the writers\n"
"overwrote some while they were copied (those, the oldest, are dropped:\n"
"the rows stay consecutive).  out: a C-contiguous array of self.dtype\n"
"with at least n rows, filled from row 0 (the array returned is out's\n"
"first rows), not a view of a record or ring this process has open\n"
"(ValueError); else a new one.  One call, never waits, writes nothing\n"
"shared.  It has no place of its own: it reads the ring as it is now,\n"
"and raises RuntimeError only if the head goes back (the ring rewound)\n"
"while it copies.");

/* After out's buffer was refused: a non-buffer's TypeError and a
 * read-only one's (numpy's ValueError, bytes' BufferError) say which out
 * to give; any other exception (user code's, say) is left as it is. */
static void
refuse_out_buffer(PyObject *out)
{
    if (PyErr_ExceptionMatches(PyExc_TypeError)
        && !PyObject_CheckBuffer(out)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "read_last()'s out must be an array of ring.dtype "
                     "(numpy.empty(n, ring.dtype)), not %.100s",
                     Py_TYPE(out)->tp_name);
        return;
    }
    PyObject *type = PyErr_ExceptionMatches(PyExc_BufferError)
                         ? PyExc_BufferError
                     : PyErr_ExceptionMatches(PyExc_ValueError)
                         ? PyExc_ValueError
                         : NULL;
    if (type == NULL) {
        return;
    }
    PyObject *exc = PyErr_GetRaisedException();
    PyErr_Format(type,
                 "read_last()'s out must be a writable array of ring.dtype "
                 "(numpy.empty(n, ring.dtype)): %S", exc);
    PyObject *mine = PyErr_GetRaisedException();
    if (mine != NULL) {
        PyException_SetCause(mine, exc); /* steals exc */
        PyErr_SetRaisedException(mine);
    }
    else {
        Py_DECREF(exc);
    }
}

static PyObject *
SeqRing_read_last(SeqRingObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"", "out", NULL};
    Py_ssize_t n;
    PyObject *out = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n|O:read_last", kwlist,
                                     &n, &out)) {
        return NULL;
    }
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "n must not be negative");
        return NULL;
    }
    if (record_is_closed(&self->rec)) { /* before numpy is asked for */
        (void)set_record_closed(&self->rec);
        return NULL;
    }
    if ((uint64_t)n > self->ring.capacity) {
        n = (Py_ssize_t)self->ring.capacity;
    }
    PyObject *array;
    if (out == Py_None) {
        PyObject *dtype = layout_dtype(self->layout);
        PyObject *numpy = dtype == NULL ? NULL
                                        : PyImport_ImportModule("numpy");
        array = numpy == NULL ? NULL
                              : PyObject_CallMethod(numpy, "zeros", "nO", n,
                                                    dtype);
        Py_XDECREF(numpy);
        Py_XDECREF(dtype);
    }
    else {
        array = Py_NewRef(out);
    }
    if (array == NULL) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(array, &view, PyBUF_RECORDS) < 0) {
        refuse_out_buffer(array);
        Py_DECREF(array);
        return NULL;
    }
    size_t eb = self->ring.entry_bytes;
    PyObject *result = NULL;
    /* One row per entry: the rows returned are out[:got]. */
    if (view.ndim != 1 || (size_t)view.itemsize != eb) {
        PyErr_Format(PyExc_TypeError,
                     "read_last()'s out must be a one-dimensional array "
                     "of ring.dtype (numpy.empty(n, ring.dtype)): this one "
                     "has %d dimensions of %zd-byte items, an entry is %zu "
                     "bytes", view.ndim, view.itemsize, eb);
        goto done;
    }
    if (!PyBuffer_IsContiguous(&view, 'C')) {
        PyErr_SetString(PyExc_ValueError,
                        "read_last()'s out must be C-contiguous: this one "
                        "is strided (give numpy.empty(n, ring.dtype))");
        goto done;
    }
    if (buffer_fits_record(self->layout, &view) < 0) {
        /* its message is read_into()'s advice */
        PyErr_Format(PyExc_TypeError,
                     "read_last()'s out must be an array of ring.dtype "
                     "(numpy.empty(n, ring.dtype)): its items have format "
                     "'%s', not the ring's %R",
                     view.format == NULL ? "B" : view.format,
                     self->layout->format);
        goto done;
    }
    if ((size_t)view.len < (size_t)n * eb) {
        PyErr_Format(PyExc_ValueError,
                     "read_last()'s out has room for %zd entries, %zd "
                     "asked for: give numpy.empty(%zd, ring.dtype), or ask "
                     "for fewer", (Py_ssize_t)((size_t)view.len / eb), n, n);
        goto done;
    }
    if (Py_TYPE(array)->tp_as_mapping == NULL
        || Py_TYPE(array)->tp_as_mapping->mp_subscript == NULL) {
        /* the rows returned are out[:got]: refused before it is filled */
        PyErr_Format(PyExc_TypeError,
                     "read_last()'s out must be an array of ring.dtype "
                     "(numpy.empty(n, ring.dtype)) or a memoryview of one: "
                     "%.100s cannot be sliced into its rows",
                     Py_TYPE(array)->tp_name);
        goto done;
    }
    if (refuse_open_memory("read_last()", view.buf, (size_t)n * eb) < 0) {
        goto done;
    }
    last_entries l = {&self->ring, (uint64_t)n, view.buf, 0, 0, 0};
    int unused;
    if (ring_call(self, read_last_entries, &l, &unused) < 0) {
        goto done;
    }
    if (l.rewound) {
        set_rewound();
        goto done;
    }
    if (l.got == 0) {
        l.first = 0;
        PyObject *head = ring_word_of(self, load_head);
        if (head == NULL) {
            goto done;
        }
        l.first = PyLong_AsUnsignedLongLong(head);
        Py_DECREF(head);
    }
    PyObject *stop = PyLong_FromUnsignedLongLong(l.got);
    PyObject *rows = stop == NULL ? NULL : PySlice_New(NULL, stop, NULL);
    PyObject *part = rows == NULL ? NULL : PyObject_GetItem(array, rows);
    Py_XDECREF(stop);
    Py_XDECREF(rows);
    if (part != NULL) {
        result = Py_BuildValue("(KN)", (unsigned long long)l.first, part);
    }
done:
    PyBuffer_Release(&view);
    Py_DECREF(array);
    return result;
}

/* ---- close() ---- */

static int
SeqRing_traverse(SeqRingObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->snapshot_type);
    Py_VISIT(self->closer);
    if (self->view.obj != NULL
        && (!PyMemoryView_Check(self->view.obj)
            || gc_may_clear_exported_memoryviews())) {
        Py_VISIT(self->view.obj);
    }
    return 0;
}

/* As SeqRecord_clear(): closed before the release, whose code may keep
 * the ring (or a reader of it) alive. */
static int
SeqRing_clear(SeqRingObject *self)
{
    /* The watcher may sleep in the memory, holding no reference. */
    unheld_let_go(&self->lock, !record_is_closed(&self->rec));
    if (self->view.obj != NULL) {
        record_memory_gone(&self->rec, &self->lock, &self->view);
    }
    Py_CLEAR(self->closer); /* after: its shared memory may close now */
    return 0;
}

/* Wait, detached, until no thread is inside a call that touches the
 * ring, waking its waiters meanwhile.  0 if none is; 1 if one is on this
 * thread (a signal handler inside a wait); -1 with OSError. */
static int
wait_until_unused(SeqRingObject *self)
{
    int64_t nap_ns = 20 * 1000;
    for (;;) {
        int where = in_use_where(&self->rec);
        if (where == IN_USE_UNKNOWN) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        if (where == IN_USE_HERE) {
            return 1;
        }
        if (where == IN_USE_NOWHERE) {
            return 0;
        }
        seqlock_wake_waiters(self->ring.lock);
        struct timespec nap = {0, (long)nap_ns};
        Py_BEGIN_ALLOW_THREADS
        (void)nanosleep(&nap, NULL);
        Py_END_ALLOW_THREADS
        nap_ns = nap_ns < 5 * 1000 * 1000 ? 2 * nap_ns : nap_ns;
    }
}

PyDoc_STRVAR(SeqRing_close_doc,
"close($self, /)\n--\n\n"
"Release the ring's buffer (create()'s or attach()'s export ends).\n\n"
"Later calls of the ring and of its readers raise ValueError; a call\n"
"running in another thread finishes first (a wait ends with ValueError).\n"
"Closing a closed ring does nothing.  BufferError, leaving it open, if\n"
"called inside one of the ring's own calls on this thread.");

static PyObject *
SeqRing_close(SeqRingObject *self, PyObject *Py_UNUSED(ignored))
{
    bound_record *r = &self->rec;
    if (!claim_close(r)) {
        Py_RETURN_NONE; /* closed already */
    }
    int use = wait_until_unused(self);
    if (use != 0) {
        atomic_store_explicit(&r->closed, RECORD_OPEN, memory_order_release);
        if (use > 0) {
            PyErr_SetString(PyExc_BufferError,
                            "cannot close the ring inside one of its own "
                            "calls on this thread (a signal handler run "
                            "during a wait?)");
        }
        return NULL;
    }
    record_memory_gone(r, &self->lock, &self->view);
    return finish_close(r, &self->closer);
}

static PyObject *
SeqRing_close_with(SeqRingObject *self, PyObject *closer)
{
    return set_closer(&self->rec, &self->closer, closer);
}

#define RING_SHARED_USAGE \
    "the shared memory's name, the capacity, then a NamedTuple class or " \
    "the fields as keywords"

PyDoc_STRVAR(SeqRing_create_shared_doc,
"create_shared($type, name, capacity, declaration=None, /, **fields)\n--\n\n"
"Create the named shared memory block name, as large as buffer_size()\n"
"says, lay a new ring of capacity entries out in it (as create() does)\n"
"and return the ring, which owns the block: its close() (or with block)\n"
"closes the block and unlinks its name.  The block gets its name only\n"
"once laid out (on Linux): an opener finds no block or a whole one.\n"
"FileExistsError if the name exists (no overwrite=: unlink a stale block\n"
"first), ValueError if it is not ASCII, MemoryError if /dev/shm has not\n"
"that much free.  Other processes open it with\n"
"SeqRing.attach_shared(name).  If this process exits without close(),\n"
"the standard library's resource tracker unlinks the name at its exit\n"
"(the block lives on while others map it).");

static PyObject *
SeqRing_create_shared(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    return call_shared("create_shared", type, args, kwargs, 2, 3,
                       RING_SHARED_USAGE);
}

PyDoc_STRVAR(SeqRing_attach_shared_doc,
"attach_shared($type, name, declaration=None, /, **fields)\n--\n\n"
"Open the ring that SeqRing.create_shared(name) made, as attach() does\n"
"(capacity, and the layout unless given, from the block's header).  The\n"
"ring owns its mapping: close() (or a with block) closes it, never\n"
"unlinking the name,\n"
"and the standard library's resource tracker is kept out, so this\n"
"process's exit never unlinks the block under the others.\n"
"FileNotFoundError if the name does not exist (create_shared() names a\n"
"block once it is laid out), ValueError if the block holds no ring.");

static PyObject *
SeqRing_attach_shared(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    return call_shared("attach_shared", type, args, kwargs, 1, 2,
                       "the shared memory's name, then a NamedTuple class "
                       "or the fields as keywords (or neither)");
}

static PyObject *
SeqRing_reduce(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return pickling_refused(
        self, "to use a ring in another process, make it with "
              "SeqRing.create_shared(name, capacity, ...), pass the name, "
              "and open it there with SeqRing.attach_shared(name)");
}

static PyObject *
SeqRing_enter(SeqRingObject *self, PyObject *Py_UNUSED(ignored))
{
    if (record_is_closed(&self->rec)) {
        (void)set_record_closed(&self->rec);
        return NULL;
    }
    return Py_NewRef(self);
}

static PyObject *
SeqRing_exit(SeqRingObject *self, PyObject *const *Py_UNUSED(args),
             Py_ssize_t Py_UNUSED(nargs))
{
    PyObject *done = SeqRing_close(self, NULL);
    if (done == NULL) {
        return NULL;
    }
    Py_DECREF(done);
    Py_RETURN_FALSE;
}

static void
SeqRing_dealloc(SeqRingObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    unheld_let_go(&self->lock, !record_is_closed(&self->rec));
    /* No thread of ours holds the lock: a holder keeps the ring alive. */
    if (self->ring.header != NULL) {
        bound_lock_fini(&self->lock);
    }
    (void)SeqRing_clear(self);
    open_memory_remove(&self->rec);
    if (self->memory != NULL) {
        if (self->ring.header != NULL) {
            seqlock_destroy(self->ring.lock);
        }
        PyMem_Free(self->memory);
    }
    if (self->layout != NULL) {
        layout_free(self->layout);
    }
    Py_XDECREF(self->snapshot_type);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

/* ---- attributes ---- */

static PyObject *
SeqRing_get_head(SeqRingObject *self, void *Py_UNUSED(closure))
{
    return ring_word_of(self, load_head);
}

static PyObject *
SeqRing_get_recoveries(SeqRingObject *self, void *Py_UNUSED(closure))
{
    return ring_word_of(self, load_recoveries);
}

static PyObject *
SeqRing_get_capacity(SeqRingObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(self->ring.capacity);
}

static PyObject *
SeqRing_get_fields(SeqRingObject *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->layout->names);
}

static PyObject *
SeqRing_get_format(SeqRingObject *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->layout->format);
}

static PyObject *
SeqRing_get_dtype(SeqRingObject *self, void *Py_UNUSED(closure))
{
    return layout_dtype(self->layout);
}

static PyObject *
SeqRing_get_nbytes(SeqRingObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSize_t(self->layout->data_bytes);
}

static PyObject *
SeqRing_get_readonly(SeqRingObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->rec.readonly);
}

static PyObject *
SeqRing_get_closed(SeqRingObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(record_is_closed(&self->rec));
}

static PyObject *
SeqRing_repr(SeqRingObject *self)
{
    return PyUnicode_FromFormat(
        "<%s capacity=%llu fields=%R%s%s%s>", Py_TYPE(self)->tp_name,
        (unsigned long long)self->ring.capacity, self->layout->names,
        self->memory == NULL ? " in a buffer" : "",
        self->rec.readonly ? " (read-only)" : "",
        record_is_closed(&self->rec) ? " (closed)" : "");
}

static PyMethodDef SeqRing_methods[] = {
    {"create", (PyCFunction)(void (*)(void))SeqRing_create,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS, SeqRing_create_doc},
    {"attach", (PyCFunction)(void (*)(void))SeqRing_attach,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS, SeqRing_attach_doc},
    {"buffer_size", (PyCFunction)(void (*)(void))SeqRing_buffer_size,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS, SeqRing_buffer_size_doc},
    {"append", (PyCFunction)(void (*)(void))SeqRing_append,
     METH_FASTCALL | METH_KEYWORDS, SeqRing_append_doc},
    {"reader", (PyCFunction)(void (*)(void))SeqRing_reader,
     METH_VARARGS | METH_KEYWORDS, SeqRing_reader_doc},
    {"read_last", (PyCFunction)(void (*)(void))SeqRing_read_last,
     METH_VARARGS | METH_KEYWORDS, SeqRing_read_last_doc},
    {"create_shared", (PyCFunction)(void (*)(void))SeqRing_create_shared,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS, SeqRing_create_shared_doc},
    {"attach_shared", (PyCFunction)(void (*)(void))SeqRing_attach_shared,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS, SeqRing_attach_shared_doc},
    {"close", (PyCFunction)SeqRing_close, METH_NOARGS, SeqRing_close_doc},
    {"_close_with", (PyCFunction)SeqRing_close_with, METH_O,
     PyDoc_STR("_close_with($self, closer, /)\n--\n\n"
               "Have close() call closer() after it lets the buffer go "
               "(seqlock_py._shared).")},
    {"_news_since", (PyCFunction)SeqRing_news_since, METH_O,
     NEWS_SINCE_DOC},
    {"_waiter", (PyCFunction)(void (*)(void))SeqRing_waiter,
     METH_VARARGS | METH_KEYWORDS,
     PyDoc_STR("_waiter($self, /, seq, timeout=None)\n--\n\n"
               "A cancellable wait on the ring's lock count: for "
               "seqlock_py._news.")},
    {"_weak_waiter", (PyCFunction)SeqRing_weak_waiter, METH_NOARGS,
     NEWS_WEAK_WAITER_DOC},
    {"__enter__", (PyCFunction)SeqRing_enter, METH_NOARGS,
     PyDoc_STR("__enter__($self, /)\n--\n\nReturn the ring (ValueError if "
               "it is closed).")},
    {"__exit__", (PyCFunction)(void (*)(void))SeqRing_exit, METH_FASTCALL,
     PyDoc_STR("__exit__($self, exc_type, exc_value, traceback, /)\n--\n\n"
               "close() the ring.")},
    {"__reduce__", SeqRing_reduce, METH_NOARGS,
     PyDoc_STR("__reduce__($self, /)\n--\n\n"
               "Raise TypeError: a ring cannot be pickled or copied.")},
    {"__class_getitem__", Py_GenericAlias, METH_O | METH_CLASS,
     PyDoc_STR("SeqRing[Tick] in annotations: a ring whose readers return "
               "Tick (see PEP 585).")},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef SeqRing_getset[] = {
    {"head", (getter)SeqRing_get_head, NULL,
     PyDoc_STR("Entries ever appended: the sequence number of the next."),
     NULL},
    {"capacity", (getter)SeqRing_get_capacity, NULL,
     PyDoc_STR("Entries the ring retains."), NULL},
    {"recoveries", (getter)SeqRing_get_recoveries, NULL,
     PyDoc_STR("Entries a dead writer left half written: discarded, never "
               "delivered."), NULL},
    {"fields", (getter)SeqRing_get_fields, NULL,
     PyDoc_STR("The field names, in order."), NULL},
    {"format", (getter)SeqRing_get_format, NULL,
     PyDoc_STR("The native struct format of one entry."), NULL},
    {"dtype", (getter)SeqRing_get_dtype, NULL,
     PyDoc_STR("A numpy structured dtype of one entry (read_last()'s rows; "
               "imports numpy)."), NULL},
    {"nbytes", (getter)SeqRing_get_nbytes, NULL,
     PyDoc_STR("Bytes in one entry: struct.calcsize(self.format)."), NULL},
    {"readonly", (getter)SeqRing_get_readonly, NULL,
     PyDoc_STR("True if attached to memory this process may only read."),
     NULL},
    {"closed", (getter)SeqRing_get_closed, NULL,
     PyDoc_STR("True once close() has been called."), NULL},
    {"_news_sequence", (getter)SeqRing_get_news_sequence, NULL,
     PyDoc_STR("The ring's lock count (odd during an append): for "
               "seqlock_py._news."), NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef SeqRing_members[] = {
    {"__weaklistoffset__", Py_T_PYSSIZET,
     offsetof(SeqRingObject, weakreflist), Py_READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

PyDoc_STRVAR(SeqRing_doc,
"SeqRing(capacity, declaration=None, /, **fields)\n--\n\n"
"A broadcast ring of capacity entries that share one record layout.\n\n"
"The fields are declared as for SeqRecord (keywords of struct codes, or\n"
"a typing.NamedTuple class).  append(**values) adds an entry under the\n"
"next sequence number (0, 1, 2, ...), overwriting the oldest once the\n"
"ring is full; writers serialise on the ring's lock.  Each\n"
"ring.reader() follows at its own pace: poll() returns every entry since\n"
"its last poll, in order, and an entry the writers overwrote before the\n"
"reader copied it is counted in reader.missed, never returned torn.\n"
"Readers never wait for a writer, never slow one and write nothing\n"
"shared.  SeqRing.create/attach put a ring in memory shared between\n"
"processes.  The ring's memory is zeroed, all of it, at construction: a\n"
"capacity beyond the machine's RAM and swap raises MemoryError, naming\n"
"the bytes, before anything is allocated.");

static PyType_Slot SeqRing_slots[] = {
    {Py_tp_new, SeqRing_new},
    {Py_tp_dealloc, SeqRing_dealloc},
    {Py_tp_traverse, SeqRing_traverse},
    {Py_tp_clear, SeqRing_clear},
    {Py_tp_repr, SeqRing_repr},
    {Py_tp_methods, SeqRing_methods},
    {Py_tp_getset, SeqRing_getset},
    {Py_tp_members, SeqRing_members},
    {Py_tp_doc, (void *)SeqRing_doc},
    {0, NULL},
};

PyType_Spec seqring_type_spec = {
    .name = "seqlock_py.SeqRing",
    .basicsize = sizeof(SeqRingObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = SeqRing_slots,
};
