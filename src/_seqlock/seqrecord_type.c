/*
 * seqrecord_type.c - SeqRecord: numeric fields held in C inside a seqlock.
 *
 * The numbers live in seqlock words (record.h), in memory the record owns
 * or in a caller's buffer shared between processes.  A reader copies the
 * words it needs with the lock-free protocol into private memory and only
 * then builds Python objects, so readers write nothing the record shares:
 * on a free-threaded build they scale with cores when each thread calls
 * through its own bound method.  (A call through a name all threads share,
 * rec.read() on a global or self.rec, writes the record object's reference
 * count: the interpreter's doing, and README's Benchmarks measure it.)
 *
 * Writes go through one write section each (update(), or the RecordWriter
 * that write() returns: record_writer.c), which changes copy 0 while
 * readers read copy 1 (record.h): a section that raises is rolled back,
 * and one whose process died is undone by the next writer, so readers only
 * ever see complete writes, and never wait for them.
 */
#include "seqrecord.h"

#include "args.h"
#include "memory_kind.h"
#include "news.h"
#include "open_memory.h"
#include "own_memory.h"
#include "reader_into.h"
#include "snapshot.h"
#include "unheld.h"

#include <errno.h>
#include <time.h>

/* ---- construction ---- */

/* A declaration's layout: of the typing.NamedTuple class decl if not
 * NULL, else of the fields given as keywords. */
record_layout *
declared_layout(PyTypeObject *type, PyObject *decl, PyObject *fields)
{
    if (decl == NULL) {
        return layout_from_kwargs(fields);
    }
    module_state *state = PyType_GetModuleState(type);
    PyObject *typed = state == NULL ? NULL : declared_fields(state, decl);
    if (typed == NULL) {
        return NULL;
    }
    record_layout *layout = layout_from_kwargs(typed);
    Py_DECREF(typed);
    return layout;
}

/* A positional declaration: NULL for None (the signatures' default). */
PyObject *
no_declaration(PyObject *decl)
{
    return decl == Py_None ? NULL : decl;
}

/* TypeError for a declaration given both ways; -1. */
int
declared_twice(const char *method)
{
    PyErr_Format(PyExc_TypeError,
                 "%s() takes a typing.NamedTuple class or the fields as "
                 "keywords, not both", method);
    return -1;
}

int
refuse_buffer(const char *type, PyObject *obj, const char *create_args)
{
    if (obj == NULL || PyType_Check(obj) || !PyObject_CheckBuffer(obj)) {
        return 0;
    }
    PyErr_Format(PyExc_TypeError,
                 "%s() takes no buffer (it makes memory of its own): "
                 "%s.create(%s) lays a new one out in a buffer, "
                 "%s.attach(buffer) opens one laid out there",
                 type, type, create_args, type);
    return -1;
}

int
typed_layout(PyTypeObject *type, PyObject *decl, PyObject *fields,
             record_layout **layout, PyTypeObject **snapshot_type)
{
    module_state *state = PyType_GetModuleState(type);
    if (state == NULL || (*layout = declared_layout(type, decl, fields)) == NULL) {
        return -1;
    }
    *snapshot_type = snapshot_class(state, *layout, decl);
    if (*snapshot_type == NULL) {
        layout_free(*layout);
        return -1;
    }
    return 0;
}

static SeqRecordObject *
record_alloc(PyTypeObject *type, PyObject *decl, PyObject *fields)
{
    record_layout *layout;
    PyTypeObject *snapshot_type;
    if (typed_layout(type, decl, fields, &layout, &snapshot_type) < 0) {
        return NULL;
    }
    SeqRecordObject *self = (SeqRecordObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(snapshot_type);
        layout_free(layout);
        return NULL;
    }
    self->layout = layout;
    self->snapshot_type = snapshot_type;
    self->snapshot_kind = snapshot_kind(snapshot_type);
    defer_refcount((PyObject *)self);
    return self;
}

static size_t
layout_record_size(const record_layout *layout)
{
    return record_size((size_t)PyBytes_GET_SIZE(layout->descriptor),
                       layout->data_bytes);
}

/* Point the record at its memory, with the geometry of its own layout,
 * and bind its lock.  memory_kind: bound_lock_init()'s (a lock in private
 * memory is repaired in a fork's child; one in shared memory never is).
 * 0, or -1 with MemoryError (the memory cannot join the open memory). */
static int
bind_memory(SeqRecordObject *self, void *memory, int memory_kind)
{
    if (record_memory_opened(&self->rec, memory,
                             layout_record_size(self->layout)) < 0) {
        return -1;
    }
    self->rec.view = record_view_of(
        memory, (size_t)PyBytes_GET_SIZE(self->layout->descriptor),
        self->layout->data_bytes);
    self->rec.readonly = (memory_kind & BOUND_READ_ONLY) != 0;
    self->rec.guarded = NULL;
    self->rec.guarded_len = 0;
    if ((memory_kind & BOUND_FILE) && bus_guard_install() == 0
        && bus_guard_reassert() == 0) {
        self->rec.guarded = memory;
        self->rec.guarded_len = layout_record_size(self->layout);
    }
    bound_lock_init(&self->lock, self->rec.view.lock, &self->rec,
                    (PyObject *)self, memory_kind);
    return 0;
}

/* record_init()'s error as an exception. */
static void
record_init_failed(int err)
{
    errno = err;
    PyErr_SetFromErrno(PyExc_OSError);
}

