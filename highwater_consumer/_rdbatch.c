/* highwater_consumer._rdbatch: a changefeed's output records read in batches, as columns.
 *
 * librdkafka (the copy confluent-kafka ships, dlopen'ed by the path Python gives: no headers
 * and no link at build time; the few declarations below are its stable C API) fetches the
 * assigned partitions; a batch comes back as a handful of buffers (Arrow's layouts: offsets,
 * data, validity bitmaps) instead of a Python object per record. Each JSON record is scanned
 * here, with the GIL released, for what windows need: a row change's `updated` HLC (wall and
 * logical), its `after`'s member names (the applier's shape), its key's width, or a marker's
 * `resolved`. The scan only says what it is sure of: a record it is not sure of (not strict
 * JSON, escapes where it reads names or times, a form it does not know) is kind CHECK and read
 * by the Python decoder, which decides as the per-row consumer does (a row, a marker, or bad).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

/* ---- librdkafka's C API: the declarations used (rdkafka.h, stable since 1.x) ---- */
typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_queue_s rd_kafka_queue_t;
typedef struct {
    char *topic;
    int32_t partition;
    int64_t offset;
    void *metadata;
    size_t metadata_size;
    void *opaque;
    int err;
    void *_private;
} rd_kafka_topic_partition_t;
typedef struct {
    int cnt;
    int size;
    rd_kafka_topic_partition_t *elems;
} rd_kafka_topic_partition_list_t;
typedef struct {
    int err;
    rd_kafka_topic_t *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *_private;
} rd_kafka_message_t;

static struct {
    rd_kafka_conf_t *(*conf_new)(void);
    int (*conf_set)(rd_kafka_conf_t *, const char *, const char *, char *, size_t);
    void (*conf_destroy)(rd_kafka_conf_t *);
    rd_kafka_t *(*new_)(int, rd_kafka_conf_t *, char *, size_t);
    rd_kafka_topic_partition_list_t *(*list_new)(int);
    rd_kafka_topic_partition_t *(*list_add)(rd_kafka_topic_partition_list_t *, const char *,
                                            int32_t);
    void (*list_destroy)(rd_kafka_topic_partition_list_t *);
    int (*assign)(rd_kafka_t *, const rd_kafka_topic_partition_list_t *);
    int (*pause)(rd_kafka_t *, rd_kafka_topic_partition_list_t *);
    int (*resume)(rd_kafka_t *, rd_kafka_topic_partition_list_t *);
    int (*poll_set_consumer)(rd_kafka_t *);
    rd_kafka_queue_t *(*queue_get_consumer)(rd_kafka_t *);
    void (*queue_destroy)(rd_kafka_queue_t *);
    ssize_t (*consume_batch_queue)(rd_kafka_queue_t *, int, rd_kafka_message_t **, size_t);
    void (*message_destroy)(rd_kafka_message_t *);
    const char *(*topic_name)(const rd_kafka_topic_t *);
    const char *(*err2str)(int);
    int (*consumer_close)(rd_kafka_t *);
    void (*destroy)(rd_kafka_t *);
    const char *(*version_str)(void);
} rk;
static void *library = NULL;

#define RD_KAFKA_CONSUMER 1
#define RD_KAFKA_CONF_OK 0

/* ---- the scan: strict JSON (RFC 8259, UTF-8), sure or not ---- */
enum { ROW = 0, MARKER = 1, CHECK = 2 };
#define MAX_DEPTH 200
#define MAX_NAMES 256

typedef struct {
    const uint8_t *p, *end;
    int depth;
} Scan;

static void ws(Scan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static int hex4(const uint8_t *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return 0;
    }
    *out = v;
    return 1;
}

/* A string at s->p (its quote); 1: sure it is valid (its body [*start, *stop) and whether it
 * has escapes), 0: not sure. A \u escape of a surrogate is "not sure" (orjson refuses a lone
 * one, the exact reader may not). */
