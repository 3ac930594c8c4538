/*
 * odradek.protocol._codec: the compiled half of the record-batch codec.
 *
 * Kafka record batch v2, the records section only (after decompression): each
 * record is a varint length, an attributes byte, varint timestamp and offset
 * deltas, a varint-length key and value (-1 = null), and a varint count of
 * headers (varint-length UTF-8 key, varint-length value).
 *
 * The pure-Python twin is odradek/protocol/_codec_py.py; both must give the
 * same results and the same errors (type and message) on every input, which
 * tests/protocol/test_batch_codec.py checks with hypothesis. The wrapper that
 * picks one of them is odradek/protocol/columns.py. Change all three together.
 *
 * Functions (see _codec_py.py for their full contracts):
 *   decode_records(buf, start, end, count, base_offset, base_timestamp, fixed_timestamp)
 *   gather(segments)
 *   encode_record(out, offset_delta, timestamp_delta, key, value, headers)
 *   encode_columns(out, first_offset_delta, base_timestamp, now_ms, keys, values,
 *                  timestamps, headers, lo, hi, max_bytes)
 *   murmur2(data), murmur2_partitions(column, num_partitions)
 *   record_frames_ok(buf, start, end, count)   (the broker's produce validation)
 *   batches_ok(buf, crc32c, allow_control)      (the same, a client's whole batches)
 *
 * Arrays cross the boundary as bytes objects of native-endian int64 / int32.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *CorruptRecordError = NULL;

#if defined(__GNUC__) || defined(__clang__)
#define add_overflow(a, b, r) __builtin_add_overflow(a, b, r)
#define sub_overflow(a, b, r) __builtin_sub_overflow(a, b, r)
#else
static int add_overflow(int64_t a, int64_t b, int64_t *r) {
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) return 1;
    *r = a + b;
    return 0;
}
static int sub_overflow(int64_t a, int64_t b, int64_t *r) {
    if ((b < 0 && a > INT64_MAX + b) || (b > 0 && a < INT64_MIN + b)) return 1;
    *r = a - b;
    return 0;
}
#endif

/* ------------------------------------------------------------------ growable arrays */

typedef struct {
    char *data;
    Py_ssize_t len; /* bytes used */
    Py_ssize_t cap; /* bytes allocated */
} growbuf;

/* Raw allocator: safe without the GIL. */
static int gb_reserve(growbuf *g, Py_ssize_t extra) {
    if (g->len + extra <= g->cap) return 0;
    Py_ssize_t cap = g->cap ? g->cap : 64;
    while (cap < g->len + extra) {
        if (cap > PY_SSIZE_T_MAX / 2) return -1;
        cap *= 2;
    }
    char *p = PyMem_RawRealloc(g->data, (size_t)cap);
    if (p == NULL) return -1;
    g->data = p;
    g->cap = cap;
    return 0;
}

static inline int gb_put_i64(growbuf *g, int64_t v) {
    if (gb_reserve(g, 8) < 0) return -1;
    memcpy(g->data + g->len, &v, 8);
    g->len += 8;
    return 0;
}

static inline int gb_put_i32(growbuf *g, int32_t v) {
    if (gb_reserve(g, 4) < 0) return -1;
    memcpy(g->data + g->len, &v, 4);
    g->len += 4;
    return 0;
}

static void gb_free(growbuf *g) {
    PyMem_RawFree(g->data);
    g->data = NULL;
    g->len = g->cap = 0;
}

static PyObject *gb_to_bytes(growbuf *g) {
    return PyBytes_FromStringAndSize(g->len ? g->data : "", g->len);
}

/* ------------------------------------------------------------------ decoding */

enum decode_error {
    DE_OK = 0,
    DE_NOMEM,
    DE_VARINT_EOF,
    DE_VARINT_LONG,
    DE_VARINT_OVERFLOW,
    DE_RECORD_LENGTH,
    DE_FIELD,
    DE_HEADER_COUNT,
    DE_HEADER_KEY_NULL,
    DE_HEADER_KEY_UTF8,
    DE_RECORD_MISMATCH,
    DE_TRAILING,
    DE_OFFSET_OVERFLOW,
    DE_TIMESTAMP_OVERFLOW,
};

/* Zigzag varint (Kafka uses one encoding for varint and varlong). Mirrors
 * records._read_varint, plus one rule of ours: a value must fit in 64 bits. */
static inline int read_varint(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t end, int64_t *out) {
    uint64_t raw = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (;;) {
        if (p >= end) return DE_VARINT_EOF;
        uint8_t b = buf[p++];
        if (shift == 63) {
            if (b & 0x80) return DE_VARINT_LONG;
            if (b & 0x7E) return DE_VARINT_OVERFLOW;
            raw |= (uint64_t)(b & 0x01) << 63;
            break;
        }
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) break;
        shift += 7;
    }
    *pos = p;
    *out = (int64_t)((raw >> 1) ^ (~(raw & 1) + 1));
    return DE_OK;
}

/* A length-prefixed field: start and length (-1 = null), bounds as records._read_bytes. */
static inline int read_field(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t end, int32_t *start,
                             int32_t *length) {
    int64_t n;
    int rc = read_varint(buf, pos, end, &n);
    if (rc) return rc;
    if (n < 0) {
        *start = (int32_t)*pos;
        *length = -1;
        return DE_OK;
    }
    if (n > (int64_t)(end - *pos)) return DE_FIELD;
    *start = (int32_t)*pos;
    *length = (int32_t)n;
    *pos += (Py_ssize_t)n;
    return DE_OK;
}

/* Strict UTF-8, as Python's decoder: no overlongs, no surrogates, nothing past U+10FFFF. */
static int valid_utf8(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
        } else if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n) return 0;
            uint8_t c1 = s[i + 1];
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
            if (c == 0xE0 && c1 < 0xA0) return 0; /* overlong */
            if (c == 0xED && c1 > 0x9F) return 0; /* surrogate */
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n) return 0;
            uint8_t c1 = s[i + 1];
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if (c == 0xF0 && c1 < 0x90) return 0; /* overlong */
            if (c == 0xF4 && c1 > 0x8F) return 0; /* past U+10FFFF */
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

typedef struct {
    growbuf offsets, timestamps, key_starts, key_lengths, value_starts, value_lengths;
    growbuf header_index, hkey_starts, hkey_lengths, hvalue_starts, hvalue_lengths;
    int64_t count;
    int64_t bad_header_count; /* for DE_HEADER_COUNT's message */
} decoded;

