/* The records of a v2 record batch, walked in C: what Kafka's LogValidator reads on produce.
 *
 * A v2 batch's records section (uncompressed, or the output of its codec) is a sequence of
 *
 *     length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
 *     keyLength varint | key | valueLength varint | value |
 *     headerCount varint | (headerKeyLength varint | key | headerValueLength varint | value)*
 *
 * with zigzag varints. The broker must read every record's timestamp (to refuse one outside
 * message.timestamp.before/after.max.ms and to store the batch's true maximum) and check that
 * the records fit the section exactly and number `recordsCount` (Kafka's INVALID_RECORD). Doing
 * that in Python would cost a loop iteration per record on the produce path; here it is a few
 * nanoseconds per record.
 *
 * The walk is a byte-driven state machine, so a compressed batch can be decompressed in
 * bounded chunks and fed piece by piece (`Scanner.feed`): a record or a varint may straddle two
 * chunks, and keys and values are skipped without being held. `scan` is the one-shot form for
 * an uncompressed section.
 *
 * Timestamps: a record's is baseTimestamp + timestampDelta (64-bit, wrapping like Java's long).
 * The result's maximum starts at -1 (NO_TIMESTAMP) as Kafka's does; a record whose timestamp is
 * -1 is exempt from the window, every other one outside [earliest, latest] is listed by index.
 * Structural faults raise RecordError (a ValueError) with Kafka's wording where it has one.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

enum field {
    F_LENGTH,
    F_ATTRIBUTES,
    F_TIMESTAMP,
    F_OFFSET,
    F_KEY_LENGTH,
    F_KEY,
    F_VALUE_LENGTH,
    F_VALUE,
    F_HEADER_COUNT,
    F_HEADER_KEY_LENGTH,
    F_HEADER_KEY,
    F_HEADER_VALUE_LENGTH,
    F_HEADER_VALUE,
};

typedef struct {
    int64_t count;        /* recordsCount from the batch header */
    int64_t seen;         /* records walked to their end */
    int64_t base_ts, earliest, latest, max_ts;
    enum field field;     /* what the next byte belongs to */
    uint64_t acc;         /* the varint being read */
    int vbytes;           /* its bytes so far */
    int64_t body_len;     /* the current record's declared length (after its length varint) */
    int64_t body_read;    /* its bytes consumed so far */
    int64_t skip;         /* bytes left of the key, value or header part being skipped */
    int64_t headers_left;
    int64_t ts;           /* the current record's timestamp */
    PyObject *invalid;    /* indices of records outside the window; NULL while there are none */
} walk_t;

static PyObject *RecordError;

static void walk_init(walk_t *w, int64_t count, int64_t base_ts, int64_t earliest, int64_t latest) {
    memset(w, 0, sizeof(*w));
    w->count = count;
    w->base_ts = base_ts;
    w->earliest = earliest;
    w->latest = latest;
    w->max_ts = -1;
    w->field = F_LENGTH;
}

static int fail(const char *message) {
    PyErr_SetString(RecordError, message);
    return -1;
}

static int32_t zigzag32(uint64_t raw) {
    uint32_t v = (uint32_t)raw;
    return (int32_t)((v >> 1) ^ (0u - (v & 1u)));
}

static int64_t zigzag64(uint64_t raw) {
    return (int64_t)((raw >> 1) ^ (0ull - (raw & 1ull)));
}

/* The record is complete: check it filled its declared length, then its timestamp. */
static int end_record(walk_t *w) {
    if (w->body_read != w->body_len) {
        PyErr_Format(RecordError,
                     "Invalid record size: expected to read %lld bytes in record payload, but instead read %lld",
                     (long long)w->body_len, (long long)w->body_read);
        return -1;
    }
    if (w->ts != -1) {
        if (w->ts > w->max_ts)
            w->max_ts = w->ts;
        if (w->ts < w->earliest || w->ts > w->latest) {
            PyObject *index = PyLong_FromLongLong(w->seen);
            if (index == NULL)
                return -1;
            if (w->invalid == NULL && (w->invalid = PyList_New(0)) == NULL) {
                Py_DECREF(index);
                return -1;
            }
            int failed = PyList_Append(w->invalid, index);
            Py_DECREF(index);
            if (failed)
                return -1;
        }
    }
    w->seen++;
    w->field = F_LENGTH;
    return 0;
}

/* A length field is complete: skip what it announces (a negative length is a null, no bytes)
 * or, when there is nothing to skip, move past it at once. */