static int string(Scan *s, const uint8_t **start, const uint8_t **stop, int *escaped) {
    const uint8_t *p = s->p + 1, *end = s->end;
    *start = p;
    *escaped = 0;
    while (p < end) {
        uint8_t c = *p;
        if (c == '"') {
            *stop = p;
            s->p = p + 1;
            return 1;
        }
        if (c < 0x20) return 0;
        if (c == '\\') {
            *escaped = 1;
            if (p + 1 >= end) return 0;
            uint8_t e = p[1];
            if (e == 'u') {
                unsigned v;
                if (p + 6 > end || !hex4(p + 2, &v) || (v >= 0xD800 && v <= 0xDFFF)) return 0;
                p += 6;
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' ||
                       e == 'r' || e == 't') {
                p += 2;
            } else {
                return 0;
            }
            continue;
        }
        if (c < 0x80) {
            p++;
            continue;
        }
        /* UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF */
        if (c >= 0xC2 && c <= 0xDF) {
            if (p + 1 >= end || (p[1] & 0xC0) != 0x80) return 0;
            p += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (p + 2 >= end || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
            if (c == 0xE0 && p[1] < 0xA0) return 0;
            if (c == 0xED && p[1] > 0x9F) return 0;
            p += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (p + 3 >= end || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 ||
                (p[3] & 0xC0) != 0x80)
                return 0;
            if (c == 0xF0 && p[1] < 0x90) return 0;
            if (c == 0xF4 && p[1] > 0x8F) return 0;
            p += 4;
        } else {
            return 0;
        }
    }
    return 0;
}

static int number(Scan *s) {
    const uint8_t *p = s->p, *end = s->end;
    if (p < end && *p == '-') p++;
    if (p >= end) return 0;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (p < end && *p >= '0' && *p <= '9') p++;
    else return 0;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9') return 0;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return 0;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    s->p = p;
    return 1;
}

static int value(Scan *s);

static int literal(Scan *s, const char *word, size_t n) {
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0) return 0;
    s->p += n;
    return 1;
}

/* A value; 1: sure it is valid (s->p past it), 0: not sure. */
static int value(Scan *s) {
    const uint8_t *a, *b;
    int escaped;
    ws(s);
    if (s->p >= s->end) return 0;
    switch (*s->p) {
    case '"':
        return string(s, &a, &b, &escaped);
    case '{':
    case '[': {
        uint8_t close = *s->p == '{' ? '}' : ']';
        int object = close == '}';
        if (++s->depth > MAX_DEPTH) return 0;
        s->p++;
        ws(s);
        if (s->p < s->end && *s->p == close) {
            s->p++;
            s->depth--;
            return 1;
        }
        for (;;) {
            if (object) {
                ws(s);
                if (s->p >= s->end || *s->p != '"' || !string(s, &a, &b, &escaped)) return 0;
                ws(s);
                if (s->p >= s->end || *s->p != ':') return 0;
                s->p++;
            }
            if (!value(s)) return 0;
            ws(s);
            if (s->p >= s->end) return 0;
            if (*s->p == ',') {
                s->p++;
                continue;
            }
            if (*s->p != close) return 0;
            s->p++;
            s->depth--;
            return 1;
        }
    }
    case 't':
        return literal(s, "true", 4);
    case 'f':
        return literal(s, "false", 5);
    case 'n':
        return literal(s, "null", 4);
    default:
        return number(s);
    }
}

/* The HLC's wire form "<1-20 digits>.<1-10 digits>" (the logical part's digits as a number),
 * the wall within 64 bits; 0: another form (Python reads it). */