static void decoded_free(decoded *d) {
    gb_free(&d->offsets);
    gb_free(&d->timestamps);
    gb_free(&d->key_starts);
    gb_free(&d->key_lengths);
    gb_free(&d->value_starts);
    gb_free(&d->value_lengths);
    gb_free(&d->header_index);
    gb_free(&d->hkey_starts);
    gb_free(&d->hkey_lengths);
    gb_free(&d->hvalue_starts);
    gb_free(&d->hvalue_lengths);
}

/* Runs without the GIL. Every check and its order mirror records._decode_record. */
static int decode_loop(const uint8_t *buf, Py_ssize_t start, Py_ssize_t end, int64_t count,
                       int64_t base_offset, int64_t base_timestamp, int has_fixed,
                       int64_t fixed_timestamp, decoded *d) {
    Py_ssize_t pos = start;
    int32_t headers_total = 0;
    int rc;
    Py_ssize_t guess = (end - start) / 7 + 1; /* a record takes at least 7 bytes */
    if (count > 0 && count < guess) guess = (Py_ssize_t)count;
    if (count > 0) {
        if (gb_reserve(&d->offsets, guess * 8) < 0 || gb_reserve(&d->timestamps, guess * 8) < 0 ||
            gb_reserve(&d->key_starts, guess * 4) < 0 ||
            gb_reserve(&d->key_lengths, guess * 4) < 0 ||
            gb_reserve(&d->value_starts, guess * 4) < 0 ||
            gb_reserve(&d->value_lengths, guess * 4) < 0 ||
            gb_reserve(&d->header_index, (guess + 1) * 4) < 0)
            return DE_NOMEM;
    }
    if (gb_put_i32(&d->header_index, 0) < 0) return DE_NOMEM;
    for (int64_t i = 0; i < count; i++) {
        int64_t length, ts_delta, off_delta, hcount;
        int32_t ks, kl, vs, vl;
        if ((rc = read_varint(buf, &pos, end, &length))) return rc;
        if (length < 0 || length > (int64_t)(end - pos)) return DE_RECORD_LENGTH;
        Py_ssize_t rec_end = pos + (Py_ssize_t)length;
        pos += 1; /* attributes: unused */
        if ((rc = read_varint(buf, &pos, end, &ts_delta))) return rc;
        if ((rc = read_varint(buf, &pos, end, &off_delta))) return rc;
        if ((rc = read_field(buf, &pos, end, &ks, &kl))) return rc;
        if ((rc = read_field(buf, &pos, end, &vs, &vl))) return rc;
        if ((rc = read_varint(buf, &pos, end, &hcount))) return rc;
        if (hcount < 0) {
            d->bad_header_count = hcount;
            return DE_HEADER_COUNT;
        }
        for (int64_t h = 0; h < hcount; h++) {
            int32_t hks, hkl, hvs, hvl;
            if ((rc = read_field(buf, &pos, end, &hks, &hkl))) return rc;
            if (hkl < 0) return DE_HEADER_KEY_NULL;
            if ((rc = read_field(buf, &pos, end, &hvs, &hvl))) return rc;
            if (!valid_utf8(buf + hks, hkl)) return DE_HEADER_KEY_UTF8;
            if (gb_put_i32(&d->hkey_starts, hks) < 0 || gb_put_i32(&d->hkey_lengths, hkl) < 0 ||
                gb_put_i32(&d->hvalue_starts, hvs) < 0 || gb_put_i32(&d->hvalue_lengths, hvl) < 0)
                return DE_NOMEM;
            headers_total++;
        }
        if (pos != rec_end) return DE_RECORD_MISMATCH;
        int64_t offset, ts;
        if (add_overflow(base_offset, off_delta, &offset)) return DE_OFFSET_OVERFLOW;
        if (has_fixed) {
            ts = fixed_timestamp;
        } else if (add_overflow(base_timestamp, ts_delta, &ts)) {
            return DE_TIMESTAMP_OVERFLOW;
        }
        if (gb_put_i64(&d->offsets, offset) < 0 || gb_put_i64(&d->timestamps, ts) < 0 ||
            gb_put_i32(&d->key_starts, ks) < 0 || gb_put_i32(&d->key_lengths, kl) < 0 ||
            gb_put_i32(&d->value_starts, vs) < 0 || gb_put_i32(&d->value_lengths, vl) < 0 ||
            gb_put_i32(&d->header_index, headers_total) < 0)
            return DE_NOMEM;
        d->count++;
    }
    if (pos != end) return DE_TRAILING;
    return DE_OK;
}

static PyObject *raise_decode_error(int rc, int64_t bad_header_count) {
    switch (rc) {
    case DE_NOMEM:
        return PyErr_NoMemory();
    case DE_VARINT_EOF:
        PyErr_SetString(CorruptRecordError, "varint runs past the end of the record data");
        break;
    case DE_VARINT_LONG:
        PyErr_SetString(CorruptRecordError, "varint is longer than 10 bytes");
        break;
    case DE_VARINT_OVERFLOW:
        PyErr_SetString(CorruptRecordError, "varint does not fit in 64 bits");
        break;
    case DE_RECORD_LENGTH:
        PyErr_SetString(CorruptRecordError, "record length runs past the end of the batch");
        break;
    case DE_FIELD:
        PyErr_SetString(CorruptRecordError, "record field runs past the end of the record");
        break;
    case DE_HEADER_COUNT:
        PyErr_Format(CorruptRecordError, "negative header count %lld",
                     (long long)bad_header_count);
        break;
    case DE_HEADER_KEY_NULL:
        PyErr_SetString(CorruptRecordError, "record header key is null");
        break;
    case DE_HEADER_KEY_UTF8:
        PyErr_SetString(CorruptRecordError, "record header key is not valid UTF-8");
        break;
    case DE_RECORD_MISMATCH:
        PyErr_SetString(CorruptRecordError, "record length does not match its content");
        break;
    case DE_TRAILING:
        PyErr_SetString(CorruptRecordError, "trailing bytes after the last record of a batch");
        break;
    case DE_OFFSET_OVERFLOW:
        PyErr_SetString(CorruptRecordError, "record offset does not fit in 64 bits");
        break;
    case DE_TIMESTAMP_OVERFLOW:
        PyErr_SetString(CorruptRecordError, "record timestamp does not fit in 64 bits");
        break;
    default:
        PyErr_SetString(PyExc_SystemError, "unknown decode error");
    }
    return NULL;
}