static PyObject *
SeqRecord_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    PyObject *decl = nargs == 1 ? no_declaration(PyTuple_GET_ITEM(args, 0))
                                : NULL;
    if (nargs >= 1
        && refuse_buffer("SeqRecord", PyTuple_GET_ITEM(args, 0),
                         "buffer, **fields") < 0) {
        return NULL;
    }
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError,
                        "SeqRecord() takes a typing.NamedTuple class or the "
                        "fields as keywords, e.g. SeqRecord(Pose) or "
                        "SeqRecord(x='d', n='q')");
        return NULL;
    }
    if (decl != NULL && kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        declared_twice("SeqRecord");
        return NULL;
    }
    SeqRecordObject *self = record_alloc(type, decl, kwargs);
    if (self == NULL) {
        return NULL;
    }
    size_t size = layout_record_size(self->layout);
    self->memory = own_memory_alloc(size, "SeqRecord(...)",
                                    "give fewer or smaller fields");
    if (self->memory == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    int err = record_init(self->memory,
                          PyBytes_AS_STRING(self->layout->descriptor),
                          (uint32_t)PyBytes_GET_SIZE(self->layout->descriptor),
                          (uint32_t)self->layout->data_bytes);
    if (err != 0) {
        PyMem_Free(self->memory);
        self->memory = NULL;
        Py_DECREF(self);
        record_init_failed(err);
        return NULL;
    }
    if (bind_memory(self, self->memory, BOUND_PRIVATE) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void
buffer_too_small(const record_layout *layout, Py_ssize_t len)
{
    PyErr_Format(PyExc_ValueError,
                 "buffer too small: the record needs %zu bytes, the buffer "
                 "has %zd", layout_record_size(layout), len);
}

/* What attach() found in a buffer's header, copied out of the shared
 * memory once (under the guard, if a file backs it): the messages below
 * quote these copies, never the memory. */
#define QUOTED_LAYOUT_BYTES 200

typedef struct {
    const record_header *h;
    size_t len;
    const record_layout *layout;
    enum record_mismatch mismatch;
    uint32_t version, lock_abi, data_bytes;
    size_t quoted; /* bytes of layout text in quote */
    char quote[QUOTED_LAYOUT_BYTES];
} header_check;

static int
check_header(void *arg)
{
    header_check *c = arg;
    const record_layout *layout = c->layout;
    const volatile record_header *h = c->h;
    c->mismatch = record_matches(
        c->h, c->len, PyBytes_AS_STRING(layout->descriptor),
        (uint32_t)PyBytes_GET_SIZE(layout->descriptor),
        (uint32_t)layout->data_bytes);
    if (c->len >= offsetof(record_header, version) + sizeof h->version) {
        c->version = h->version;
    }
    if (c->len >= RECORD_HEADER_SIZE) {
        c->lock_abi = h->lock_abi;
        c->data_bytes = h->data_bytes;
        /* The found layout text, only the part inside the buffer: its
         * layout_bytes is the other record's, not ours, read once. */
        size_t room = c->len - RECORD_HEADER_SIZE;
        size_t found = h->layout_bytes;
        size_t n = found < room ? found : room;
        c->quoted = n < QUOTED_LAYOUT_BYTES ? n : QUOTED_LAYOUT_BYTES;
        memcpy(c->quote, record_layout_text(c->h), c->quoted);
    }
    return 0;
}

/* The ValueError for what check_header() found (c.mismatch is not
 * RECORD_MATCHES); -1. */
static int
mismatch_error(const header_check *c)
{
    const record_layout *layout = c->layout;
    switch (c->mismatch) {
    case RECORD_NO_MAGIC:
        PyErr_SetString(PyExc_ValueError,
                        "the buffer holds no SeqRecord (no magic number): "
                        "it is other memory, or a record overwritten");
        return -1;
    case RECORD_OTHER_VERSION:
        PyErr_Format(PyExc_ValueError,
                     "the buffer holds a SeqRecord of layout version %u; "
                     "this seqlock_py reads version %u only (create() the "
                     "record anew with one version throughout)",
                     c->version, RECORD_VERSION);
        return -1;
    case RECORD_TOO_SMALL:
        if (layout != NULL) {
            buffer_too_small(layout, (Py_ssize_t)c->len);
        }
        else {
            PyErr_SetString(PyExc_ValueError,
                            "buffer too small for the record its header "
                            "describes");
        }
        return -1;
    case RECORD_BROKEN_LOCK:
        PyErr_SetString(PyExc_ValueError,
                        "the buffer's SeqRecord has no working lock word "
                        "(overwritten, or not laid out by create())");
        return -1;
    case RECORD_OTHER_LOCK_ABI:
        PyErr_Format(PyExc_ValueError,
                     "the buffer's SeqRecord was created by a build with "
                     "another C library, word size or lock layout (lock ABI 0x%x, this "
                     "build 0x%x): processes sharing a record must agree",
                     c->lock_abi, RECORD_LOCK_ABI);
        return -1;
    default: {
        if (c->quoted == (size_t)PyBytes_GET_SIZE(layout->descriptor)
            && memcmp(c->quote, PyBytes_AS_STRING(layout->descriptor),
                      c->quoted) == 0) {
            /* The same text: the header's data size is what differs. */
            PyErr_Format(PyExc_ValueError,
                         "the buffer's SeqRecord header gives a data size of "
                         "%u bytes, its layout text %R needs %zu "
                         "(overwritten?)", c->data_bytes, layout->descriptor,
                         layout->data_bytes);
            return -1;
        }
        PyObject *other = PyBytes_FromStringAndSize(c->quote,
                                                    (Py_ssize_t)c->quoted);
        if (other != NULL) {
            PyErr_Format(PyExc_ValueError,
                         "the buffer holds a record with other fields: "
                         "expected %R, found %R", layout->descriptor, other);
            Py_DECREF(other);
        }
        return -1;
    }
    }
}

/* 0 if the record in buf (len bytes) matches layout; else -1 with a
 * ValueError that says what differs (or OSError: a file behind the
 * buffer was truncated). */
static int
attach_mismatch(const bound_record *guard, const record_header *found,
                size_t len, const record_layout *layout)
{
    header_check c = {found, len, layout, RECORD_NO_MAGIC, 0, 0, 0, 0, {0}};
    int unused;
    if (call_guarded(guard, check_header, &c, &unused) < 0) {
        return -1;
    }
    return c.mismatch == RECORD_MATCHES ? 0 : mismatch_error(&c);
}

/* The guard for create()'s and attach()'s accesses to the whole of a
 * buffer: none unless a file backs it (another process may truncate it). */
bound_record
buffer_guard(const Py_buffer *view, int memory_kind)
{
    bound_record guard = {.guarded = NULL};
    if ((memory_kind & BOUND_FILE) && bus_guard_install() == 0) {
        guard.guarded = view->buf;
        guard.guarded_len = (size_t)view->len;
    }
    return guard;
}

/* ---- attach() without fields: the layout the buffer holds ---- */

/* The longest layout text attach() reads from a buffer: far more than any
 * record of at most 16 MiB of data declares in practice. */
#define MAX_STORED_LAYOUT_BYTES (1u << 20)

/* Copy the header's layout text out of the shared memory once (under the
 * guard, if a file backs it): c->mismatch says whether there was one to
 * copy; *text gets at most c->quoted bytes, never past the buffer. */
typedef struct {
    header_check check;
    char *text; /* MAX_STORED_LAYOUT_BYTES */
    size_t text_len;
} stored_layout;

static int
copy_stored_layout(void *arg)
{
    stored_layout *s = arg;
    header_check *c = &s->check;
    const volatile record_header *h = c->h;
    if (c->len < sizeof(((record_header *)0)->magic)
        || atomic_load_explicit(&((record_header *)c->h)->magic,
                                memory_order_acquire) != RECORD_MAGIC) {
        c->mismatch = RECORD_NO_MAGIC;
        return 0;
    }
    /* The version first: every version's sits here, and another
     * version's header may be shorter than this one's. */
    if (c->len < offsetof(record_header, version) + sizeof h->version) {
        c->mismatch = RECORD_TOO_SMALL;
        return 0;
    }
    c->version = h->version;
    if (c->version != RECORD_VERSION) {
        c->mismatch = RECORD_OTHER_VERSION;
        return 0;
    }
    if (c->len < RECORD_HEADER_SIZE) { /* a record, cut inside its header */
        c->mismatch = RECORD_TOO_SMALL;
        return 0;
    }
    size_t n = h->layout_bytes; /* read once */
    if (n > c->len - RECORD_HEADER_SIZE || n > MAX_STORED_LAYOUT_BYTES) {
        c->mismatch = RECORD_TOO_SMALL;
        return 0;
    }
    memcpy(s->text, record_layout_text(c->h), n);
    s->text_len = n;
    c->mismatch = RECORD_MATCHES;
    return 0;
}

/* "name:code;name:code" as the dict SeqRecord(**fields) takes; NULL with
 * ValueError if the text is no layout.  The names and codes are checked
 * again, as any caller's, when the layout is built from the dict. */
PyObject *
fields_of_layout_text(const char *text, size_t len, const char *what)
{
    PyObject *fields = PyDict_New();
    if (fields == NULL) {
        return NULL;
    }
    size_t start = 0;
    Py_ssize_t count = 0;
    while (start <= len && len > 0) {
        const char *field = text + start;
        const char *end = memchr(field, ';', len - start);
        size_t field_len = end ? (size_t)(end - field) : len - start;
        const char *colon = memchr(field, ':', field_len);
        if (colon == NULL || colon == field || colon + 1 == field + field_len) {
            goto invalid;
        }
        PyObject *name = PyUnicode_DecodeUTF8(field, colon - field, "strict");
        PyObject *code = name == NULL ? NULL
                         : PyUnicode_DecodeASCII(
                               colon + 1, field + field_len - colon - 1,
                               "strict");
        int failed = code == NULL || PyDict_SetItem(fields, name, code) < 0;
        Py_XDECREF(name);
        Py_XDECREF(code);
        if (failed) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                goto invalid;
            }
            Py_DECREF(fields);
            return NULL;
        }
        count++;
        if (PyDict_GET_SIZE(fields) != count) {
            goto invalid; /* a name twice */
        }
        start += field_len + 1;
        if (end == NULL) {
            break;
        }
    }
    if (count == 0) {
        goto invalid;
    }
    return fields;
invalid:
    Py_DECREF(fields);
    PyErr_Format(PyExc_ValueError,
                 "the buffer's %s has no valid layout text (overwritten?)%s",
                 what, strcmp(what, "SeqRecord") == 0
                           ? ": attach() it with its fields to see what "
                             "differs"
                           : "");
    return NULL;
}

/* The fields of the record in view, read from its header as untrusted
 * input: a new dict, or NULL with ValueError (or OSError: the file behind
 * the buffer was truncated). */
static PyObject *
stored_fields(const Py_buffer *view, int memory_kind)
{
    bound_record guard = buffer_guard(view, memory_kind);
    stored_layout s = {
        .check = {view->buf, (size_t)view->len, NULL, RECORD_NO_MAGIC, 0, 0,
                  0, 0, {0}},
        .text = PyMem_Malloc(MAX_STORED_LAYOUT_BYTES),
    };
    if (s.text == NULL) {
        return PyErr_NoMemory();
    }
    int unused;
    PyObject *fields = NULL;
    if (call_guarded(&guard, copy_stored_layout, &s, &unused) == 0) {
        if (s.check.mismatch != RECORD_MATCHES) {
            (void)mismatch_error(&s.check);
        }
        else {
            fields = fields_of_layout_text(s.text, s.text_len, "SeqRecord");
        }
    }
    PyMem_Free(s.text);
    return fields;
}

/* create()'s laying out, run under the SIGBUS guard when a file backs
 * the buffer (another process may truncate it): refuse a buffer that
 * already holds a record unless overwrite; refuse even then one whose lock
 * is held (re-initialising a robust mutex its holder has on its robust
 * list corrupts that list: a crash at its unlock).  Over a record, the
 * core takes its lock for the laying out (record_lay_out_over()), so no
 * other process takes it meanwhile. */