static int hlc(const uint8_t *a, const uint8_t *b, uint64_t *wall, uint64_t *logical) {
    const uint8_t *dot = memchr(a, '.', (size_t)(b - a));
    if (dot == NULL || dot == a || dot - a > 20 || b - dot - 1 < 1 || b - dot - 1 > 10) return 0;
    uint64_t w = 0, l = 0;
    for (const uint8_t *p = a; p < dot; p++) {
        if (*p < '0' || *p > '9') return 0;
        unsigned d = *p - '0';
        if (w > (UINT64_MAX - d) / 10) return 0;
        w = w * 10 + d;
    }
    for (const uint8_t *p = dot + 1; p < b; p++) {
        if (*p < '0' || *p > '9') return 0;
        l = l * 10 + (unsigned)(*p - '0');
    }
    *wall = w;
    *logical = l;
    return 1;
}

static int named(const uint8_t *a, const uint8_t *b, const char *name) {
    size_t n = strlen(name);
    return (size_t)(b - a) == n && memcmp(a, name, n) == 0;
}

typedef struct {
    int kind;
    uint64_t wall, logical;
    int32_t width;                 /* a row's key: its elements */
    int deleted;                   /* a row's after is null */
    const uint8_t *names[MAX_NAMES]; /* a row's after: its members' names */
    size_t lengths[MAX_NAMES];
    int count;
} Found;

/* The members of the object at s->p, kept in `found` (after's names) when `keep`. */
static int members(Scan *s, Found *found, int keep) {
    const uint8_t *a, *b;
    int escaped;
    s->p++; /* { */
    s->depth++;
    ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        s->depth--;
        return 1;
    }
    for (;;) {
        ws(s);
        if (s->p >= s->end || *s->p != '"' || !string(s, &a, &b, &escaped)) return 0;
        if (keep) {
            if (escaped || found->count >= MAX_NAMES) return 0;
            for (int i = 0; i < found->count; i++) /* a name twice: Python's dict decides */
                if (found->lengths[i] == (size_t)(b - a) && memcmp(found->names[i], a, b - a) == 0)
                    return 0;
            found->names[found->count] = a;
            found->lengths[found->count++] = (size_t)(b - a);
        }
        ws(s);
        if (s->p >= s->end || *s->p != ':') return 0;
        s->p++;
        if (!value(s)) return 0;
        ws(s);
        if (s->p >= s->end) return 0;
        if (*s->p == ',') {
            s->p++;
            continue;
        }
        if (*s->p != '}') return 0;
        s->p++;
        s->depth--;
        return 1;
    }
}

/* What a record is, as sure as JsonDecoder.read would say it; CHECK when not sure. */
static void classify(const uint8_t *key, size_t key_len, int has_key, const uint8_t *val,
                     size_t val_len, int has_value, Found *found) {
    Scan s = {val, val + val_len, 0};
    const uint8_t *a, *b, *ua = NULL, *ub = NULL, *ra = NULL, *rb = NULL;
    int escaped, seen_after = 0, seen_before = 0, seen = 0;
    found->kind = CHECK;
    found->count = 0;
    found->deleted = 0;
    found->width = 0;
    if (!has_value) return;
    ws(&s);
    if (s.p >= s.end || *s.p != '{') return;
    s.p++;
    s.depth = 1;
    ws(&s);
    if (s.p < s.end && *s.p == '}') return; /* {}: Python says why it is not ours */
    for (;;) {
        ws(&s);
        if (s.p >= s.end || *s.p != '"' || !string(&s, &a, &b, &escaped) || escaped) return;
        ws(&s);
        if (s.p >= s.end || *s.p != ':') return;
        s.p++;
        ws(&s);
        if (s.p >= s.end) return;
        seen++;
        if (named(a, b, "updated") || named(a, b, "resolved")) {
            const uint8_t **x = named(a, b, "updated") ? &ua : &ra, **y = x == &ua ? &ub : &rb;
            if (*x != NULL || *s.p != '"' || !string(&s, x, y, &escaped) || escaped) return;
        } else if (named(a, b, "after")) {
            if (seen_after++) return;
            if (*s.p == '{') {
                if (!members(&s, found, 1)) return;
            } else if (literal(&s, "null", 4)) {
                found->deleted = 1;
            } else {
                return;
            }
        } else if (named(a, b, "before")) {
            if (seen_before++) return;
            if (*s.p == '{') {
                if (!members(&s, found, 0)) return;
            } else if (!literal(&s, "null", 4)) {
                return;
            }
        } else if (!value(&s)) {
            return;
        }
        ws(&s);
        if (s.p >= s.end) return;
        if (*s.p == ',') {
            s.p++;
            continue;
        }
        if (*s.p != '}') return;
        s.p++;
        break;
    }
    ws(&s);
    if (s.p != s.end) return;
    if (ua != NULL) { /* a row change: after given, the key a JSON array */
        if (!seen_after || !has_key || !hlc(ua, ub, &found->wall, &found->logical)) return;
        Scan k = {key, key + key_len, 0};
        ws(&k);
        if (k.p >= k.end || *k.p != '[') return;
        k.p++;
        k.depth = 1;
        ws(&k);
        int32_t width = 0;
        if (k.p < k.end && *k.p == ']') {
            k.p++;
        } else {
            for (;;) {
                if (!value(&k)) return;
                width++;
                ws(&k);
                if (k.p >= k.end) return;
                if (*k.p == ',') {
                    k.p++;
                    continue;
                }
                if (*k.p != ']') return;
                k.p++;
                break;
            }
        }
        ws(&k);
        if (k.p != k.end) return;
        found->width = width;
        found->kind = ROW;
    } else if (ra != NULL && seen == 1) {
        if (!hlc(ra, rb, &found->wall, &found->logical)) return;
        found->kind = MARKER;
    }
}