static PyObject *codec_decode_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end;
    long long count, base_offset, base_timestamp;
    PyObject *fixed_obj;
    if (!PyArg_ParseTuple(args, "y*nnLLLO:decode_records", &view, &start, &end, &count,
                          &base_offset, &base_timestamp, &fixed_obj))
        return NULL;
    PyObject *result = NULL;
    decoded d;
    memset(&d, 0, sizeof(d));
    int has_fixed = fixed_obj != Py_None;
    long long fixed = 0;
    if (has_fixed) {
        fixed = PyLong_AsLongLong(fixed_obj);
        if (fixed == -1 && PyErr_Occurred()) goto done;
    }
    if (start < 0 || end < start || end > view.len) {
        PyErr_Format(PyExc_ValueError, "records section [%zd, %zd) is outside a %zd-byte buffer",
                     start, end, view.len);
        goto done;
    }
    if (end > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "record data buffers are limited to 2 GiB");
        goto done;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = decode_loop((const uint8_t *)view.buf, start, end, count, base_offset, base_timestamp,
                     has_fixed, fixed, &d);
    Py_END_ALLOW_THREADS
    if (rc) {
        raise_decode_error(rc, d.bad_header_count);
        goto done;
    }
    result = Py_BuildValue(
        "(LNNNNNNNNNNN)", (long long)d.count, gb_to_bytes(&d.offsets), gb_to_bytes(&d.timestamps),
        gb_to_bytes(&d.key_starts), gb_to_bytes(&d.key_lengths), gb_to_bytes(&d.value_starts),
        gb_to_bytes(&d.value_lengths), gb_to_bytes(&d.header_index), gb_to_bytes(&d.hkey_starts),
        gb_to_bytes(&d.hkey_lengths), gb_to_bytes(&d.hvalue_starts),
        gb_to_bytes(&d.hvalue_lengths));
done:
    decoded_free(&d);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------ gather (Arrow layout) */

typedef struct {
    Py_buffer buf, starts, lengths;
    Py_ssize_t lo, hi;
    int held;
} segment;

static PyObject *codec_gather(PyObject *self, PyObject *segments_obj) {
    PyObject *seq = PySequence_Fast(segments_obj, "gather() takes a sequence of segments");
    if (seq == NULL) return NULL;
    Py_ssize_t nseg = PySequence_Fast_GET_SIZE(seq);
    segment *segs = PyMem_Calloc(nseg ? (size_t)nseg : 1, sizeof(segment));
    PyObject *result = NULL;
    PyObject *validity = NULL, *offsets = NULL, *data = NULL;
    if (segs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t rows = 0, total = 0, nulls = 0;
    for (Py_ssize_t i = 0; i < nseg; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        segment *s = &segs[i];
        if (!PyArg_ParseTuple(item, "y*y*y*nn:gather segment", &s->buf, &s->starts, &s->lengths,
                              &s->lo, &s->hi))
            goto done;
        s->held = 1;
        Py_ssize_t n = s->starts.len / 4;
        if (s->lengths.len / 4 != n || s->lo < 0 || s->hi < s->lo || s->hi > n) {
            PyErr_SetString(PyExc_ValueError, "gather segment rows out of range");
            goto done;
        }
        const int32_t *st = (const int32_t *)s->starts.buf;
        const int32_t *ln = (const int32_t *)s->lengths.buf;
        for (Py_ssize_t r = s->lo; r < s->hi; r++) {
            if (ln[r] < 0) {
                nulls++;
                continue;
            }
            if (st[r] < 0 || (Py_ssize_t)st[r] + ln[r] > s->buf.len) {
                PyErr_SetString(PyExc_ValueError, "gather segment points outside its buffer");
                goto done;
            }
            total += ln[r];
        }
        rows += s->hi - s->lo;
    }
    if (total > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "gathered column exceeds 2 GiB (Arrow binary limit)");
        goto done;
    }
    offsets = PyBytes_FromStringAndSize(NULL, (rows + 1) * 4);
    data = PyBytes_FromStringAndSize(NULL, total);
    if (offsets == NULL || data == NULL) goto done;
    uint8_t *vbits = NULL;
    if (nulls) {
        validity = PyBytes_FromStringAndSize(NULL, (rows + 7) / 8);
        if (validity == NULL) goto done;
        vbits = (uint8_t *)PyBytes_AS_STRING(validity);
        memset(vbits, 0, (size_t)((rows + 7) / 8));
    }
    int32_t *out_off = (int32_t *)PyBytes_AS_STRING(offsets);
    char *out_data = PyBytes_AS_STRING(data);
    int32_t cursor = 0;
    Py_ssize_t row = 0;
    out_off[0] = 0;
    for (Py_ssize_t i = 0; i < nseg; i++) {
        segment *s = &segs[i];
        const int32_t *st = (const int32_t *)s->starts.buf;
        const int32_t *ln = (const int32_t *)s->lengths.buf;
        const char *src = (const char *)s->buf.buf;
        for (Py_ssize_t r = s->lo; r < s->hi; r++, row++) {
            int32_t n = ln[r];
            if (n >= 0) {
                memcpy(out_data + cursor, src + st[r], (size_t)n);
                cursor += n;
                if (vbits) vbits[row >> 3] |= (uint8_t)(1u << (row & 7));
            }
            out_off[row + 1] = cursor;
        }
    }
    if (validity == NULL) {
        validity = Py_None;
        Py_INCREF(validity);
    }
    result = Py_BuildValue("(OOOn)", validity, offsets, data, nulls);
done:
    Py_XDECREF(validity);
    Py_XDECREF(offsets);
    Py_XDECREF(data);
    if (segs != NULL) {
        for (Py_ssize_t i = 0; i < nseg; i++) {
            if (segs[i].held) {
                PyBuffer_Release(&segs[i].buf);
                PyBuffer_Release(&segs[i].starts);
                PyBuffer_Release(&segs[i].lengths);
            }
        }
        PyMem_Free(segs);
    }
    Py_DECREF(seq);
    return result;
}

/* ------------------------------------------------------------------ encoding */

static inline int varint_size(int64_t n) {
    uint64_t v = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    int size = 1;
    while (v >= 0x80) {
        v >>= 7;
        size++;
    }
    return size;
}