enum { LAID_OUT, ALREADY_A_RECORD, RECORD_IN_USE, INIT_FAILED };

typedef struct {
    void *memory;
    const char *desc;
    uint32_t desc_len, data_bytes;
    int overwrite;
    int err; /* record_init()'s, for INIT_FAILED */
} laying_out;

static int
lay_out(void *arg)
{
    laying_out *l = arg;
    record_header *h = l->memory;
    uint32_t magic = atomic_load_explicit(&h->magic, memory_order_acquire);
    if (magic == RECORD_MAGIC || magic == RECORD_LAYING_OUT) {
        if (!l->overwrite) {
            return ALREADY_A_RECORD;
        }
        l->err = record_lay_out_over(h, l->desc, l->desc_len,
                                     l->data_bytes);
        return l->err == 0        ? LAID_OUT
               : l->err == EBUSY ? RECORD_IN_USE
                                 : INIT_FAILED;
    }
    l->err = record_init(h, l->desc, l->desc_len, l->data_bytes);
    return l->err == 0 ? LAID_OUT : INIT_FAILED;
}

/* create()'s keyword overwrite=, taken out of the fields: *fields gets a
 * new dict of the rest (or NULL for none).  0, or -1 with TypeError. */
static int
create_args(int create, PyObject *kwargs, PyObject **fields, int *overwrite)
{
    *fields = kwargs == NULL ? NULL : PyDict_Copy(kwargs);
    if (kwargs != NULL && *fields == NULL) {
        return -1;
    }
    if (!create || *fields == NULL) {
        return 0;
    }
    PyObject *key = PyUnicode_FromString("overwrite");
    PyObject *value = key == NULL ? NULL
                                  : PyDict_GetItemWithError(*fields, key);
    if (value == NULL) {
        Py_XDECREF(key);
        if (PyErr_Occurred()) {
            Py_CLEAR(*fields);
            return -1;
        }
        return 0;
    }
    if (!PyBool_Check(value)) {
        Py_DECREF(key);
        Py_CLEAR(*fields);
        PyErr_SetString(PyExc_TypeError,
                        "create()'s overwrite must be True or False (so no "
                        "field can be called overwrite in create())");
        return -1;
    }
    *overwrite = value == Py_True;
    int err = PyDict_DelItem(*fields, key);
    Py_DECREF(key);
    if (err < 0) {
        Py_CLEAR(*fields);
    }
    return err;
}

/* create() and attach(): a record in the caller's buffer. */
static PyObject *
record_in_buffer(PyTypeObject *type, PyObject *args, PyObject *kwargs,
                 const char *method, int create)
{
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if (nargs != 1 && nargs != 2) {
        PyErr_Format(PyExc_TypeError,
                     "%s() takes the buffer, then a typing.NamedTuple class "
                     "or the fields as keywords", method);
        return NULL;
    }
    PyObject *decl = nargs == 2 ? no_declaration(PyTuple_GET_ITEM(args, 1))
                                : NULL;
    int overwrite = 0;
    PyObject *fields = NULL; /* the fields, without overwrite= */
    if (create_args(create, kwargs, &fields, &overwrite) < 0) {
        return NULL;
    }
    if (decl != NULL && fields != NULL && PyDict_GET_SIZE(fields) != 0) {
        Py_DECREF(fields);
        declared_twice(method);
        return NULL;
    }
    /* attach() takes read-only memory too: the record then only reads
     * (and waits), never writing a byte of it. */
    Py_buffer view;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(args, 0), &view,
                           create ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0) {
        Py_XDECREF(fields);
        return NULL;
    }
    int memory_kind = buffer_memory_kind(&view);
    if (!create && decl == NULL
        && (fields == NULL || PyDict_GET_SIZE(fields) == 0)) {
        /* The header is read before the record exists: refuse a
         * misaligned buffer first (its header's loads would be too). */
        if ((uintptr_t)view.buf % 8 != 0) {
            PyErr_SetString(PyExc_ValueError,
                            "buffer must be 8-byte aligned (shared memory "
                            "and mmap buffers are)");
            Py_XDECREF(fields);
            PyBuffer_Release(&view);
            return NULL;
        }
        Py_XSETREF(fields, stored_fields(&view, memory_kind));
        if (fields == NULL) {
            PyBuffer_Release(&view);
            return NULL;
        }
    }
    SeqRecordObject *self = record_alloc(type, decl, fields);
    Py_XDECREF(fields);
    if (self == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    self->view = view; /* released with the record */
    if (create && (memory_kind & BOUND_READ_ONLY)) {
        PyErr_SetString(PyExc_TypeError,
                        "create() needs writable memory: the buffer is "
                        "mapped read-only");
        goto error;
    }
    if (create
        && (size_t)self->view.len < layout_record_size(self->layout)) {
        buffer_too_small(self->layout, self->view.len);
        goto error;
    }
    if ((uintptr_t)self->view.buf % 8 != 0) {
        PyErr_SetString(PyExc_ValueError,
                        "buffer must be 8-byte aligned (shared memory and "
                        "mmap buffers are)");
        goto error;
    }
    const char *desc = PyBytes_AS_STRING(self->layout->descriptor);
    uint32_t desc_len = (uint32_t)PyBytes_GET_SIZE(self->layout->descriptor);
    uint32_t data_bytes = (uint32_t)self->layout->data_bytes;
    if (create) {
        bound_record guard = buffer_guard(&self->view, memory_kind);
        laying_out l = {self->view.buf, desc, desc_len, data_bytes,
                        overwrite, 0};
        int outcome;
        if (call_guarded(&guard, lay_out, &l, &outcome) < 0) {
            goto error;
        }
        switch (outcome) {
        case LAID_OUT:
            break;
        case ALREADY_A_RECORD:
            PyErr_SetString(PyExc_ValueError,
                            "the buffer already holds a SeqRecord: attach() "
                            "to it, or create(buffer, overwrite=True, ...) "
                            "to lay a new one over it (every process using "
                            "it would see it zeroed)");
            goto error;
        case RECORD_IN_USE:
            PyErr_SetString(PyExc_ValueError,
                            "create(overwrite=True): the buffer's SeqRecord "
                            "is locked by a writer (or a reader's locking "
                            "pass): overwriting it would corrupt that "
                            "writer's lock");
            goto error;
        default:
            record_init_failed(l.err);
            goto error;
        }
    }
    else {
        bound_record guard = buffer_guard(&self->view, memory_kind);
        if (attach_mismatch(&guard, self->view.buf, (size_t)self->view.len,
                            self->layout) < 0) {
            goto error;
        }
    }
    if (bind_memory(self, self->view.buf, memory_kind) < 0) {
        goto error;
    }
    return (PyObject *)self;
error:
    Py_DECREF(self);
    return NULL;
}

PyDoc_STRVAR(SeqRecord_create_doc,
"create($type, buffer, declaration=None, /, *, overwrite=False, **fields)\n"
"--\n\n"
"Lay out a new record (all fields zero) in a writable buffer and return it.\n\n"
"The fields are keywords as for SeqRecord(), or a typing.NamedTuple class\n"
"(declaration) whose annotations give them.\n"
"The buffer, e.g. multiprocessing.shared_memory.SharedMemory(...).buf or\n"
"an mmap, must hold ``SeqRecord.buffer_size(**fields)`` bytes, 8-byte\n"
"aligned; other processes open it with SeqRecord.attach().  The record\n"
"keeps the buffer exported while it lives.  Raises ValueError if the\n"
"buffer already holds a record (other processes may be using it: attach()\n"
"to it), unless overwrite=True; so no field can be called overwrite here.\n"
"Not safe against processes using the buffer: create once, then attach.");

static PyObject *
SeqRecord_create(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    return record_in_buffer(type, args, kwargs, "create", 1);
}

PyDoc_STRVAR(SeqRecord_attach_doc,
"attach($type, buffer, declaration=None, /, **fields)\n--\n\n"
"Open the record that SeqRecord.create() laid out in buffer.\n\n"
"Without fields, the record has the fields the buffer's header names (read\n"
"once and checked like any caller's); with them (keywords, or a\n"
"typing.NamedTuple class whose instances read() then returns), raises\n"
"ValueError if the record's fields (names, formats, order) differ.  ValueError too if the\n"
"buffer holds no record.  A read-only buffer\n"
"(an mmap opened with ACCESS_READ or PROT_READ, a read-only memoryview)\n"
"gives a read-only record: it reads and waits, writing no byte of the\n"
"buffer, and its update() and write() raise TypeError.  The buffer is\n"
"untrusted: whatever another process writes into it, this record stays\n"
"inside it; a file behind it that is truncated makes reads and waits\n"
"raise OSError.");