/* ---- the reader ---- */
typedef struct {
    PyObject_HEAD rd_kafka_t *rk;
    rd_kafka_queue_t *queue;
    PyObject *topics; /* tuple of str: the topics read, in slot order */
    const char **names;
    int32_t *first;   /* per topic: its partition 0's slot */
    int32_t *counts;  /* per topic: its partitions */
    int ntopics;
    rd_kafka_message_t **messages;
    size_t capacity;
} Reader;

static PyObject *NativeError;

static void reader_free(Reader *self) {
    if (self->queue != NULL) rk.queue_destroy(self->queue);
    if (self->rk != NULL) {
        Py_BEGIN_ALLOW_THREADS rk.consumer_close(self->rk);
        rk.destroy(self->rk);
        Py_END_ALLOW_THREADS
    }
    self->queue = NULL;
    self->rk = NULL;
    PyMem_Free(self->names);
    PyMem_Free(self->first);
    PyMem_Free(self->counts);
    PyMem_Free(self->messages);
    self->names = NULL;
    self->first = self->counts = NULL;
    self->messages = NULL;
    Py_CLEAR(self->topics);
}

static void reader_dealloc(Reader *self) {
    reader_free(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Reader(config: list[tuple[str, str]], partitions: list[tuple[str, int, int]]):
 * topic, partition count, and the partitions' start offsets in slot order (list of int). */
static int reader_init(Reader *self, PyObject *args, PyObject *kwds) {
    PyObject *config, *topics, *starts;
    char errstr[512];
    if (library == NULL) {
        PyErr_SetString(NativeError, "librdkafka is not loaded (_rdbatch.load)");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &config, &PyList_Type, &topics,
                          &PyList_Type, &starts))
        return -1;
    rd_kafka_conf_t *conf = rk.conf_new();
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(config); i++) {
        const char *name, *val;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(config, i), "ss", &name, &val)) {
            rk.conf_destroy(conf);
            return -1;
        }
        if (rk.conf_set(conf, name, val, errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
            rk.conf_destroy(conf);
            PyErr_Format(NativeError, "%s", errstr);
            return -1;
        }
    }
    rd_kafka_t *made = rk.new_(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    if (made == NULL) {
        rk.conf_destroy(conf);
        PyErr_Format(NativeError, "%s", errstr);
        return -1;
    }
    self->rk = made;
    rk.poll_set_consumer(made);
    self->queue = rk.queue_get_consumer(made);
    int n = (int)PyList_GET_SIZE(topics);
    self->topics = PyTuple_New(n);
    self->names = PyMem_Calloc(n + 1, sizeof(char *));
    self->first = PyMem_Calloc(n + 1, sizeof(int32_t));
    self->counts = PyMem_Calloc(n + 1, sizeof(int32_t));
    if (self->topics == NULL || self->names == NULL || self->first == NULL || self->counts == NULL)
        return -1;
    self->ntopics = n;
    rd_kafka_topic_partition_list_t *list = rk.list_new(16);
    int32_t slot = 0;
    for (int t = 0; t < n; t++) {
        PyObject *name;
        int count;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(topics, t), "Ui", &name, &count)) {
            rk.list_destroy(list);
            return -1;
        }
        Py_INCREF(name);
        PyTuple_SET_ITEM(self->topics, t, name);
        self->names[t] = PyUnicode_AsUTF8(name);
        self->first[t] = slot;
        self->counts[t] = count;
        for (int p = 0; p < count; p++, slot++) {
            if (slot >= PyList_GET_SIZE(starts)) {
                rk.list_destroy(list);
                PyErr_SetString(PyExc_ValueError, "a start offset for every partition");
                return -1;
            }
            long long start = PyLong_AsLongLong(PyList_GET_ITEM(starts, slot));
            if (start == -1 && PyErr_Occurred()) {
                rk.list_destroy(list);
                return -1;
            }
            rk.list_add(list, self->names[t], p)->offset = start;
        }
    }
    int err = rk.assign(made, list);
    rk.list_destroy(list);
    if (err) {
        PyErr_Format(NativeError, "assign: %s", rk.err2str(err));
        return -1;
    }
    return 0;
}