static inline char *put_varint(char *p, int64_t n) {
    uint64_t v = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    while (v >= 0x80) {
        *p++ = (char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    *p++ = (char)v;
    return p;
}

/* One record's fields, resolved to raw bytes before anything is written. */
typedef struct {
    const char *key;
    Py_ssize_t key_len; /* -1 = null */
    const char *value;
    Py_ssize_t value_len;
} kv;

typedef struct {
    PyObject *headers_fast; /* PySequence_Fast of (key, value) pairs, or NULL */
    Py_ssize_t count;
    Py_ssize_t bytes; /* encoded size of the header section after its count */
} header_plan;

/* Resolve a headers iterable: check types, compute the encoded size. */
static int plan_headers(PyObject *headers, header_plan *hp) {
    hp->headers_fast = NULL;
    hp->count = 0;
    hp->bytes = 0;
    if (headers == Py_None) return 0;
    hp->headers_fast = PySequence_Fast(headers, "headers must be a sequence of (key, value)");
    if (hp->headers_fast == NULL) return -1;
    hp->count = PySequence_Fast_GET_SIZE(hp->headers_fast);
    for (Py_ssize_t i = 0; i < hp->count; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(hp->headers_fast, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "a header must be a (key, value) tuple");
            return -1;
        }
        PyObject *k = PyTuple_GET_ITEM(pair, 0);
        PyObject *v = PyTuple_GET_ITEM(pair, 1);
        Py_ssize_t kl;
        if (!PyUnicode_Check(k)) {
            PyErr_SetString(PyExc_TypeError, "a header key must be str");
            return -1;
        }
        if (PyUnicode_AsUTF8AndSize(k, &kl) == NULL) return -1;
        hp->bytes += varint_size(kl) + kl;
        if (v == Py_None) {
            hp->bytes += 1;
        } else if (PyBytes_Check(v)) {
            Py_ssize_t vl = PyBytes_GET_SIZE(v);
            hp->bytes += varint_size(vl) + vl;
        } else {
            PyErr_SetString(PyExc_TypeError, "a header value must be bytes or None");
            return -1;
        }
    }
    return 0;
}

static char *put_headers(char *p, header_plan *hp) {
    p = put_varint(p, hp->count);
    for (Py_ssize_t i = 0; i < hp->count; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(hp->headers_fast, i);
        PyObject *v = PyTuple_GET_ITEM(pair, 1);
        Py_ssize_t kl;
        const char *k = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &kl);
        p = put_varint(p, kl);
        memcpy(p, k, (size_t)kl);
        p += kl;
        if (v == Py_None) {
            p = put_varint(p, -1);
        } else {
            Py_ssize_t vl = PyBytes_GET_SIZE(v);
            p = put_varint(p, vl);
            memcpy(p, PyBytes_AS_STRING(v), (size_t)vl);
            p += vl;
        }
    }
    return p;
}

/* Size of the record body (everything after its length varint). */
static inline Py_ssize_t body_size(int64_t offset_delta, int64_t ts_delta, const kv *f,
                                   const header_plan *hp) {
    Py_ssize_t n = 1 + varint_size(ts_delta) + varint_size(offset_delta);
    n += f->key_len < 0 ? 1 : varint_size(f->key_len) + f->key_len;
    n += f->value_len < 0 ? 1 : varint_size(f->value_len) + f->value_len;
    n += varint_size(hp->count) + hp->bytes;
    return n;
}

/* Append one record to a bytearray; returns the bytes written or -1. */
static Py_ssize_t append_record(PyObject *out, int64_t offset_delta, int64_t ts_delta,
                                const kv *f, header_plan *hp) {
    Py_ssize_t body = body_size(offset_delta, ts_delta, f, hp);
    Py_ssize_t total = varint_size(body) + body;
    Py_ssize_t old = PyByteArray_GET_SIZE(out);
    if (PyByteArray_Resize(out, old + total) < 0) return -1;
    char *p = PyByteArray_AS_STRING(out) + old;
    p = put_varint(p, body);
    *p++ = 0; /* attributes */
    p = put_varint(p, ts_delta);
    p = put_varint(p, offset_delta);
    if (f->key_len < 0) {
        p = put_varint(p, -1);
    } else {
        p = put_varint(p, f->key_len);
        memcpy(p, f->key, (size_t)f->key_len);
        p += f->key_len;
    }
    if (f->value_len < 0) {
        p = put_varint(p, -1);
    } else {
        p = put_varint(p, f->value_len);
        memcpy(p, f->value, (size_t)f->value_len);
        p += f->value_len;
    }
    if (hp->headers_fast == NULL) {
        *p++ = 0;
    } else {
        put_headers(p, hp);
    }
    return total;
}

static int bytes_field(PyObject *obj, Py_buffer *view, const char **ptr, Py_ssize_t *len,
                       const char *what) {
    if (obj == Py_None) {
        *ptr = NULL;
        *len = -1;
        return 0;
    }
    if (PyBytes_Check(obj)) {
        *ptr = PyBytes_AS_STRING(obj);
        *len = PyBytes_GET_SIZE(obj);
        return 0;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) {
        PyErr_Format(PyExc_TypeError, "a record %s must be bytes-like or None", what);
        return -1;
    }
    *ptr = view->buf;
    *len = view->len;
    return 1;
}

static PyObject *codec_encode_record(PyObject *self, PyObject *args) {
    PyObject *out, *key, *value, *headers;
    long long offset_delta, ts_delta;
    if (!PyArg_ParseTuple(args, "O!LLOOO:encode_record", &PyByteArray_Type, &out, &offset_delta,
                          &ts_delta, &key, &value, &headers))
        return NULL;
    Py_buffer kview, vview;
    kv f;
    int kheld = bytes_field(key, &kview, &f.key, &f.key_len, "key");
    if (kheld < 0) return NULL;
    int vheld = bytes_field(value, &vview, &f.value, &f.value_len, "value");
    PyObject *result = NULL;
    header_plan hp = {NULL, 0, 0};
    if (vheld < 0) goto done;
    if (plan_headers(headers, &hp) < 0) goto done;
    Py_ssize_t written = append_record(out, offset_delta, ts_delta, &f, &hp);
    if (written >= 0) result = PyLong_FromSsize_t(written);
done:
    Py_XDECREF(hp.headers_fast);
    if (kheld > 0) PyBuffer_Release(&kview);
    if (vheld > 0) PyBuffer_Release(&vview);
    return result;
}