static PyObject *
SeqRecord_attach(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    return record_in_buffer(type, args, kwargs, "attach", 0);
}

PyDoc_STRVAR(SeqRecord_buffer_size_doc,
"buffer_size($type, declaration=None, /, **fields)\n--\n\n"
"Bytes of buffer that create() needs for a record of these fields (keywords,\n"
"or a typing.NamedTuple class).");

static PyObject *
SeqRecord_buffer_size(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    PyObject *decl = nargs == 1 ? no_declaration(PyTuple_GET_ITEM(args, 0))
                                : NULL;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError,
                        "buffer_size() takes a typing.NamedTuple class or "
                        "the fields as keywords");
        return NULL;
    }
    if (decl != NULL && kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        declared_twice("buffer_size");
        return NULL;
    }
    record_layout *layout = declared_layout(type, decl, kwargs);
    if (layout == NULL) {
        return NULL;
    }
    size_t size = layout_record_size(layout);
    layout_free(layout);
    return PyLong_FromSize_t(size);
}

static int
SeqRecord_traverse(SeqRecordObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->snapshot_type);
    /* An exported memoryview the collector could clear would crash it
     * (compat.h): there, a cycle through one is kept rather than freed. */
    if (self->view.obj != NULL
        && (!PyMemoryView_Check(self->view.obj)
            || gc_may_clear_exported_memoryviews())) {
        Py_VISIT(self->view.obj);
    }
    Py_VISIT(self->closer);
    return 0;
}

/* Drop the export of a create()/attach() buffer, the one reference a
 * record holds, to break a cycle through it.  Only the collector calls
 * this, on a record no thread of ours holds (a holder keeps it alive) and
 * after the cycle's finalizers ran.  The record is closed first: code the
 * release runs may keep it alive, and it must find it closed. */
static int
SeqRecord_clear(SeqRecordObject *self)
{
    /* The watcher may sleep in the memory, holding no reference. */
    unheld_let_go(&self->lock, !record_is_closed(&self->rec));
    if (self->view.obj != NULL) {
        record_memory_gone(&self->rec, &self->lock, &self->view);
    }
    Py_CLEAR(self->closer); /* after: its shared memory may close now */
    return 0;
}

/* ---- close() ---- */

/* What stops close() from letting the memory go. */
typedef enum {
    UNUSED = 0,
    SECTION_OPEN,  /* a write section opened through this record */
    USED_HERE,     /* a call of this record on this thread, under us */
    UNKNOWN_USE,   /* OSError from membarrier() */
} record_use;

/* Whether a write section opened through the record is open.  One
 * opened before a fork (held_forks is another count of in_use_forks_) is
 * open in the child only if the forking thread opened it: in private
 * memory it goes on there (fork.c), locked, and a section other threads
 * of the parent held was undone; in shared memory the child holds none.
 * No thread here could end the others: close() does not wait for them
 * (the lock's next holder gives their references back).  Both words are
 * stored inside the opener's pin, so the caller's reads before and after
 * its look at the slots see them (wait_until_unused()). */
static int
section_open(const SeqRecordObject *self)
{
    if (atomic_load_explicit(&self->lock.held_refs, memory_order_acquire)
        == 0) {
        return 0;
    }
    if (atomic_load_explicit(&self->rec.held_forks, memory_order_relaxed)
        == atomic_load_explicit(&in_use_forks_, memory_order_relaxed)) {
        return 1;
    }
    return self->lock.private.next != NULL /* tracked: private memory */
           && seqlock_is_locked(self->rec.view.lock);
}

/* Wait, detached, until no thread is inside a call that touches the
 * record (record_pin()), waking its waiters meanwhile: they look at
 * closed and leave.  The lock's held_refs tells of a write section opened
 * through this record: one inside a call (update()) ends with the call;
 * one left open by a with block can stay open for as long as the block
 * lasts, so close() gives up rather than wait for it.  A thread opens
 * and closes a section pinned, changing held_refs inside the pin; read
 * before the slots, a 0 it stored means its pin is seen (or it has
 * left); read after slots found empty, a section opened meanwhile is
 * seen.  Both reads agree, or the slots are looked at again. */
static record_use
wait_until_unused(SeqRecordObject *self)
{
    bound_record *r = &self->rec;
    int64_t nap_ns = 20 * 1000;
    for (;;) {
        int before = section_open(self);
        int where = in_use_where(r);
        if (where == IN_USE_UNKNOWN) {
            PyErr_SetFromErrno(PyExc_OSError);
            return UNKNOWN_USE;
        }
        if (where == IN_USE_HERE) {
            return USED_HERE;
        }
        if (where == IN_USE_NOWHERE) {
            int after = section_open(self);
            if (before == after) {
                return after ? SECTION_OPEN : UNUSED;
            }
            continue; /* a section opened or closed meanwhile */
        }
        /* Again each time: a wake-up that lands just before a waiter
         * falls asleep finds nobody (seqlock.h: SEQLOCK_WAIT_WAKE_RETURNS).
         * It wakes this process's waiters on the record, and other
         * processes' for nothing (they sleep again). */
        seqlock_wake_waiters(r->view.lock);
        struct timespec nap = {0, (long)nap_ns};
        Py_BEGIN_ALLOW_THREADS
        (void)nanosleep(&nap, NULL);
        Py_END_ALLOW_THREADS
        nap_ns = nap_ns < 5 * 1000 * 1000 ? 2 * nap_ns : nap_ns;
    }
}

PyDoc_STRVAR(SeqRecord_close_doc,
"close($self, /)\n--\n\n"
"Release the record's buffer: the export of create()'s or attach()'s\n"
"buffer ends, so the buffer's owner can close (shm.close(), mmap.close()).\n\n"
"Every later call that reads, writes or waits on the record raises\n"
"ValueError, through the record or a bound method kept from before\n"
"(read = rec.read); fields, format, nbytes, readonly and closed still\n"
"answer.  A call running in another thread finishes first: close() waits\n"
"for it, waking waits on the record (they raise ValueError).  Closing a\n"
"closed record does nothing.  Raises BufferError, leaving the record\n"
"open, while a write section opened through it is open (close after its\n"
"with block), or when called inside one of the record's own calls on\n"
"this thread (a signal handler run during a wait).  A SeqRecord() of its\n"
"own memory frees it when the record is freed.");

static PyObject *
SeqRecord_close(SeqRecordObject *self, PyObject *Py_UNUSED(ignored))
{
    bound_record *r = &self->rec;
    if (!claim_close(r)) {
        Py_RETURN_NONE; /* closed already */
    }
    record_use use = wait_until_unused(self);
    if (use != UNUSED) {
        atomic_store_explicit(&r->closed, RECORD_OPEN, memory_order_release);
        if (use == UNKNOWN_USE) {
            return NULL;
        }
        PyErr_SetString(
            PyExc_BufferError,
            use == SECTION_OPEN
                ? "cannot close the record: a write section opened through "
                  "it is open (close it after the with block)"
                : "cannot close the record inside one of its own calls on "
                  "this thread (a signal handler run during a wait?)");
        return NULL;
    }
    record_memory_gone(r, &self->lock, &self->view);
    return finish_close(r, &self->closer);
}

PyObject *
finish_close(bound_record *r, PyObject **slot)
{
    PyObject *closer = *slot; /* ours alone: we closed it */
    *slot = NULL;
    atomic_store_explicit(&r->closed, RECORD_CLOSED, memory_order_release);
    if (closer != NULL) {
        PyObject *done = PyObject_CallNoArgs(closer);
        Py_DECREF(closer);
        if (done == NULL) {
            return NULL;
        }
        Py_DECREF(done);
    }
    Py_RETURN_NONE;
}

PyObject *
set_closer(bound_record *r, PyObject **slot, PyObject *closer)
{
    if (record_is_closed(r)) {
        (void)set_record_closed(r);
        return NULL;
    }
    if (!PyCallable_Check(closer) || *slot != NULL) {
        PyErr_SetString(PyExc_TypeError,
                        "_close_with() takes one callable, once");
        return NULL;
    }
    *slot = Py_NewRef(closer);
    Py_RETURN_NONE;
}

static PyObject *
SeqRecord_close_with(SeqRecordObject *self, PyObject *closer)
{
    return set_closer(&self->rec, &self->closer, closer);
}