static rd_kafka_topic_partition_list_t *slots_list(Reader *self, PyObject *slots) {
    rd_kafka_topic_partition_list_t *list = rk.list_new(16);
    PyObject *it = PyObject_GetIter(slots), *item;
    if (it == NULL) {
        rk.list_destroy(list);
        return NULL;
    }
    while ((item = PyIter_Next(it)) != NULL) {
        long slot = PyLong_AsLong(item);
        Py_DECREF(item);
        for (int t = 0; t < self->ntopics; t++)
            if (slot >= self->first[t] && slot < self->first[t] + self->counts[t])
                rk.list_add(list, self->names[t], (int32_t)(slot - self->first[t]));
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) {
        rk.list_destroy(list);
        return NULL;
    }
    return list;
}

static PyObject *reader_pause(Reader *self, PyObject *args) {
    PyObject *slots;
    int resume;
    if (self->rk == NULL || !PyArg_ParseTuple(args, "Op", &slots, &resume)) {
        if (!PyErr_Occurred()) PyErr_SetString(NativeError, "the reader is closed");
        return NULL;
    }
    rd_kafka_topic_partition_list_t *list = slots_list(self, slots);
    if (list == NULL) return NULL;
    int err = resume ? rk.resume(self->rk, list) : rk.pause(self->rk, list);
    rk.list_destroy(list);
    if (err) return PyErr_Format(NativeError, "pause/resume: %s", rk.err2str(err));
    Py_RETURN_NONE;
}

static int32_t slot_of(Reader *self, rd_kafka_message_t *m, const char **last, int *last_t) {
    const char *name = m->rkt ? rk.topic_name(m->rkt) : NULL;
    if (name == NULL) return -1;
    if (name != *last) {
        *last_t = -1;
        for (int t = 0; t < self->ntopics; t++)
            if (strcmp(name, self->names[t]) == 0) *last_t = t;
        *last = name;
    }
    int t = *last_t;
    if (t < 0 || m->partition < 0 || m->partition >= self->counts[t]) return -1;
    return self->first[t] + m->partition;
}

static void set_bit(uint8_t *bits, size_t i) { bits[i >> 3] |= (uint8_t)(1u << (i & 7)); }

#define NEW(size) PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(size))
#define DATA(o) ((uint8_t *)PyByteArray_AS_STRING(o))