static int start_skip(walk_t *w, int64_t length, enum field skipping) {
    w->skip = length > 0 ? length : 0;
    if (w->skip > w->body_len - w->body_read)
        return fail("Found invalid record structure: a field overruns its record");
    w->field = skipping;
    return 0;
}

/* After a key, value or header part has been skipped to its end. */
static int after_skip(walk_t *w) {
    switch (w->field) {
    case F_KEY:
        w->field = F_VALUE_LENGTH;
        return 0;
    case F_VALUE:
        w->field = F_HEADER_COUNT;
        return 0;
    case F_HEADER_KEY:
        w->field = F_HEADER_VALUE_LENGTH;
        return 0;
    case F_HEADER_VALUE:
        if (--w->headers_left > 0) {
            w->field = F_HEADER_KEY_LENGTH;
            return 0;
        }
        return end_record(w);
    default:
        return fail("internal error: not skipping");
    }
}

/* One complete varint (or the attributes byte) of the current record. */
static int field_done(walk_t *w, uint64_t raw) {
    int32_t n;
    switch (w->field) {
    case F_LENGTH:
        n = zigzag32(raw);
        if (n < 0)
            return fail("Invalid record size: negative record length");
        w->body_len = n;
        w->body_read = 0;
        w->field = F_ATTRIBUTES;
        return 0;
    case F_ATTRIBUTES:
        w->field = F_TIMESTAMP;
        return 0;
    case F_TIMESTAMP:
        w->ts = (int64_t)((uint64_t)w->base_ts + (uint64_t)zigzag64(raw));
        w->field = F_OFFSET;
        return 0;
    case F_OFFSET:
        w->field = F_KEY_LENGTH;
        return 0;
    case F_KEY_LENGTH:
        return start_skip(w, zigzag32(raw), F_KEY);
    case F_VALUE_LENGTH:
        return start_skip(w, zigzag32(raw), F_VALUE);
    case F_HEADER_COUNT:
        n = zigzag32(raw);
        if (n < 0)
            return fail("Found invalid number of record headers");
        if (n > w->body_len - w->body_read)
            return fail("Found invalid number of record headers: more than the bytes left in the record");
        w->headers_left = n;
        if (n == 0)
            return end_record(w);
        w->field = F_HEADER_KEY_LENGTH;
        return 0;
    case F_HEADER_KEY_LENGTH:
        n = zigzag32(raw);
        if (n < 0)
            return fail("Invalid negative header key size");
        return start_skip(w, n, F_HEADER_KEY);
    case F_HEADER_VALUE_LENGTH:
        return start_skip(w, zigzag32(raw), F_HEADER_VALUE);
    default:
        return fail("internal error: not a varint field");
    }
}

static int is_skip(enum field f) {
    return f == F_KEY || f == F_VALUE || f == F_HEADER_KEY || f == F_HEADER_VALUE;
}

static int walk_feed(walk_t *w, const uint8_t *p, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        if (is_skip(w->field)) {
            if (w->skip > 0) {
                int64_t take = w->skip < (int64_t)(n - i) ? w->skip : (int64_t)(n - i);
                w->skip -= take;
                w->body_read += take;
                i += (Py_ssize_t)take;
                if (w->skip > 0)
                    continue; /* more of it in the next chunk */
            }
            if (after_skip(w) < 0)
                return -1;
            continue;
        }
        if (w->field == F_LENGTH && w->vbytes == 0 && w->seen == w->count)
            return fail("Incorrect declared batch size, records still remaining in file");
        uint8_t b = p[i++];
        if (w->field != F_LENGTH) {
            if (++w->body_read > w->body_len)
                return fail("Found invalid record structure: a field overruns its record");
        }
        if (w->field == F_ATTRIBUTES) {
            if (field_done(w, b) < 0)
                return -1;
            continue;
        }
        int max_bytes = w->field == F_TIMESTAMP ? 10 : 5;
        w->acc |= (uint64_t)(b & 0x7f) << (7 * w->vbytes);
        w->vbytes++;
        if (b & 0x80) {
            if (w->vbytes == max_bytes)
                return fail(max_bytes == 10 ? "Varlong is too long" : "Varint is too long");
            continue;
        }
        uint64_t raw = w->acc;
        w->acc = 0;
        w->vbytes = 0;
        if (field_done(w, raw) < 0)
            return -1;
    }
    /* a zero-length key or value that ends the chunk is moved past now, so that a section
     * ending here is seen as complete */
    while (is_skip(w->field) && w->skip == 0) {
        if (after_skip(w) < 0)
            return -1;
    }
    return 0;
}