PyObject *
call_shared(const char *method, PyTypeObject *type, PyObject *args,
            PyObject *kwargs, Py_ssize_t min_args, Py_ssize_t max_args,
            const char *usage)
{
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if (nargs < min_args || nargs > max_args) {
        PyErr_Format(PyExc_TypeError, "%s() takes %s", method, usage);
        return NULL;
    }
    PyObject *shared = PyImport_ImportModule("seqlock_py._shared");
    if (shared == NULL) {
        return NULL;
    }
    PyObject *fn = PyObject_GetAttrString(shared, method);
    Py_DECREF(shared);
    if (fn == NULL) {
        return NULL;
    }
    PyObject *call = PyTuple_New(nargs + 1);
    if (call != NULL) {
        PyTuple_SET_ITEM(call, 0, Py_NewRef((PyObject *)type));
        for (Py_ssize_t i = 0; i < nargs; i++) {
            PyTuple_SET_ITEM(call, i + 1,
                             Py_NewRef(PyTuple_GET_ITEM(args, i)));
        }
    }
    PyObject *made = call == NULL ? NULL : PyObject_Call(fn, call, kwargs);
    Py_XDECREF(call);
    Py_DECREF(fn);
    return made;
}

#define RECORD_SHARED_USAGE \
    "the shared memory's name, then a NamedTuple class or the fields as " \
    "keywords"

PyDoc_STRVAR(SeqRecord_create_shared_doc,
"create_shared($type, name, declaration=None, /, **fields)\n--\n\n"
"Create the named shared memory block name, as large as buffer_size()\n"
"says for the NamedTuple class or the keyword fields (as create() takes\n"
"them), lay a new record out in it and return the record, which owns\n"
"the block: its close() (or with block) closes the block and\n"
"unlinks its name.  The block gets its name only once laid out (on\n"
"Linux): an opener finds no block or a whole one.  FileExistsError if\n"
"the name exists (no overwrite=: unlink a stale block first), ValueError\n"
"if it is not ASCII (the resource tracker's limit), MemoryError if\n"
"/dev/shm has not that much free.  Other processes\n"
"open it with SeqRecord.attach_shared(name).  If this process exits\n"
"without close(), the standard library's resource tracker unlinks the\n"
"name at its exit (the block lives on while others map it).");

static PyObject *
SeqRecord_create_shared(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    return call_shared("create_shared", type, args, kwargs, 1, 2,
                       RECORD_SHARED_USAGE);
}

PyDoc_STRVAR(SeqRecord_attach_shared_doc,
"attach_shared($type, name, declaration=None, /, **fields)\n--\n\n"
"Open the record that SeqRecord.create_shared(name) made, as attach()\n"
"does (fields optional: the block's header names them).  The record owns\n"
"its mapping: close() (or a with block) closes it, never unlinking the\n"
"name.  The standard library's resource tracker is kept out (track=False\n"
"on 3.13+, no registration before), so this process's exit never unlinks\n"
"the block under the others.  FileNotFoundError if the name does not\n"
"exist (create_shared() names a block once it is laid out), ValueError\n"
"if the block holds no record.");

static PyObject *
SeqRecord_attach_shared(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    return call_shared("attach_shared", type, args, kwargs, 1, 2,
                       RECORD_SHARED_USAGE);
}

static PyObject *
SeqRecord_reduce(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return pickling_refused(
        self, "to use a record in another process, make it with "
              "SeqRecord.create_shared(name, ...), pass the name, and open "
              "it there with SeqRecord.attach_shared(name)");
}

static PyObject *
SeqRecord_enter(SeqRecordObject *self, PyObject *Py_UNUSED(ignored))
{
    RETURN_IF_CLOSED(self, NULL);
    return Py_NewRef(self);
}

static PyObject *
SeqRecord_exit(SeqRecordObject *self, PyObject *const *Py_UNUSED(args),
               Py_ssize_t Py_UNUSED(nargs))
{
    PyObject *done = SeqRecord_close(self, NULL);
    if (done == NULL) {
        return NULL;
    }
    Py_DECREF(done);
    Py_RETURN_FALSE;
}

static PyObject *
SeqRecord_get_closed(SeqRecordObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(record_is_closed(&self->rec));
}