/* read(max, timeout_ms) -> (n, columns: dict of bytearray, errors: list) */
static PyObject *reader_read(Reader *self, PyObject *args) {
    Py_ssize_t max;
    int timeout;
    if (self->rk == NULL) return PyErr_Format(NativeError, "the reader is closed");
    if (!PyArg_ParseTuple(args, "ni", &max, &timeout)) return NULL;
    if (max < 1) max = 1;
    if ((size_t)max > self->capacity) {
        rd_kafka_message_t **grown = PyMem_Realloc(self->messages, max * sizeof(void *));
        if (grown == NULL) return PyErr_NoMemory();
        self->messages = grown;
        self->capacity = (size_t)max;
    }
    ssize_t got;
    Py_BEGIN_ALLOW_THREADS got = rk.consume_batch_queue(self->queue, timeout, self->messages,
                                                         (size_t)max);
    Py_END_ALLOW_THREADS if (got < 0) return PyErr_Format(NativeError, "reading failed");
    PyObject *errors = PyList_New(0);
    size_t n = 0, key_bytes = 0, value_bytes = 0, name_bytes = 0;
    const char *last = NULL;
    int last_t = -1;
    for (ssize_t i = 0; i < got; i++) { /* errors out, records packed to the front */
        rd_kafka_message_t *m = self->messages[i];
        if (m->err) {
            int32_t slot = slot_of(self, m, &last, &last_t);
            PyObject *e = Py_BuildValue("(iLis)", slot, (long long)m->offset, m->err,
                                        rk.err2str(m->err));
            if (e == NULL || PyList_Append(errors, e) < 0) {
                Py_XDECREF(e);
                Py_DECREF(errors);
                for (ssize_t j = i; j < got; j++) rk.message_destroy(self->messages[j]);
                return NULL;
            }
            Py_DECREF(e);
            rk.message_destroy(m);
            continue;
        }
        self->messages[n++] = m;
        key_bytes += m->key_len;
        value_bytes += m->len;
    }
    /* the after's names are at most the value's bytes */
    name_bytes = value_bytes;
    size_t bitmap = (n + 7) / 8 + 1;
    PyObject *slot = NEW(n * 4), *offset = NEW(n * 8), *kind = NEW(n), *wall = NEW(n * 8),
             *logical = NEW(n * 8), *width = NEW(n * 4), *key_off = NEW((n + 1) * 8),
             *key_data = NEW(key_bytes), *key_valid = NEW(bitmap), *val_off = NEW((n + 1) * 8),
             *val_data = NEW(value_bytes), *val_valid = NEW(bitmap),
             *shape_off = NEW((n + 1) * 8), *shape_data = NEW(name_bytes),
             *shape_valid = NEW(bitmap);
    PyObject *all[] = {slot,    offset,   kind,      wall,       logical,   width,
                       key_off, key_data, key_valid, val_off,    val_data,  val_valid,
                       shape_off, shape_data, shape_valid};
    int failed = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) failed |= all[i] == NULL;
    size_t shape_used = 0;
    if (!failed) {
        Py_BEGIN_ALLOW_THREADS;
        int32_t *slots = (int32_t *)DATA(slot), *widths = (int32_t *)DATA(width);
        int64_t *offsets = (int64_t *)DATA(offset), *ko = (int64_t *)DATA(key_off),
                *vo = (int64_t *)DATA(val_off), *so = (int64_t *)DATA(shape_off);
        uint64_t *walls = (uint64_t *)DATA(wall), *logicals = (uint64_t *)DATA(logical);
        uint8_t *kinds = DATA(kind), *kd = DATA(key_data), *vd = DATA(val_data),
                *sd = DATA(shape_data), *kv = DATA(key_valid), *vv = DATA(val_valid),
                *sv = DATA(shape_valid);
        memset(kv, 0, bitmap);
        memset(vv, 0, bitmap);
        memset(sv, 0, bitmap);
        Found *found = malloc(sizeof(Found));
        size_t kpos = 0, vpos = 0;
        ko[0] = vo[0] = so[0] = 0;
        for (size_t i = 0; i < n; i++) {
            rd_kafka_message_t *m = self->messages[i];
            slots[i] = slot_of(self, m, &last, &last_t);
            offsets[i] = m->offset;
            if (m->key != NULL) {
                memcpy(kd + kpos, m->key, m->key_len);
                kpos += m->key_len;
                set_bit(kv, i);
            }
            if (m->payload != NULL) {
                memcpy(vd + vpos, m->payload, m->len);
                vpos += m->len;
                set_bit(vv, i);
            }
            ko[i + 1] = (int64_t)kpos;
            vo[i + 1] = (int64_t)vpos;
            int sure = CHECK;
            if (found != NULL) {
                classify(m->key, m->key_len, m->key != NULL, m->payload, m->len,
                         m->payload != NULL, found);
                sure = found->kind;
            }
            kinds[i] = (uint8_t)sure;
            walls[i] = sure == CHECK ? 0 : found->wall;
            logicals[i] = sure == CHECK ? 0 : found->logical;
            widths[i] = sure == ROW ? found->width : 0;
            if (sure == ROW && !found->deleted) { /* names joined by NUL */
                for (int j = 0; j < found->count; j++) {
                    if (j) sd[shape_used++] = 0;
                    memcpy(sd + shape_used, found->names[j], found->lengths[j]);
                    shape_used += found->lengths[j];
                }
                set_bit(sv, i);
            }
            so[i + 1] = (int64_t)shape_used;
            rk.message_destroy(m);
        }
        free(found);
        Py_END_ALLOW_THREADS;
    } else {
        for (size_t i = 0; i < n; i++) rk.message_destroy(self->messages[i]);
    }
    if (failed) {
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) Py_XDECREF(all[i]);
        Py_DECREF(errors);
        return PyErr_NoMemory();
    }
    if (PyByteArray_Resize(shape_data, (Py_ssize_t)shape_used) < 0) return NULL;
    PyObject *columns = Py_BuildValue(
        "{sNsNsNsNsNsNsNsNsNsNsNsNsNsNsN}", "slot", slot, "offset", offset, "kind", kind, "wall",
        wall, "logical", logical, "width", width, "key_offsets", key_off, "key_data", key_data,
        "key_valid", key_valid, "value_offsets", val_off, "value_data", val_data, "value_valid",
        val_valid, "shape_offsets", shape_off, "shape_data", shape_data, "shape_valid",
        shape_valid);
    if (columns == NULL) {
        Py_DECREF(errors);
        return NULL;
    }
    return Py_BuildValue("(nNN)", (Py_ssize_t)n, columns, errors);
}