/* An Arrow-layout column handed in as (validity | None, offsets or values, data, offset). */
typedef struct {
    int present;
    Py_buffer validity, offsets, data;
    int has_validity, has_data;
    Py_ssize_t offset;
} column;

static void column_release(column *c) {
    if (!c->present) return;
    if (c->has_validity) PyBuffer_Release(&c->validity);
    PyBuffer_Release(&c->offsets);
    if (c->has_data) PyBuffer_Release(&c->data);
    c->present = 0;
}

/* binary: (validity, int32 offsets, data, offset); int64: (validity, int64 values, None, offset) */
static int column_parse(PyObject *obj, column *c, int binary, Py_ssize_t rows_needed) {
    memset(c, 0, sizeof(*c));
    if (obj == Py_None) return 0;
    PyObject *validity, *offsets, *data;
    if (!PyArg_ParseTuple(obj, "OOOn:column", &validity, &offsets, &data, &c->offset)) return -1;
    if (PyObject_GetBuffer(offsets, &c->offsets, PyBUF_SIMPLE) < 0) return -1;
    c->present = 1;
    if (validity != Py_None) {
        if (PyObject_GetBuffer(validity, &c->validity, PyBUF_SIMPLE) < 0) return -1;
        c->has_validity = 1;
    }
    if (binary) {
        if (PyObject_GetBuffer(data, &c->data, PyBUF_SIMPLE) < 0) return -1;
        c->has_data = 1;
    }
    Py_ssize_t width = binary ? 4 : 8;
    Py_ssize_t need = (c->offset + rows_needed + (binary ? 1 : 0)) * width;
    if (c->offset < 0 || c->offsets.len < need ||
        (c->has_validity && c->validity.len * 8 < c->offset + rows_needed)) {
        PyErr_SetString(PyExc_ValueError, "column buffers are shorter than the rows asked for");
        return -1;
    }
    return 0;
}

static inline int column_valid(const column *c, Py_ssize_t row) {
    if (!c->has_validity) return 1;
    Py_ssize_t i = c->offset + row;
    return (((const uint8_t *)c->validity.buf)[i >> 3] >> (i & 7)) & 1;
}

static inline int column_bytes(const column *c, Py_ssize_t row, const char **ptr,
                               Py_ssize_t *len) {
    if (!c->present || !column_valid(c, row)) {
        *ptr = NULL;
        *len = -1;
        return 0;
    }
    const int32_t *off = (const int32_t *)c->offsets.buf + c->offset + row;
    int32_t a = off[0], b = off[1];
    if (a < 0 || b < a || b > c->data.len) {
        PyErr_SetString(PyExc_ValueError, "column offsets point outside its data");
        return -1;
    }
    *ptr = (const char *)c->data.buf + a;
    *len = b - a;
    return 0;
}

static PyObject *codec_encode_columns(PyObject *self, PyObject *args) {
    PyObject *out, *keys_obj, *values_obj, *ts_obj, *headers, *base_obj;
    long long first_delta, now_ms;
    Py_ssize_t lo, hi, max_bytes;
    if (!PyArg_ParseTuple(args, "O!LOLOOOOnnn:encode_columns", &PyByteArray_Type, &out,
                          &first_delta, &base_obj, &now_ms, &keys_obj, &values_obj, &ts_obj,
                          &headers, &lo, &hi, &max_bytes))
        return NULL;
    if (lo < 0 || hi < lo) {
        PyErr_SetString(PyExc_ValueError, "encode_columns: bad row range");
        return NULL;
    }
    column keys, values, ts;
    PyObject *result = NULL;
    memset(&keys, 0, sizeof(keys));
    memset(&values, 0, sizeof(values));
    memset(&ts, 0, sizeof(ts));
    if (column_parse(keys_obj, &keys, 1, hi) < 0 || column_parse(values_obj, &values, 1, hi) < 0 ||
        column_parse(ts_obj, &ts, 0, hi) < 0)
        goto done;
    PyObject *headers_fast = NULL;
    if (headers != Py_None) {
        headers_fast = PySequence_Fast(headers, "headers must be a sequence (one entry per row)");
        if (headers_fast == NULL) goto done;
        if (PySequence_Fast_GET_SIZE(headers_fast) < hi) {
            Py_DECREF(headers_fast);
            PyErr_SetString(PyExc_ValueError, "fewer header entries than rows");
            goto done;
        }
    }
    int has_base = base_obj != Py_None;
    long long base = 0;
    if (has_base) {
        base = PyLong_AsLongLong(base_obj);
        if (base == -1 && PyErr_Occurred()) {
            Py_XDECREF(headers_fast);
            goto done;
        }
    }
    long long max_ts = INT64_MIN;
    Py_ssize_t written = 0, row = lo;
    int failed = 0;
    for (; row < hi; row++) {
        kv f;
        int64_t t = now_ms;
        if (column_bytes(&keys, row, &f.key, &f.key_len) < 0 ||
            column_bytes(&values, row, &f.value, &f.value_len) < 0) {
            failed = 1;
            break;
        }
        if (ts.present && column_valid(&ts, row)) t = ((const int64_t *)ts.offsets.buf)[ts.offset + row];
        if (!has_base) {
            base = t;
            has_base = 1;
        }
        header_plan hp = {NULL, 0, 0};
        if (headers_fast != NULL &&
            plan_headers(PySequence_Fast_GET_ITEM(headers_fast, row), &hp) < 0) {
            failed = 1;
            break;
        }
        int64_t delta;
        if (sub_overflow((int64_t)t, (int64_t)base, &delta)) {
            Py_XDECREF(hp.headers_fast);
            PyErr_SetString(PyExc_OverflowError, "record timestamp too far from the batch's");
            failed = 1;
            break;
        }
        int64_t od = first_delta + (row - lo);
        Py_ssize_t body = body_size(od, delta, &f, &hp);
        if (written + varint_size(body) + body > max_bytes) {
            Py_XDECREF(hp.headers_fast);
            break;
        }
        Py_ssize_t n = append_record(out, od, delta, &f, &hp);
        Py_XDECREF(hp.headers_fast);
        if (n < 0) {
            failed = 1;
            break;
        }
        written += n;
        if (t > max_ts) max_ts = t;
    }
    Py_XDECREF(headers_fast);
    if (!failed) result = Py_BuildValue("(nLL)", row - lo, base, max_ts);
done:
    column_release(&keys);
    column_release(&values);
    column_release(&ts);
    return result;
}