static void
SeqRecord_dealloc(SeqRecordObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    unheld_let_go(&self->lock, !record_is_closed(&self->rec));
    /* No thread of ours holds the lock: a holder keeps the record alive. */
    if (self->rec.view.header != NULL) {
        bound_lock_fini(&self->lock);
    }
    (void)SeqRecord_clear(self);
    open_memory_remove(&self->rec); /* a SeqRecord()'s own, or one unbound */
    if (self->memory != NULL) {
        seqlock_destroy(self->rec.view.lock);
        PyMem_Free(self->memory);
    }
    layout_free(self->layout);
    Py_XDECREF(self->snapshot_type);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

/* The lock's state words, read once each (guarded: the memory may be a
 * truncated file's). */
typedef struct {
    const record_view *rv;
    uint64_t sequence;
    int locked;
    uint32_t recoveries;
} lock_state;

static int
read_lock_state(void *arg)
{
    lock_state *st = arg;
    st->sequence = seqlock_sequence(st->rv->lock);
    st->locked = seqlock_is_locked(st->rv->lock);
    st->recoveries = atomic_load_explicit(&st->rv->header->recoveries,
                                          memory_order_relaxed);
    return 0;
}

static int
lock_state_of(SeqRecordObject *self, lock_state *st)
{
    st->rv = &self->rec.view;
    int unused;
    if (record_pin_ft(&self->rec) < 0) {
        return -1;
    }
    int result = call_guarded(&self->rec, read_lock_state, st, &unused);
    record_unpin_ft(&self->rec);
    return result;
}

static PyObject *
SeqRecord_repr(SeqRecordObject *self)
{
    if (record_is_closed(&self->rec)) {
        return PyUnicode_FromFormat("<%s fields=%R format=%R closed>",
                                    Py_TYPE(self)->tp_name,
                                    self->layout->names,
                                    self->layout->format);
    }
    lock_state st;
    if (lock_state_of(self, &st) < 0) {
        return NULL;
    }
    return PyUnicode_FromFormat(
        "<%s fields=%R format=%R sequence=%llu%s%s>", Py_TYPE(self)->tp_name,
        self->layout->names, self->layout->format,
        (unsigned long long)st.sequence,
        self->memory == NULL ? " in a buffer" : "",
        self->rec.readonly ? " (read-only)" : "");
}

/* ---- readers ---- */

PyDoc_STRVAR(SeqRecord_read_doc,
"read($self, /)\n--\n\n"
"Return one consistent snapshot: a tuple of the fields in order (an array\n"
"field becomes a tuple, a shaped one nested tuples of its shape) whose\n"
"fields are also attributes, snap.x: a seqlock_py.Snapshot, or the\n"
"declared NamedTuple class.  Read the fields that belong together from\n"
"one snapshot: rec[x] then rec[y] are two.  Never waits: while a write\n"
"section is open (in any thread or process, even this thread's), the\n"
"state before it.");

/* One consistent snapshot as a tuple, and its (even) sequence number.
 * Copied first, whole, then decoded: nothing is read twice from the
 * shared memory, and nothing is allocated while the copy may be torn
 * (an allocation may run the collector, and so Python code, which on the
 * GIL build could close the record under the copy). */
static PyObject *
values_snapshot(SeqRecordObject *self, uint64_t *seq)
{
    unsigned char stack[STACK_SNAPSHOT_BYTES];
    const record_layout *layout = self->layout;
    unsigned char *buf = scratch(stack, layout->data_bytes);
    if (buf == NULL) {
        return NULL;
    }
    PyObject *tuple = NULL;
    if ((*seq = snapshot(self, buf, 0, layout->data_bytes))
        == SNAPSHOT_FAILED) {
        goto done;
    }
    if (layout->all_float64) {
        tuple = float64_snapshot(self->snapshot_type, self->snapshot_kind, buf,
                                 layout->nfields);
        goto done;
    }
    tuple = snapshot_new(self->snapshot_type, self->snapshot_kind,
                         layout->nfields);
    if (tuple == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < layout->nfields; i++) {
        const field_spec *f = &layout->fields[i];
        PyObject *value = field_decode_inline(f, buf + f->offset);
        if (value == NULL) {
            Py_CLEAR(tuple);
            goto done;
        }
        PyTuple_SET_ITEM(tuple, i, value);
    }
done:
    scratch_free(buf, stack);
    return tuple;
}

/* Records of up to this many float64 fields are read into an array of
 * their own (no scratch() to choose one). */
#define FLOAT64_ON_STACK 16

static PyObject *
SeqRecord_read(SeqRecordObject *self, PyObject *const *Py_UNUSED(args),
               Py_ssize_t nargs)
{
    if (takes_no_arguments("read", nargs) < 0) {
        return NULL;
    }
    const record_layout *layout = self->layout;
    if (layout->all_float64 && layout->nfields <= FLOAT64_ON_STACK) {
        unsigned char buf[FLOAT64_ON_STACK * sizeof(double)];
        if (snapshot(self, buf, 0, layout->data_bytes) == SNAPSHOT_FAILED) {
            return NULL;
        }
        return float64_snapshot(self->snapshot_type, self->snapshot_kind, buf,
                                layout->nfields);
    }
    uint64_t seq;
    return values_snapshot(self, &seq);
}

PyDoc_STRVAR(SeqRecord_read_versioned_doc,
"read_versioned($self, /)\n--\n\n"
"Return (sequence, values): one consistent snapshot as read() gives it,\n"
"and the (even) sequence number of exactly that state.  Pass sequence\n"
"to wait() to sleep until the next write.  Never waits for a writer.");

static PyObject *
SeqRecord_read_versioned(SeqRecordObject *self,
                         PyObject *const *Py_UNUSED(args), Py_ssize_t nargs)
{
    if (takes_no_arguments("read_versioned", nargs) < 0) {
        return NULL;
    }
    uint64_t seq;
    PyObject *values = values_snapshot(self, &seq);
    return versioned(seq, values);
}

/* ---- readers that wait for news (news.c) ---- */

static PyObject *
SeqRecord_wait(SeqRecordObject *self, PyObject *args, PyObject *kwargs)
{
    RETURN_IF_CLOSED(self, NULL);
    return news_wait(&self->lock, args, kwargs);
}

static PyObject *
SeqRecord_wait_async(SeqRecordObject *self, PyObject *args,
                     PyObject *kwargs)
{
    RETURN_IF_CLOSED(self, NULL);
    return news_wait_async((PyObject *)self, args, kwargs);
}

static PyObject *
SeqRecord_waiter(SeqRecordObject *self, PyObject *args, PyObject *kwargs)
{
    RETURN_IF_CLOSED(self, NULL);
    return news_waiter((PyObject *)self, &self->lock, args, kwargs);
}

static PyObject *
SeqRecord_news_since(SeqRecordObject *self, PyObject *seq)
{
    RETURN_IF_CLOSED(self, NULL);
    return news_since(&self->lock, seq);
}

static PyObject *
SeqRecord_weak_waiter(SeqRecordObject *self, PyObject *Py_UNUSED(ignored))
{
    return news_weak_waiter((PyObject *)self, &self->lock);
}

PyDoc_STRVAR(SeqRecord_changes_doc,
"changes($self, /, *, timeout=None)\n--\n\n"
"Iterate over (sequence, values) pairs: first the current snapshot, then\n"
"one each time a write section has ended, waiting (as wait() does) in\n"
"between.  A consumer slower than the writer gets the newest state and\n"
"skips the versions it missed: (sequence - previous) // 2 sections\n"
"ended meanwhile (a rolled-back one counts too, with unchanged values).\n"
"Ends when no write ends within timeout seconds (None: never).");

static PyObject *
SeqRecord_changes(SeqRecordObject *self, PyObject *args, PyObject *kwargs)
{
    RETURN_IF_CLOSED(self, NULL);
    return news_changes("changes", (PyObject *)self, args, kwargs);
}

PyDoc_STRVAR(SeqRecord_changes_async_doc,
"changes_async($self, /, *, timeout=None)\n--\n\n"
"changes() as an asynchronous iterator (async for): waiting for the next\n"
"write never blocks the event loop.");

static PyObject *
SeqRecord_changes_async(SeqRecordObject *self, PyObject *args,
                        PyObject *kwargs)
{
    RETURN_IF_CLOSED(self, NULL);
    return news_changes("changes_async", (PyObject *)self, args, kwargs);
}

PyDoc_STRVAR(SeqRecord_read_dict_doc,
"read_dict($self, /)\n--\n\n"
"Return one consistent snapshot as a dict of field name to value.");

static PyObject *
SeqRecord_read_dict(SeqRecordObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *values = SeqRecord_read(self, NULL, 0);
    if (values == NULL) {
        return NULL;
    }
    PyObject *dict = PyDict_New();
    for (Py_ssize_t i = 0; dict != NULL && i < self->layout->nfields; i++) {
        if (PyDict_SetItem(dict, PyTuple_GET_ITEM(self->layout->names, i),
                           PyTuple_GET_ITEM(values, i)) < 0) {
            Py_CLEAR(dict);
        }
    }
    Py_DECREF(values);
    return dict;
}

/* The consistent value of one field. */
static PyObject *
read_field(SeqRecordObject *self, const field_spec *f)
{
    unsigned char stack[STACK_SNAPSHOT_BYTES];
    size_t n = f->item_size * (size_t)f->count;
    unsigned char *buf = scratch(stack, n);
    if (buf == NULL) {
        return NULL;
    }
    PyObject *value = NULL;
    if (snapshot(self, buf, f->offset, n) != SNAPSHOT_FAILED) {
        value = field_decode(f, buf);
    }
    scratch_free(buf, stack);
    return value;
}

static PyObject *
SeqRecord_subscript(SeqRecordObject *self, PyObject *key)
{
    RETURN_IF_CLOSED(self, NULL);
    const field_spec *f = field_or_keyerror(self, key);
    return f == NULL ? NULL : read_field(self, f);
}

PyDoc_STRVAR(SeqRecord_get_doc,
"get($self, name, default=None, /)\n--\n\n"
"Return the consistent value of one field, or default if there is no\n"
"field of that name.");

static PyObject *
SeqRecord_get(SeqRecordObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    RETURN_IF_CLOSED(self, NULL);
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError,
                     "get() takes 1 or 2 arguments (%zd given)", nargs);
        return NULL;
    }
    const field_spec *f = layout_find(self->layout, args[0]);
    if (f == NULL) {
        return PyErr_Occurred() ? NULL
                                : Py_NewRef(nargs == 2 ? args[1] : Py_None);
    }
    return read_field(self, f);
}

PyDoc_STRVAR(SeqRecord_read_into_doc,
"read_into($self, buffer, /, *, field=None)\n--\n\n"
"Copy one consistent snapshot into a writable buffer and return its\n"
"sequence number (even: self.sequence when the section that wrote it\n"
"ended).  The fields travel as raw bytes: the only object created is the\n"
"returned int, as for self.sequence.\n\n"
"The buffer holds bytes in the layout of self.format (a bytearray, a\n"
"memoryview of bytes), or is a numpy array of self.dtype (one element,\n"
"or 0-d), or holds elements of the record's only element type (a record\n"
"of '16d' into numpy.empty(16)).  TypeError for any other typed buffer\n"
"(np.empty(1002) for a record of 'q' and '1000d' would mix int64 bits\n"
"into floats), ValueError if it is smaller than self.nbytes, strided, or\n"
"a view of the memory of a record or ring this process has open\n"
"(numpy.frombuffer(shm.buf)).\n\n"
"With field=name, copy that one array field's consistent value into a\n"
"C-contiguous buffer of its element type and shape (a numpy array of\n"
"dtype self.dtype[name].base and shape self.dtype[name].shape): no\n"
"tuple is built.  TypeError for another element type, ValueError for\n"
"another shape or a strided buffer, KeyError for no such field.");

int
read_into_target(SeqRecordObject *self, PyObject *buffer, PyObject *field,
                 const char *call, Py_buffer *view, size_t *offset,
                 size_t *n)
{
    const field_spec *f = NULL;
    if (field != NULL && field != Py_None) {
        f = field_or_keyerror(self, field);
        if (f == NULL) {
            return -1;
        }
    }
    if (PyObject_GetBuffer(buffer, view, PyBUF_RECORDS) < 0) {
        return -1;
    }
    *offset = 0;
    *n = self->layout->data_bytes;
    if (f != NULL) {
        *offset = f->offset;
        *n = f->item_size * (size_t)f->count;
        if (buffer_fits_field(f, view) < 0) {
            goto error;
        }
    }
    else if (buffer_fits_record(self->layout, view) < 0) {
        goto error;
    }
    if ((size_t)view->len < *n) {
        PyErr_Format(PyExc_ValueError,
                     "buffer too small: a snapshot takes %zu bytes, the "
                     "buffer has %zd", *n, view->len);
        goto error;
    }
    if (refuse_open_memory(call, view->buf, *n) < 0) {
        goto error;
    }
    return 0;
error:
    PyBuffer_Release(view);
    return -1;
}

#if BYTEARRAY_HOLD
/* read_into(bytearray), the commonest buffer, without a buffer export:
 * held as its export holds it (compat.h), it needs no format check (it
 * holds bytes), and its place is checked against the open memory through
 * this thread's last clear range.  The same copy: snapshot() checks closed
 * and pins, guards file-backed memory, retries.  1 with *result (NULL with
 * an exception); 0 if the general path must look (too small, or over open
 * memory: it says which). */