static PyObject *reader_close(Reader *self, PyObject *unused) {
    reader_free(self);
    Py_RETURN_NONE;
}

static PyMethodDef reader_methods[] = {
    {"read", (PyCFunction)reader_read, METH_VARARGS,
     "read(max, timeout_ms): up to max records as column buffers, and the errors met"},
    {"pause", (PyCFunction)reader_pause, METH_VARARGS,
     "pause(slots, resume): pause (or resume) the partitions of these slots"},
    {"close", (PyCFunction)reader_close, METH_NOARGS, "leave and free the client"},
    {NULL}};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "highwater_consumer._rdbatch.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "librdkafka's consumer of assigned partitions, read in batches as columns",
    .tp_methods = reader_methods,
    .tp_init = (initproc)reader_init,
    .tp_new = PyType_GenericNew,
};

#define FIND(field, name)                                                                    \
    if ((*(void **)&rk.field = dlsym(handle, name)) == NULL) {                                \
        dlclose(handle);                                                                     \
        return PyErr_Format(NativeError, "%s has no %s", path, name);                        \
    }

/* load(path): librdkafka, dlopen'ed (RTLD_LOCAL: beside confluent-kafka's own use of it). */
static PyObject *load(PyObject *module, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    if (library != NULL) return PyUnicode_FromString(rk.version_str());
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) return PyErr_Format(NativeError, "dlopen %s: %s", path, dlerror());
    FIND(conf_new, "rd_kafka_conf_new");
    FIND(conf_set, "rd_kafka_conf_set");
    FIND(conf_destroy, "rd_kafka_conf_destroy");
    FIND(new_, "rd_kafka_new");
    FIND(list_new, "rd_kafka_topic_partition_list_new");
    FIND(list_add, "rd_kafka_topic_partition_list_add");
    FIND(list_destroy, "rd_kafka_topic_partition_list_destroy");
    FIND(assign, "rd_kafka_assign");
    FIND(pause, "rd_kafka_pause_partitions");
    FIND(resume, "rd_kafka_resume_partitions");
    FIND(poll_set_consumer, "rd_kafka_poll_set_consumer");
    FIND(queue_get_consumer, "rd_kafka_queue_get_consumer");
    FIND(queue_destroy, "rd_kafka_queue_destroy");
    FIND(consume_batch_queue, "rd_kafka_consume_batch_queue");
    FIND(message_destroy, "rd_kafka_message_destroy");
    FIND(topic_name, "rd_kafka_topic_name");
    FIND(err2str, "rd_kafka_err2str");
    FIND(consumer_close, "rd_kafka_consumer_close");
    FIND(destroy, "rd_kafka_destroy");
    FIND(version_str, "rd_kafka_version_str");
    library = handle;
    return PyUnicode_FromString(rk.version_str());
}