static PyObject *walk_finish(walk_t *w) {
    if (w->field != F_LENGTH || w->vbytes != 0 || w->seen != w->count) {
        fail("Incorrect declared batch size, premature EOF reached");
        return NULL;
    }
    PyObject *invalid = w->invalid != NULL ? w->invalid : PyList_New(0);
    w->invalid = NULL;
    if (invalid == NULL)
        return NULL;
    return Py_BuildValue("(LN)", (long long)w->max_ts, invalid);
}

/* ---- scan(): the whole section at once ------------------------------------------------ */

PyDoc_STRVAR(scan_doc,
"scan(records, count, base_timestamp, earliest, latest) -> (max_timestamp, invalid)\n\n"
"Walk an uncompressed records section of `count` records: the largest record timestamp\n"
"(-1 if none) and the indices of records whose timestamp (other than -1) lies outside\n"
"[earliest, latest]. Raises RecordError when the records do not fit the section exactly.");

static PyObject *scan(PyObject *module, PyObject *args) {
    Py_buffer view;
    long long count, base_ts, earliest, latest;
    if (!PyArg_ParseTuple(args, "y*LLLL:scan", &view, &count, &base_ts, &earliest, &latest))
        return NULL;
    walk_t w;
    walk_init(&w, count, base_ts, earliest, latest);
    PyObject *result = NULL;
    if (walk_feed(&w, (const uint8_t *)view.buf, view.len) == 0)
        result = walk_finish(&w);
    Py_XDECREF(w.invalid);
    PyBuffer_Release(&view);
    return result;
}

/* ---- Scanner: the same walk fed in chunks ----------------------------------------------- */

typedef struct {
    PyObject_HEAD
    walk_t walk;
    int broken; /* finished, or a feed raised: no more feeding */
} Scanner;

static int Scanner_init(Scanner *self, PyObject *args, PyObject *kwds) {
    static char *names[] = {"count", "base_timestamp", "earliest", "latest", NULL};
    long long count, base_ts, earliest, latest;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "LLLL:Scanner", names, &count, &base_ts, &earliest, &latest))
        return -1;
    Py_CLEAR(self->walk.invalid);
    walk_init(&self->walk, count, base_ts, earliest, latest);
    self->broken = 0;
    return 0;
}

static void Scanner_dealloc(Scanner *self) {
    Py_CLEAR(self->walk.invalid);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Scanner_feed(Scanner *self, PyObject *arg) {
    if (self->broken) {
        PyErr_SetString(PyExc_RuntimeError, "the scanner is done (it finished or failed)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int failed = walk_feed(&self->walk, (const uint8_t *)view.buf, view.len);
    PyBuffer_Release(&view);
    if (failed) {
        self->broken = 1;
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Scanner_finish(Scanner *self, PyObject *Py_UNUSED(ignored)) {
    if (self->broken) {
        PyErr_SetString(PyExc_RuntimeError, "the scanner is done (it finished or failed)");
        return NULL;
    }
    self->broken = 1; /* one answer per walk */
    return walk_finish(&self->walk);
}

static PyMethodDef Scanner_methods[] = {
    {"feed", (PyCFunction)Scanner_feed, METH_O,
     "feed(chunk): walk the next bytes of the section; raises RecordError on a structural fault."},
    {"finish", (PyCFunction)Scanner_finish, METH_NOARGS,
     "finish() -> (max_timestamp, invalid): the section ended; raises RecordError if a record is cut short "
     "or fewer than `count` were seen."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "broker.protocol._records.Scanner",
    .tp_doc = "Scanner(count, base_timestamp, earliest, latest): `scan` fed in chunks (a decompressed stream).",
    .tp_basicsize = sizeof(Scanner),
    .tp_itemsize = 0,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
};

static PyMethodDef module_methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "broker.protocol._records",
    .m_doc = "The records of a v2 record batch walked in C (see broker/protocol/records.py).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__records(void) {
    if (PyType_Ready(&ScannerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    RecordError = PyErr_NewExceptionWithDoc(
        "broker.protocol._records.RecordError",
        "The records do not fit their batch (Kafka's InvalidRecordException: INVALID_RECORD).",
        PyExc_ValueError, NULL);
    if (RecordError == NULL || PyModule_AddObjectRef(m, "RecordError", RecordError) < 0 ||
        PyModule_AddObjectRef(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