static int
read_into_bytearray(SeqRecordObject *self, PyObject *buffer,
                    PyObject **result)
{
    size_t n = self->layout->data_bytes;
    int done = 0;
    bytearray_hold(buffer);
    if ((size_t)PyByteArray_GET_SIZE(buffer) >= n) {
        void *dst = PyByteArray_AS_STRING(buffer);
        if (!open_memory_overlaps_cached(dst, n)) {
            uint64_t seq = snapshot(self, dst, 0, n);
            *result = seq == SNAPSHOT_FAILED
                          ? NULL
                          : PyLong_FromUnsignedLongLong(seq);
            done = 1;
        }
    }
    bytearray_unhold(buffer);
    return done;
}
#endif

static PyObject *
SeqRecord_read_into(SeqRecordObject *self, PyObject *const *args,
                    Py_ssize_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
#if BYTEARRAY_HOLD
    PyObject *result;
    if (SEQLOCK_LIKELY(nargs == 1 && kwnames == NULL)
        && PyByteArray_CheckExact(args[0])
        && read_into_bytearray(self, args[0], &result)) {
        return result;
    }
#endif
    RETURN_IF_CLOSED(self, NULL);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs != 1 || nkw > 1
        || (nkw == 1
            && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0),
                                                "field") != 0)) {
        PyErr_SetString(PyExc_TypeError,
                        "read_into() takes a buffer and, as a keyword, "
                        "field=name");
        return NULL;
    }
    Py_buffer view;
    size_t offset, n;
    if (read_into_target(self, args[0], nkw == 1 ? args[1] : NULL,
                         "read_into()", &view, &offset, &n) < 0) {
        return NULL;
    }
    uint64_t seq = snapshot(self, view.buf, offset, n);
    PyBuffer_Release(&view);
    return seq == SNAPSHOT_FAILED ? NULL : PyLong_FromUnsignedLongLong(seq);
}

/* ---- writers ---- */

PyDoc_STRVAR(SeqRecord_update_doc,
"update($self, /, **values)\n--\n\n"
"Set the given fields in one write section.\n\n"
"Every value is checked first: an unknown name or a wrong type raises\n"
"TypeError, a wrong array length ValueError, an out-of-range integer\n"
"OverflowError, and then nothing is written (sequence unchanged).");

static PyObject *
SeqRecord_update(SeqRecordObject *self, PyObject *const *args,
                 Py_ssize_t nargsf, PyObject *kwnames)
{
    if (update_fields(self, NULL, args, nargsf, kwnames) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(SeqRecord_write_doc,
"write($self, /, timeout=None)\n--\n\n"
"Return a context manager for one multi-step write section::\n\n"
"    with rec.write() as w:\n"
"        w.x += 1.0\n"
"        w.samples[3] = 2.5\n"
"        w.update(y=0.0)\n\n"
"Readers see none or all of it.  If the body raises, the record is put\n"
"back as it was.  TimeoutError if the lock is not free within timeout\n"
"seconds (None: wait for ever).");

static PyObject *
SeqRecord_write(SeqRecordObject *self, PyObject *args, PyObject *kwargs)
{
    RETURN_IF_CLOSED(self, NULL);
    int64_t timeout_ns;
    if (write_timeout_arg(args, kwargs, &timeout_ns) < 0) {
        return NULL;
    }
    module_state *state = state_of((PyObject *)self);
    if (state == NULL) {
        return NULL;
    }
    RecordWriterObject *writer = PyObject_GC_New(RecordWriterObject,
                                                 state->record_writer_type);
    if (writer == NULL) {
        return NULL;
    }
    writer->record = (SeqRecordObject *)Py_NewRef(self);
    writer->timeout_ns = timeout_ns;
    atomic_init(&writer->active, 0);
    writer->section = 0;
    writer->staged = NULL;
    PyObject_GC_Track(writer);
    return (PyObject *)writer;
}

PyDoc_STRVAR(SeqRecord_locked_doc,
"locked($self, /)\n--\n\n"
"Return True if some thread (of any process) holds the write lock.");

static PyObject *
SeqRecord_locked(SeqRecordObject *self, PyObject *Py_UNUSED(ignored))
{
    lock_state st;
    return lock_state_of(self, &st) < 0 ? NULL : PyBool_FromLong(st.locked);
}

static PyObject *
SeqRecord_get_sequence(SeqRecordObject *self, void *Py_UNUSED(closure))
{
    lock_state st;
    return lock_state_of(self, &st) < 0
               ? NULL
               : PyLong_FromUnsignedLongLong(st.sequence);
}

static PyObject *
SeqRecord_get_fields(SeqRecordObject *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->layout->names);
}

static PyObject *
SeqRecord_get_format(SeqRecordObject *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->layout->format);
}

/* numpy.dtype of the layout: imported only here, so that everything else
 * works without numpy.  A new (equal) dtype each time. */
static PyObject *
SeqRecord_get_dtype(SeqRecordObject *self, void *Py_UNUSED(closure))
{
    return layout_dtype(self->layout);
}

PyObject *
layout_dtype(const record_layout *layout)
{
    PyObject *numpy = PyImport_ImportModule("numpy");
    if (numpy == NULL) {
        return NULL;
    }
    PyObject *formats = PyList_New(layout->nfields);
    PyObject *offsets = PyList_New(layout->nfields);
    PyObject *names = PySequence_List(layout->names);
    PyObject *spec = NULL, *dtype = NULL;
    if (formats == NULL || offsets == NULL || names == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < layout->nfields; i++) {
        const field_spec *f = &layout->fields[i];
        PyObject *format = PyUnicode_FromStringAndSize(&f->kind, 1);
        if (format != NULL && f->is_array) {
            PyObject *shape = PyTuple_New(f->ndim);
            for (int d = 0; shape != NULL && d < f->ndim; d++) {
                PyObject *dim = PyLong_FromSsize_t(f->shape[d]);
                if (dim == NULL) {
                    Py_CLEAR(shape);
                    break;
                }
                PyTuple_SET_ITEM(shape, d, dim);
            }
            Py_SETREF(format, shape == NULL ? NULL
                                            : PyTuple_Pack(2, format, shape));
            Py_XDECREF(shape);
        }
        PyObject *offset = PyLong_FromSize_t(f->offset);
        if (format == NULL || offset == NULL) {
            Py_XDECREF(format);
            Py_XDECREF(offset);
            goto done;
        }
        PyList_SET_ITEM(formats, i, format);
        PyList_SET_ITEM(offsets, i, offset);
    }
    spec = Py_BuildValue("{sOsOsOsn}", "names", names, "formats", formats,
                         "offsets", offsets, "itemsize",
                         (Py_ssize_t)layout->data_bytes);
    if (spec != NULL) {
        dtype = PyObject_CallMethod(numpy, "dtype", "O", spec);
    }
done:
    Py_XDECREF(spec);
    Py_XDECREF(names);
    Py_XDECREF(formats);
    Py_XDECREF(offsets);
    Py_DECREF(numpy);
    return dtype;
}

static PyObject *
SeqRecord_get_nbytes(SeqRecordObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSize_t(self->layout->data_bytes);
}

static PyObject *
SeqRecord_get_readonly(SeqRecordObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->rec.readonly);
}

static PyObject *
SeqRecord_get_recoveries(SeqRecordObject *self, void *Py_UNUSED(closure))
{
    lock_state st;
    return lock_state_of(self, &st) < 0
               ? NULL
               : PyLong_FromUnsignedLong(st.recoveries);
}