/* scan(key, value) -> (kind, wall, logical, width, shape or None): the scan of one record
 * (tests). */
static PyObject *scan(PyObject *module, PyObject *args) {
    Py_buffer key = {0}, val = {0};
    PyObject *ko, *vo;
    if (!PyArg_ParseTuple(args, "OO", &ko, &vo)) return NULL;
    if (ko != Py_None && PyObject_GetBuffer(ko, &key, PyBUF_SIMPLE) < 0) return NULL;
    if (vo != Py_None && PyObject_GetBuffer(vo, &val, PyBUF_SIMPLE) < 0) {
        if (ko != Py_None) PyBuffer_Release(&key);
        return NULL;
    }
    Found *found = PyMem_Malloc(sizeof(Found));
    classify(key.buf, (size_t)key.len, ko != Py_None, val.buf, (size_t)val.len, vo != Py_None,
             found);
    PyObject *shape = Py_None;
    Py_INCREF(shape);
    if (found->kind == ROW && !found->deleted) {
        Py_DECREF(shape);
        shape = PyList_New(found->count);
        for (int j = 0; j < found->count; j++)
            PyList_SET_ITEM(shape, j,
                            PyUnicode_FromStringAndSize((const char *)found->names[j],
                                                        (Py_ssize_t)found->lengths[j]));
    }
    PyObject *out = Py_BuildValue("(iKKiN)", found->kind, (unsigned long long)found->wall,
                                  (unsigned long long)found->logical, (int)found->width, shape);
    PyMem_Free(found);
    if (ko != Py_None) PyBuffer_Release(&key);
    if (vo != Py_None) PyBuffer_Release(&val);
    return out;
}

static PyMethodDef module_methods[] = {
    {"load", load, METH_VARARGS, "load(path): dlopen librdkafka; its version"},
    {"scan", scan, METH_VARARGS, "scan(key, value): what the reader makes of one record"},
    {NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_rdbatch",
                                        "librdkafka batches as column buffers", -1,
                                        module_methods};

PyMODINIT_FUNC PyInit__rdbatch(void) {
    if (PyType_Ready(&ReaderType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    NativeError = PyErr_NewException("highwater_consumer._rdbatch.NativeError", NULL, NULL);
    Py_INCREF(&ReaderType);
    PyModule_AddObject(m, "Reader", (PyObject *)&ReaderType);
    PyModule_AddObject(m, "NativeError", NativeError);
    return m;
}
