/* hopbench.transports._nixl: the nixl channel's wire sizes (transports/nixl/wire.py's structs,
 * exported as the module's *_SIZE constants and checked against them by tests/test_native.py),
 * the endpoint's state (the Python NixlChannel's fields of the same names, its inbox and the
 * prepared transfers) and that state's hand-over between the Python channel and C (state,
 * set_state). Included once, by transports/_nixl.c, after _nixl_capi.h. */
#ifndef HB_NIXL_EP_H
#define HB_NIXL_EP_H

#include <Python.h>

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "hb_endpoint.h"
#include "_nixl_capi.h"

/* ---------------------------------------------------------------- the wire (transports/nixl/wire.py) */

#define CREDIT_SIZE 34 /* !cIIIQQIB */
#define DATA_SIZE 13   /* !cIII */
#define NEXT_SIZE 8    /* !II */
#define EAGER_SIZE 9   /* !cII */
#define MISMATCH_SIZE 17
#define SLOTS 64 /* inbox entries per kind; a loop holds one or two */

static inline uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static inline uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) << 32 | rd32(p + 4); }
static inline void wr32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

typedef struct {
    int used;
    uint32_t k;
    int hard;
    uint32_t rid;
    int64_t length; /* -1: predicted */
    uint8_t *raw;   /* a hard credit's bytes (its registration for the Python channel to learn) */
    size_t rawlen;
} credit_t;

typedef struct {
    int used;
    uint32_t k;
    char kind; /* 'D', 'E', 'M' */
    int64_t value;
    uint8_t *body; /* eager */
    size_t bodylen;
} event_t;

typedef struct {
    int used;
    int64_t src; /* our region id */
    uint32_t rid; /* the peer's */
    int64_t remote_len;
    capi_req req;
} xfer_t;

typedef struct {
    capi_agent agent;
    char peer[512];
    uint32_t chan, me; /* the peer end's id (on what we send), ours (on what we take) */
    PyObject *bridge;  /* the Python channel's side: send, recv, region, foreign, copy_from */
    capi_opt_args args;
    capi_notif_map map;
    pthread_mutex_t lock; /* the inbox: other sessions' threads may file into it (bridge.put) */
    /* the channel's state (NixlChannel's fields of the same names) */
    int64_t sent, received, credited, eager_sends, credits_sent;
    int64_t pred_k[8], pred_rid[8];
    int npred;
    int64_t last_a, last_b;
    credit_t credits[SLOTS];
    event_t events[SLOTS];
    int goodbye;
    /* the loop's two buffers (their region ids) and the transfers prepared from the source */
    const uint8_t *src;
    size_t src_n;
    int64_t src_id;
    uint8_t *dst;
    size_t dst_n;
    int64_t dst_id;
    xfer_t xfers[16];
} nixl_ep;

static void credit_clear(credit_t *c) {
    free(c->raw);
    memset(c, 0, sizeof *c);
}
static void event_clear(event_t *e) {
    free(e->body);
    memset(e, 0, sizeof *e);
}

static credit_t *credit_slot(nixl_ep *e, uint32_t k, int make) {
    credit_t *free_slot = NULL;
    for (int i = 0; i < SLOTS; i++) {
        if (e->credits[i].used && e->credits[i].k == k)
            return &e->credits[i];
        if (!e->credits[i].used && !free_slot)
            free_slot = &e->credits[i];
    }
    if (make && free_slot) {
        free_slot->used = 1;
        free_slot->k = k;
        return free_slot;
    }
    return NULL;
}

static event_t *event_slot(nixl_ep *e, uint32_t k, int make) {
    event_t *free_slot = NULL;
    for (int i = 0; i < SLOTS; i++) {
        if (e->events[i].used && e->events[i].k == k)
            return &e->events[i];
        if (!e->events[i].used && !free_slot)
            free_slot = &e->events[i];
    }
    if (make && free_slot) {
        free_slot->used = 1;
        free_slot->k = k;
        return free_slot;
    }
    return NULL;
}