/* ------------------------------------------------------------------ murmur2 */

/* Kafka's Utils.murmur2: 32-bit MurmurHash2, seed 0x9747b28c. */
static int32_t murmur2(const uint8_t *data, Py_ssize_t length) {
    const uint32_t m = 0x5BD1E995u;
    uint32_t h = 0x9747B28Cu ^ (uint32_t)length;
    Py_ssize_t end = length & ~(Py_ssize_t)3;
    for (Py_ssize_t i = 0; i < end; i += 4) {
        uint32_t k = (uint32_t)data[i] | ((uint32_t)data[i + 1] << 8) |
                     ((uint32_t)data[i + 2] << 16) | ((uint32_t)data[i + 3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)data[end + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[end + 1] << 8;
        /* fall through */
    case 1:
        h ^= data[end];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

static PyObject *codec_murmur2(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    int32_t h = murmur2(view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromLong(h);
}

/* Partition of each row's bytes, toPositive(murmur2) % n; -1 for null rows. */
static PyObject *codec_murmur2_partitions(PyObject *self, PyObject *args) {
    PyObject *col_obj;
    Py_ssize_t rows;
    long num_partitions;
    if (!PyArg_ParseTuple(args, "Onl:murmur2_partitions", &col_obj, &rows, &num_partitions))
        return NULL;
    if (num_partitions <= 0 || rows < 0) {
        PyErr_SetString(PyExc_ValueError, "murmur2_partitions needs rows >= 0, partitions > 0");
        return NULL;
    }
    column c;
    if (column_parse(col_obj, &c, 1, rows) < 0) {
        column_release(&c);
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, rows * 4);
    if (out != NULL) {
        int32_t *parts = (int32_t *)PyBytes_AS_STRING(out);
        for (Py_ssize_t r = 0; r < rows; r++) {
            const char *p;
            Py_ssize_t n;
            if (column_bytes(&c, r, &p, &n) < 0) {
                Py_CLEAR(out);
                break;
            }
            parts[r] = n < 0 ? -1
                             : (int32_t)((murmur2((const uint8_t *)p, n) & 0x7FFFFFFF) %
                                         num_partitions);
        }
    }
    column_release(&c);
    return out;
}

/* ------------------------------------------------------------------ record_frames_ok */

/* records._uvarint: at most 10 bytes (else -1, as is running past `len`); *big when
 * the value does not fit in 64 bits (Python's has up to 70). */
static int frame_uvarint(const uint8_t *b, Py_ssize_t len, Py_ssize_t *pos, uint64_t *value,
                         int *big) {
    uint64_t raw = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    *big = 0;
    for (;;) {
        if (p >= len) return -1;
        uint8_t c = b[p++];
        uint64_t bits = c & 0x7F;
        if (shift == 63 && bits > 1) *big = 1;
        raw |= bits << shift;
        if (c < 0x80) {
            *pos = p;
            *value = raw;
            return 0;
        }
        shift += 7;
        if (shift > 63) return -1;
    }
}

#define MIN_RECORD_BYTES 7 /* records._MIN_RECORD_BYTES */

/* records._check_record_frames answering instead of raising: the walk of an uncompressed
 * batch's records by their lengths (reading `b` up to `len`, as the Python walk indexes
 * the whole request), then the offset deltas of the first and last record. */
static int frames_ok(const uint8_t *b, Py_ssize_t len, Py_ssize_t start, Py_ssize_t end,
                     Py_ssize_t count) {
    if (count <= 0 || count > (end - start) / MIN_RECORD_BYTES) return 0;
    Py_ssize_t pos = start, last = start;
    uint64_t n;
    int big;
    for (Py_ssize_t i = 0; i < count; i++) {
        last = pos;
        if (pos + 1 >= len) return 0; /* the walk reads the first two bytes */
        uint8_t b0 = b[pos], b1 = b[pos + 1];
        Py_ssize_t used;
        if (b0 < 0x80 || b1 < 0x80) { /* a one- or two-byte length: _FRAME_STEPS */
            if (b0 < 0x80) {
                n = b0;
                used = 1;
            } else {
                n = (uint64_t)(b0 & 0x7F) | ((uint64_t)b1 << 7);
                used = 2;
            }
            if ((n & 1) || (n >> 1) < MIN_RECORD_BYTES - 1) return 0;
        } else { /* three bytes or more: any even value */
            Py_ssize_t p = pos;
            if (frame_uvarint(b, len, &p, &n, &big) < 0 || big || (n & 1)) return 0;
            used = p - pos;
        }
        if ((n >> 1) > (uint64_t)(len - pos - used)) return 0; /* ends past the buffer */
        pos += used + (Py_ssize_t)(n >> 1);
    }
    if (pos != end) return 0;
    Py_ssize_t ats[2] = {start, last};
    uint64_t want[2] = {0, 2 * (uint64_t)(count - 1)}; /* zigzag of the offset delta */
    for (int k = 0; k < 2; k++) {
        Py_ssize_t p = ats[k];
        if (frame_uvarint(b, len, &p, &n, &big) < 0) return 0; /* length */
        p += 1;                                                 /* attributes */
        if (frame_uvarint(b, len, &p, &n, &big) < 0) return 0; /* timestamp delta */
        if (frame_uvarint(b, len, &p, &n, &big) < 0 || big || n != want[k]) return 0;
    }
    return 1;
}

static PyObject *codec_record_frames_ok(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t start, end, count;
    if (!PyArg_ParseTuple(args, "y*nnn:record_frames_ok", &buf, &start, &end, &count))
        return NULL;
    if (start < 0 || start > end || end > buf.len) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "record_frames_ok needs 0 <= start <= end <= len(buf)");
        return NULL;
    }
    int ok = frames_ok((const uint8_t *)buf.buf, buf.len, start, end, count);
    PyBuffer_Release(&buf);
    return PyBool_FromLong(ok);
}

/* ------------------------------------------------------------------ batches_ok */

#define BATCH_OVERHEAD 61   /* records.BATCH_OVERHEAD: the v2 batch header */
#define LOG_OVERHEAD 12     /* records.LOG_OVERHEAD: base offset and batch length */
#define CRC_START 21        /* records._CRC_START: the CRC32C covers attributes..end */
#define COMPRESSION_MASK 0x07
#define CONTROL_BIT 0x20

static inline uint64_t be64(const uint8_t *p) {
    return ((uint64_t)p[0] << 56) | ((uint64_t)p[1] << 48) | ((uint64_t)p[2] << 40) |
           ((uint64_t)p[3] << 32) | ((uint64_t)p[4] << 24) | ((uint64_t)p[5] << 16) |
           ((uint64_t)p[6] << 8) | (uint64_t)p[7];
}
static inline uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint16_t be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }

/* One header as records.unpack_header gives it: a 13-tuple in BatchHeader field order. */
static PyObject *header_tuple(const uint8_t *h) {
    return Py_BuildValue(
        "(LiibkhiLLLhii)", (long long)(int64_t)be64(h), (int)(int32_t)be32(h + 8),
        (int)(int32_t)be32(h + 12), (int)(int8_t)h[16], (unsigned long)be32(h + 17),
        (short)(int16_t)be16(h + 21), (int)(int32_t)be32(h + 23), (long long)(int64_t)be64(h + 27),
        (long long)(int64_t)be64(h + 35), (long long)(int64_t)be64(h + 43),
        (short)(int16_t)be16(h + 51), (int)(int32_t)be32(h + 53), (int)(int32_t)be32(h + 57));
}

/* records.validate_batches_raw(buf, allow_control=...) for a client's uncompressed batches,
 * answering instead of raising: the list of header tuples when every check passes (the
 * CRC32C by calling `crc32c` on a view of each batch, as records does), None when one
 * fails or a batch is compressed; then the Python walk decides and words the error. */
static PyObject *codec_batches_ok(PyObject *self, PyObject *args) {
    Py_buffer buf;
    PyObject *crc32c;
    int allow_control;
    if (!PyArg_ParseTuple(args, "y*Op:batches_ok", &buf, &crc32c, &allow_control)) return NULL;
    const uint8_t *b = (const uint8_t *)buf.buf;
    Py_ssize_t end = buf.len, pos = 0;
    PyObject *out = NULL;
    if (end == 0) goto no;
    out = PyList_New(0);
    if (out == NULL) goto done;
    while (pos < end) {
        Py_ssize_t remaining = end - pos;
        if (remaining < BATCH_OVERHEAD) goto no;
        const uint8_t *h = b + pos;
        int32_t length = (int32_t)be32(h + 8);
        if (length < BATCH_OVERHEAD - LOG_OVERHEAD) goto no;
        Py_ssize_t size = (Py_ssize_t)length + LOG_OVERHEAD;
        if (size > remaining) goto no;
        if (h[16] != 2) goto no; /* magic */
        int16_t attrs = (int16_t)be16(h + 21);
        if (attrs & COMPRESSION_MASK) goto no; /* compressed (or an unknown codec) */
        int32_t lod = (int32_t)be32(h + 23);
        int64_t pid = (int64_t)be64(h + 43);
        int32_t seq = (int32_t)be32(h + 53), count = (int32_t)be32(h + 57);
        if (lod < 0 || count <= 0 || (int64_t)count != (int64_t)lod + 1) goto no;
        if (pid >= 0 && seq < 0 && !(attrs & CONTROL_BIT)) goto no;
        if ((attrs & CONTROL_BIT) && !allow_control) goto no;
        PyObject *view = PyMemoryView_FromMemory((char *)h + CRC_START, size - CRC_START,
                                                 PyBUF_READ);
        if (view == NULL) goto fail;
        PyObject *crc = PyObject_CallOneArg(crc32c, view);
        Py_DECREF(view);
        if (crc == NULL) goto fail;
        unsigned long actual = PyLong_AsUnsignedLong(crc);
        Py_DECREF(crc);
        if (actual == (unsigned long)-1 && PyErr_Occurred()) goto fail;
        if (actual != (unsigned long)be32(h + 17)) goto no;
        if (!frames_ok(b, end, pos + BATCH_OVERHEAD, pos + size, count)) goto no;
        PyObject *t = header_tuple(h);
        if (t == NULL) goto fail;
        int appended = PyList_Append(out, t);
        Py_DECREF(t);
        if (appended < 0) goto fail;
        pos += size;
    }
    goto done;
no:
    Py_XDECREF(out);
    out = Py_NewRef(Py_None);
    goto done;
fail:
    Py_CLEAR(out);
done:
    PyBuffer_Release(&buf);
    return out;
}

/* ------------------------------------------------------------------ build_records */

/* One key/value/header field of the buffer as bytes (None when null). */
static PyObject *field_bytes(const Py_buffer *buf, int32_t start, int32_t length) {
    if (length < 0) Py_RETURN_NONE;
    if (start < 0 || (Py_ssize_t)start + length > buf->len) {
        PyErr_SetString(PyExc_ValueError, "build_records field points outside its buffer");
        return NULL;
    }
    return PyBytes_FromStringAndSize((const char *)buf->buf + start, length);
}

/* obj passed through a deserializer when one is given (steals obj). */
static PyObject *deserialized(PyObject *deserializer, PyObject *obj) {
    if (obj == NULL || deserializer == Py_None) return obj;
    PyObject *out = PyObject_CallOneArg(deserializer, obj);
    Py_DECREF(obj);
    return out;
}

static PyObject *codec_build_records(PyObject *self, PyObject *args) {
    PyTypeObject *cls;
    PyObject *buffer_obj, *arrays, *topic, *partition, *timestamp_type, *kd, *vd;
    Py_ssize_t lo, hi;
    if (!PyArg_ParseTuple(args, "O!OO!nnOOOOO:build_records", &PyType_Type, &cls, &buffer_obj,
                          &PyTuple_Type, &arrays, &lo, &hi, &topic, &partition, &timestamp_type,
                          &kd, &vd))
        return NULL;
    if (!PyType_IsSubtype(cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "build_records needs a tuple subclass");
        return NULL;
    }
    if (PyTuple_GET_SIZE(arrays) != 11) {
        PyErr_SetString(PyExc_ValueError, "build_records needs the eleven column arrays");
        return NULL;
    }
    Py_buffer buf, col[11];
    int held = 0;
    PyObject *out = NULL;
    if (PyObject_GetBuffer(buffer_obj, &buf, PyBUF_SIMPLE) < 0) return NULL;
    for (; held < 11; held++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(arrays, held), &col[held], PyBUF_SIMPLE) < 0)
            goto done;
    }
    Py_ssize_t rows = col[0].len / 8;
    Py_ssize_t nheaders = col[7].len / 4;
    if (col[1].len / 8 != rows || col[2].len / 4 != rows || col[3].len / 4 != rows ||
        col[4].len / 4 != rows || col[5].len / 4 != rows || col[6].len / 4 != rows + 1 ||
        col[8].len / 4 != nheaders || col[9].len / 4 != nheaders || col[10].len / 4 != nheaders) {
        PyErr_SetString(PyExc_ValueError, "build_records column arrays disagree in length");
        goto done;
    }
    if (lo < 0 || hi < lo || hi > rows) {
        PyErr_SetString(PyExc_ValueError, "build_records rows out of range");
        goto done;
    }
    const int64_t *offsets = col[0].buf, *timestamps = col[1].buf;
    const int32_t *ks = col[2].buf, *kl = col[3].buf, *vs = col[4].buf, *vl = col[5].buf;
    const int32_t *hindex = col[6].buf, *hks = col[7].buf, *hkl = col[8].buf;
    const int32_t *hvs = col[9].buf, *hvl = col[10].buf;
    out = PyList_New(hi - lo);
    if (out == NULL) goto done;
    for (Py_ssize_t i = lo; i < hi; i++) {
        PyObject *record = cls->tp_alloc(cls, 8);
        if (record == NULL) goto fail;
        PyList_SET_ITEM(out, i - lo, record);
        PyObject *key = deserialized(kd, field_bytes(&buf, ks[i], kl[i]));
        if (key == NULL) goto fail;
        PyTuple_SET_ITEM(record, 3, key);
        PyObject *value = deserialized(vd, field_bytes(&buf, vs[i], vl[i]));
        if (value == NULL) goto fail;
        PyTuple_SET_ITEM(record, 4, value);
        int32_t h0 = hindex[i], h1 = hindex[i + 1];
        if (h0 < 0 || h1 < h0 || h1 > nheaders) {
            PyErr_SetString(PyExc_ValueError, "build_records header index out of range");
            goto fail;
        }
        PyObject *headers = PyList_New(h1 - h0);
        if (headers == NULL) goto fail;
        PyTuple_SET_ITEM(record, 6, headers);
        for (int32_t h = h0; h < h1; h++) {
            if (hkl[h] < 0 || hks[h] < 0 || (Py_ssize_t)hks[h] + hkl[h] > buf.len) {
                PyErr_SetString(PyExc_ValueError,
                                "build_records field points outside its buffer");
                goto fail;
            }
            PyObject *name =
                PyUnicode_DecodeUTF8((const char *)buf.buf + hks[h], hkl[h], "strict");
            if (name == NULL) goto fail;
            PyObject *hvalue = field_bytes(&buf, hvs[h], hvl[h]);
            if (hvalue == NULL) {
                Py_DECREF(name);
                goto fail;
            }
            PyObject *pair = PyTuple_New(2);
            if (pair == NULL) {
                Py_DECREF(name);
                Py_DECREF(hvalue);
                goto fail;
            }
            PyTuple_SET_ITEM(pair, 0, name);
            PyTuple_SET_ITEM(pair, 1, hvalue);
            PyList_SET_ITEM(headers, h - h0, pair);
        }
        PyObject *offset = PyLong_FromLongLong(offsets[i]);
        if (offset == NULL) goto fail;
        PyTuple_SET_ITEM(record, 2, offset);
        PyObject *timestamp = PyLong_FromLongLong(timestamps[i]);
        if (timestamp == NULL) goto fail;
        PyTuple_SET_ITEM(record, 5, timestamp);
        Py_INCREF(topic);
        PyTuple_SET_ITEM(record, 0, topic);
        Py_INCREF(partition);
        PyTuple_SET_ITEM(record, 1, partition);
        Py_INCREF(timestamp_type);
        PyTuple_SET_ITEM(record, 7, timestamp_type);
    }
    goto done;
fail:
    /* A half-built record holds NULL items: tuple dealloc skips them (Py_XDECREF). */
    Py_CLEAR(out);
done:
    for (int c = 0; c < held; c++) PyBuffer_Release(&col[c]);
    PyBuffer_Release(&buf);
    return out;
}