static PyMethodDef SeqRecord_methods[] = {
    {"create", (PyCFunction)(void (*)(void))SeqRecord_create,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS, SeqRecord_create_doc},
    {"attach", (PyCFunction)(void (*)(void))SeqRecord_attach,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS, SeqRecord_attach_doc},
    {"create_shared", (PyCFunction)(void (*)(void))SeqRecord_create_shared,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS, SeqRecord_create_shared_doc},
    {"attach_shared", (PyCFunction)(void (*)(void))SeqRecord_attach_shared,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS, SeqRecord_attach_shared_doc},
    {"_close_with", (PyCFunction)SeqRecord_close_with, METH_O,
     PyDoc_STR("_close_with($self, closer, /)\n--\n\n"
               "Have close() call closer() after it lets the buffer go "
               "(for seqlock_py._shared; not public).")},
    {"buffer_size", (PyCFunction)(void (*)(void))SeqRecord_buffer_size,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS, SeqRecord_buffer_size_doc},
    {"read", (PyCFunction)(void (*)(void))SeqRecord_read, METH_FASTCALL,
     SeqRecord_read_doc},
    {"read_versioned",
     (PyCFunction)(void (*)(void))SeqRecord_read_versioned, METH_FASTCALL,
     SeqRecord_read_versioned_doc},
    {"wait", (PyCFunction)(void (*)(void))SeqRecord_wait,
     METH_VARARGS | METH_KEYWORDS, NEWS_WAIT_DOC},
    {"_news_since", (PyCFunction)SeqRecord_news_since, METH_O,
     NEWS_SINCE_DOC},
    {"wait_async", (PyCFunction)(void (*)(void))SeqRecord_wait_async,
     METH_VARARGS | METH_KEYWORDS, NEWS_WAIT_ASYNC_DOC},
    {"changes", (PyCFunction)(void (*)(void))SeqRecord_changes,
     METH_VARARGS | METH_KEYWORDS, SeqRecord_changes_doc},
    {"changes_async", (PyCFunction)(void (*)(void))SeqRecord_changes_async,
     METH_VARARGS | METH_KEYWORDS, SeqRecord_changes_async_doc},
    {"_waiter", (PyCFunction)(void (*)(void))SeqRecord_waiter,
     METH_VARARGS | METH_KEYWORDS, NEWS_WAITER_DOC},
    {"_weak_waiter", (PyCFunction)SeqRecord_weak_waiter, METH_NOARGS,
     NEWS_WEAK_WAITER_DOC},
    {"read_dict", (PyCFunction)SeqRecord_read_dict, METH_NOARGS,
     SeqRecord_read_dict_doc},
    {"read_into", (PyCFunction)(void (*)(void))SeqRecord_read_into,
     METH_FASTCALL | METH_KEYWORDS,
     SeqRecord_read_into_doc},
    {"reader_into", (PyCFunction)(void (*)(void))reader_into_new,
     METH_FASTCALL | METH_KEYWORDS, READER_INTO_DOC},
    {"get", (PyCFunction)(void (*)(void))SeqRecord_get, METH_FASTCALL,
     SeqRecord_get_doc},
    {"update", (PyCFunction)(void (*)(void))SeqRecord_update,
     METH_FASTCALL | METH_KEYWORDS, SeqRecord_update_doc},
    {"write", (PyCFunction)(void (*)(void))SeqRecord_write,
     METH_VARARGS | METH_KEYWORDS, SeqRecord_write_doc},
    {"locked", (PyCFunction)SeqRecord_locked, METH_NOARGS,
     SeqRecord_locked_doc},
    {"close", (PyCFunction)SeqRecord_close, METH_NOARGS,
     SeqRecord_close_doc},
    {"__enter__", (PyCFunction)SeqRecord_enter, METH_NOARGS,
     PyDoc_STR("__enter__($self, /)\n--\n\nReturn the record (ValueError "
               "if it is closed).")},
    {"__exit__", (PyCFunction)(void (*)(void))SeqRecord_exit, METH_FASTCALL,
     PyDoc_STR("__exit__($self, exc_type, exc_value, traceback, /)\n--\n\n"
               "close() the record.")},
    {"__reduce__", SeqRecord_reduce, METH_NOARGS,
     PyDoc_STR("__reduce__($self, /)\n--\n\n"
               "Raise TypeError: a record cannot be pickled or copied.")},
    {"__class_getitem__", Py_GenericAlias, METH_O | METH_CLASS,
     PyDoc_STR("SeqRecord[Pose] in annotations: a record whose read() "
               "returns Pose (see PEP 585).")},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef SeqRecord_getset[] = {
    {"sequence", (getter)SeqRecord_get_sequence, NULL,
     PyDoc_STR("The sequence count: odd while a write section is open; +2 "
               "per section, also one that was rolled back."), NULL},
    {"_news_sequence", (getter)SeqRecord_get_sequence, NULL,
     PyDoc_STR("sequence, under the name seqlock_py._news reads."), NULL},
    {"fields", (getter)SeqRecord_get_fields, NULL,
     PyDoc_STR("The field names, in order."), NULL},
    {"format", (getter)SeqRecord_get_format, NULL,
     PyDoc_STR("The native struct format of a snapshot (read_into's "
               "layout; a shape counts as its elements): struct.unpack("
               "self.format, raw) reads it.  Not a numpy dtype string: "
               "numpy.dtype(self.format) fails, use self.dtype."), NULL},
    {"dtype", (getter)SeqRecord_get_dtype, NULL,
     PyDoc_STR("A numpy structured dtype of a snapshot: the fields' names, "
               "element types, shapes (as subarrays) and offsets, itemsize "
               "self.nbytes; numpy.empty((), rec.dtype) is a buffer for "
               "read_into().  Imports numpy (ImportError without it); "
               "numpy.dtype(rec.format) cannot work: struct formats are "
               "not dtype strings."), NULL},
    {"nbytes", (getter)SeqRecord_get_nbytes, NULL,
     PyDoc_STR("Bytes in a snapshot: struct.calcsize(self.format)."), NULL},
    {"closed", (getter)SeqRecord_get_closed, NULL,
     PyDoc_STR("True once close() has been called (while it waits, too)."),
     NULL},
    {"readonly", (getter)SeqRecord_get_readonly, NULL,
     PyDoc_STR("True if the record was attached to memory this process may "
               "only read: it reads and waits, writing nothing; update() "
               "and write() raise TypeError."), NULL},
    RECORD_READ_BUDGET_GETSETS(offsetof(SeqRecordObject, lock.budget)),
    {"recoveries", (getter)SeqRecord_get_recoveries, NULL,
     PyDoc_STR("Write sections discarded because their writer died inside "
               "them (counted by the writer that took the lock over)."),
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef SeqRecord_members[] = {
    {"__weaklistoffset__", Py_T_PYSSIZET,
     offsetof(SeqRecordObject, weakreflist), Py_READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

PyDoc_STRVAR(SeqRecord_doc,
"SeqRecord(declaration=None, /, **fields)\n--\n\n"
"Numeric fields held in C, with snapshots that never wait.\n\n"
"Each keyword names a field and gives its struct format code: 'd' 'f'\n"
"(float64/32), 'q' 'i' 'h' 'b' (signed 64/32/16/8-bit), 'Q' 'I' 'H' 'B'\n"
"(unsigned), '?' (bool); a count and a code for a fixed-length array\n"
"('16d', '8?': read as a tuple), or a shape and a code ('(3,3)d': read\n"
"as nested tuples, numpy's tolist() order).  Fields start at zero.\n"
"self.format is the struct format of a snapshot, self.dtype the numpy\n"
"dtype (np.dtype(self.format) cannot parse struct formats).\n"
"Or a typing.NamedTuple class declares them instead (SeqRecord(Pose)):\n"
"float is 'd', int 'q', bool '?', Annotated[T, code] any other code; its\n"
"defaults are not applied.  read() returns a named snapshot (a tuple whose\n"
"fields are also attributes: snap.x), or an instance of the declared\n"
"class, made without calling its __new__ or __init__.\n"
"The record is a latch: two copies of the numbers, writers (update,\n"
"write) serialise and change one while readers (read, read_dict,\n"
"rec[name], get, read_into) copy the other, so a reader never waits for\n"
"a writer, not even a slow, stopped or dead one, and a write section's\n"
"changes become visible together when it ends.  SeqRecord.create/attach\n"
"put a record in memory shared between processes.\n\n"
"Readers never take the lock and write nothing to the record but, in a\n"
"write storm, one word that asks writers for a turn; a record attached\n"
"read-only, nothing at all.  The buffer is untrusted input: whatever\n"
"another process writes into it, readers stay inside the record, never\n"
"crash and keep their timeouts.  On a free-threaded build, bind\n"
"the method in each reader thread (``read = rec.read``) for reads that\n"
"scale with cores: a call through a name all threads share (a global\n"
"``rec.read()``, ``self.rec.read()``, ``rec[name]``) writes the record\n"
"object's reference count.");

static PyType_Slot SeqRecord_slots[] = {
    {Py_tp_new, SeqRecord_new},
    {Py_tp_dealloc, SeqRecord_dealloc},
    {Py_tp_traverse, SeqRecord_traverse},
    {Py_tp_clear, SeqRecord_clear},
    {Py_tp_repr, SeqRecord_repr},
    {Py_tp_methods, SeqRecord_methods},
    {Py_tp_getset, SeqRecord_getset},
    {Py_tp_members, SeqRecord_members},
    {Py_mp_subscript, SeqRecord_subscript},
    {Py_tp_doc, (void *)SeqRecord_doc},
    {0, NULL},
};

PyType_Spec seqrecord_type_spec = {
    .name = "seqlock_py.SeqRecord",
    .basicsize = sizeof(SeqRecordObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = SeqRecord_slots,
};