static nixl_ep *ep_of(PyObject *capsule) {
    hb_endpoint *hp = PyCapsule_GetPointer(capsule, HB_CAPSULE);
    return hp ? hp->self : NULL;
}

/* state(capsule) -> (sent, received, credited, eager_sends, credits_sent, predicted {k: rid},
 * (last two receive regions), credits {k: (hard, rid, length, raw or None)}, events {k: (kind,
 * value, body or None)}, goodbye); the inbox is handed over (emptied here). */
static PyObject *py_state(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O", &cap))
        return NULL;
    nixl_ep *e = ep_of(cap);
    if (!e)
        return NULL;
    PyObject *pred = PyDict_New(), *credits = PyDict_New(), *events = PyDict_New();
    if (!pred || !credits || !events)
        goto fail;
    for (int i = 0; i < e->npred; i++) {
        PyObject *kk = PyLong_FromLongLong(e->pred_k[i]), *v = PyLong_FromLongLong(e->pred_rid[i]);
        int bad = !kk || !v || PyDict_SetItem(pred, kk, v);
        Py_XDECREF(kk), Py_XDECREF(v);
        if (bad)
            goto fail;
    }
    pthread_mutex_lock(&e->lock);
    int bad = 0;
    for (int i = 0; i < SLOTS && !bad; i++) {
        credit_t *c = &e->credits[i];
        if (c->used) {
            PyObject *v = c->raw ? Py_BuildValue("(OIny#)", c->hard ? Py_True : Py_False, c->rid, (Py_ssize_t)c->length,
                                                 (const char *)c->raw, (Py_ssize_t)c->rawlen)
                                 : Py_BuildValue("(OInO)", c->hard ? Py_True : Py_False, c->rid, (Py_ssize_t)c->length,
                                                 Py_None);
            PyObject *kk = PyLong_FromUnsignedLong(c->k);
            bad = !v || !kk || PyDict_SetItem(credits, kk, v);
            Py_XDECREF(kk), Py_XDECREF(v);
            credit_clear(c);
        }
        event_t *ev = &e->events[i];
        if (ev->used && !bad) {
            PyObject *v = ev->body ? Py_BuildValue("(y#Ly#)", &ev->kind, (Py_ssize_t)1, (long long)ev->value,
                                                   (const char *)ev->body, (Py_ssize_t)ev->bodylen)
                                   : Py_BuildValue("(y#LO)", &ev->kind, (Py_ssize_t)1, (long long)ev->value, Py_None);
            PyObject *kk = PyLong_FromUnsignedLong(ev->k);
            bad = !v || !kk || PyDict_SetItem(events, kk, v);
            Py_XDECREF(kk), Py_XDECREF(v);
            event_clear(ev);
        }
    }
    int goodbye = e->goodbye;
    pthread_mutex_unlock(&e->lock);
    if (bad)
        goto fail;
    return Py_BuildValue("(LLLLLN(LL)NNO)", (long long)e->sent, (long long)e->received, (long long)e->credited,
                         (long long)e->eager_sends, (long long)e->credits_sent, pred, (long long)e->last_a,
                         (long long)e->last_b, credits, events, goodbye ? Py_True : Py_False);
fail:
    Py_XDECREF(pred), Py_XDECREF(credits), Py_XDECREF(events);
    return NULL;
}

/* A copy of a bytes-like object's contents into *out (malloc'd, *n its length); -1 (a Python
 * error set) when it is not one or memory runs out. */