/* ------------------------------------------------------------------ module */

static PyMethodDef codec_methods[] = {
    {"decode_records", codec_decode_records, METH_VARARGS,
     "Decode a records section into columns (see _codec_py.decode_records)."},
    {"build_records", codec_build_records, METH_VARARGS,
     "Consumer records from decoded columns (see _codec_py.build_records)."},
    {"gather", codec_gather, METH_O,
     "Copy (start, length) slices into Arrow binary layout (see _codec_py.gather)."},
    {"encode_record", codec_encode_record, METH_VARARGS,
     "Append one encoded record to a bytearray (see _codec_py.encode_record)."},
    {"encode_columns", codec_encode_columns, METH_VARARGS,
     "Append records from Arrow-layout columns (see _codec_py.encode_columns)."},
    {"record_frames_ok", codec_record_frames_ok, METH_VARARGS,
     "Whether an uncompressed batch's records tile it (see _codec_py.record_frames_ok)."},
    {"batches_ok", codec_batches_ok, METH_VARARGS,
     "A client's uncompressed batches checked: their headers, or None (see _codec_py)."},
    {"murmur2", codec_murmur2, METH_O, "Kafka's murmur2 hash of bytes, as a signed int."},
    {"murmur2_partitions", codec_murmur2_partitions, METH_VARARGS,
     "Partition per row of an Arrow-layout binary column (see _codec_py.murmur2_partitions)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef codec_module = {
    PyModuleDef_HEAD_INIT, "odradek.protocol._codec",
    "Compiled record-batch codec (see odradek.protocol.columns).", -1, codec_methods,
};

PyMODINIT_FUNC PyInit__codec(void) {
    PyObject *records = PyImport_ImportModule("odradek.protocol.records");
    if (records == NULL) return NULL;
    CorruptRecordError = PyObject_GetAttrString(records, "CorruptRecordError");
    Py_DECREF(records);
    if (CorruptRecordError == NULL) return NULL;
    return PyModule_Create(&codec_module);
}