static int copy_bytes(PyObject *obj, uint8_t **out, size_t *n) {
    Py_buffer v;
    if (PyObject_GetBuffer(obj, &v, PyBUF_SIMPLE))
        return -1;
    *out = malloc(v.len ? (size_t)v.len : 1), *n = (size_t)v.len;
    if (*out)
        memcpy(*out, v.buf, (size_t)v.len);
    PyBuffer_Release(&v);
    if (!*out) {
        *n = 0;
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* set_state(capsule, the same tuple state() returns, [(our region id, the peer's, transfer
 * handle, the peer region's length)]): the Python channel's state, handed to C. */
static PyObject *py_set_state(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *cap, *pred, *credits, *events, *goodbye, *xfers;
    long long sent, received, credited, eager_sends, credits_sent, a, b;
    if (!PyArg_ParseTuple(args, "O(LLLLLO!(LL)O!O!O)O!", &cap, &sent, &received, &credited, &eager_sends,
                          &credits_sent, &PyDict_Type, &pred, &a, &b, &PyDict_Type, &credits, &PyDict_Type, &events,
                          &goodbye, &PyList_Type, &xfers))
        return NULL;
    nixl_ep *e = ep_of(cap);
    if (!e)
        return NULL;
    if (PyDict_Size(pred) > 8 || PyDict_Size(credits) > SLOTS || PyDict_Size(events) > SLOTS || PyList_Size(xfers) > 16) {
        PyErr_SetString(PyExc_ValueError, "nixl channel state larger than the compiled endpoint holds");
        return NULL;
    }
    e->sent = sent, e->received = received, e->credited = credited, e->eager_sends = eager_sends;
    e->credits_sent = credits_sent, e->last_a = a, e->last_b = b;
    Py_ssize_t pos = 0;
    PyObject *key, *val;
    e->npred = 0;
    while (PyDict_Next(pred, &pos, &key, &val)) {
        e->pred_k[e->npred] = PyLong_AsLongLong(key), e->pred_rid[e->npred] = PyLong_AsLongLong(val);
        e->npred++;
    }
    pthread_mutex_lock(&e->lock);
    for (int i = 0; i < SLOTS; i++)
        credit_clear(&e->credits[i]), event_clear(&e->events[i]);
    e->goodbye = PyObject_IsTrue(goodbye);
    pos = 0;
    int bad = 0;
    while (!bad && PyDict_Next(credits, &pos, &key, &val)) {
        PyObject *hard, *raw;
        unsigned int rid;
        Py_ssize_t length;
        credit_t *c = credit_slot(e, (uint32_t)PyLong_AsUnsignedLong(key), 1);
        if (!c || !PyArg_ParseTuple(val, "OInO", &hard, &rid, &length, &raw)) {
            bad = 1;
            break;
        }
        c->hard = PyObject_IsTrue(hard), c->rid = rid, c->length = length;
        if (raw != Py_None && copy_bytes(raw, &c->raw, &c->rawlen)) {
            bad = 1;
            break;
        }
    }
    pos = 0;
    while (!bad && PyDict_Next(events, &pos, &key, &val)) {
        const char *kind;
        Py_ssize_t kn;
        long long value;
        PyObject *body;
        event_t *ev = event_slot(e, (uint32_t)PyLong_AsUnsignedLong(key), 1);
        if (!ev || !PyArg_ParseTuple(val, "y#LO", &kind, &kn, &value, &body) || kn != 1) {
            bad = 1;
            break;
        }
        ev->kind = kind[0], ev->value = value;
        if (body != Py_None && copy_bytes(body, &ev->body, &ev->bodylen)) {
            bad = 1;
            break;
        }
    }
    pthread_mutex_unlock(&e->lock);
    if (bad) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "nixl channel state: an inbox entry the compiled endpoint cannot hold");
        return NULL;
    }
    memset(e->xfers, 0, sizeof e->xfers);
    for (Py_ssize_t i = 0; i < PyList_Size(xfers); i++) {
        long long src, remote_len;
        unsigned int rid;
        unsigned long long handle;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(xfers, i), "LIKL", &src, &rid, &handle, &remote_len))
            return NULL;
        e->xfers[i] = (xfer_t){1, src, rid, remote_len, {(void *)(uintptr_t)handle}};
    }
    Py_RETURN_NONE;
}

#endif
