/* hopbench.transports._nixl: the nixl channel's timed calls in C, for the core's compiled loops.
 *
 * endpoint(agent, peer, chan, me, bridge) -> a capsule holding an hb_endpoint
 * (hopbench/core/hb_endpoint.h) that speaks the nixl channel's wire protocol
 * (transports/nixl/wire.py, docs/PROTOCOL.md "Data channels") on the agent the Python
 * channel made: each send is one posted WRITE of a prepared transfer with its data
 * notification (and the predicted credit riding on it), each receive waits for message k's
 * notification; both poll the agent's notifications and the transfer's status without the
 * interpreter. What the steady loop never needs (the first credit of a buffer with its
 * registration, a credit for another buffer, an eager message past the wait) is done by the
 * Python channel itself (the bridge's send / recv, with the state handed over and back), so
 * the two implementations cannot drift: the Python channel stays the reference.
 *
 * No NIXL header is needed to build this: the few functions used are declared in
 * _nixl_capi.h as NIXL's C API (libnixl_capi.so, beside libnixl.so in the nixl-cu12 wheel)
 * declares them, and resolved at run time (bind(path), dlsym). The wire's sizes and the
 * endpoint's state with its hand-over to and from Python are in _nixl_ep.h. That API wraps a `nixlAgent *` in a one-field
 * struct and a `nixlXferReqH *` likewise; the agent is the Python binding's own (its pointer
 * read from the pybind11 instance by agent_pointer and checked against getLocalMD by the
 * Python side before use), the transfers the ones the Python channel prepared.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "hb_endpoint.h"

#include "_nixl_capi.h"
#include "_nixl_ep.h"


/* _Inbox.put: one notification of this channel, filed by k (under the lock). 0, or -1 when full. */
static int put(nixl_ep *e, const uint8_t *m, size_t len) {
    int ok = 0;
    pthread_mutex_lock(&e->lock);
    char kind = (char)m[0];
    if (kind == 'D' && len >= DATA_SIZE) {
        event_t *ev = event_slot(e, rd32(m + 5), 1);
        if (ev) {
            free(ev->body);
            ev->kind = 'D', ev->value = rd32(m + 9), ev->body = NULL, ev->bodylen = 0;
        } else
            ok = -1;
        if (len == DATA_SIZE + NEXT_SIZE) { /* the sender's predicted next receive; a hard credit wins */
            uint32_t nk = rd32(m + DATA_SIZE);
            if (!credit_slot(e, nk, 0)) {
                credit_t *c = credit_slot(e, nk, 1);
                if (c)
                    c->hard = 0, c->rid = rd32(m + DATA_SIZE + 4), c->length = -1;
                else
                    ok = -1;
            }
        }
    } else if (kind == 'C' && len >= CREDIT_SIZE) {
        credit_t *c = credit_slot(e, rd32(m + 5), 1);
        if (c) {
            free(c->raw);
            c->hard = 1, c->rid = rd32(m + 9), c->length = (int64_t)rd64(m + 21);
            c->raw = malloc(len), c->rawlen = len;
            if (c->raw)
                memcpy(c->raw, m, len);
            else
                ok = -1;
        } else
            ok = -1;
    } else if (kind == 'E' && len >= EAGER_SIZE) {
        event_t *ev = event_slot(e, rd32(m + 5), 1);
        if (ev) {
            free(ev->body);
            ev->kind = 'E', ev->value = 0, ev->bodylen = len - EAGER_SIZE;
            ev->body = malloc(ev->bodylen ? ev->bodylen : 1);
            if (ev->body)
                memcpy(ev->body, m + EAGER_SIZE, ev->bodylen);
            else
                ok = -1;
        } else
            ok = -1;
    } else if (kind == 'M' && len >= MISMATCH_SIZE) {
        event_t *ev = event_slot(e, rd32(m + 5), 1);
        if (ev) {
            free(ev->body);
            ev->kind = 'M', ev->value = (int64_t)rd64(m + 9), ev->body = NULL;
        } else
            ok = -1;
    } else if (kind == 'G') {
        e->goodbye = 1;
    }
    pthread_mutex_unlock(&e->lock);
    return ok;
}

/* ---------------------------------------------------------------- polling */

/* A notification for another channel of the agent: the Python agent files it (with the GIL). */
static int foreign(nixl_ep *e, const char *agent, const void *data, size_t len) {
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = PyObject_CallMethod(e->bridge, "foreign", "sy#", agent, (const char *)data, (Py_ssize_t)len);
    int st = r ? HB_OK : HB_INTERRUPTED;
    Py_XDECREF(r);
    PyGILState_Release(g);
    return st;
}

/* Fetch the agent's notifications (progressing it) and file each where it belongs. */
static int poll_notifs(nixl_ep *e, int *got, int64_t *detail) {
    size_t agents = 0;
    capi_status s = nx.get_notifs(&e->agent, e->map, NULL);
    if (s != CAPI_SUCCESS) {
        *detail = s;
        return HB_LIBRARY;
    }
    nx.map_size(e->map, &agents);
    *got = 0;
    int st = HB_OK;
    for (size_t i = 0; i < agents && st == HB_OK; i++) {
        const char *name = NULL;
        size_t count = 0;
        if (nx.map_agent_at(e->map, i, &name) != CAPI_SUCCESS || nx.map_notifs_size(e->map, name, &count) != CAPI_SUCCESS)
            continue;
        int mine = strcmp(name, e->peer) == 0;
        for (size_t j = 0; j < count && st == HB_OK; j++) {
            const void *data;
            size_t len;
            if (nx.map_notif(e->map, name, j, &data, &len) != CAPI_SUCCESS || len < 5)
                continue;
            if (mine && rd32((const uint8_t *)data + 1) == e->me) {
                if (put(e, data, len)) {
                    *detail = -1000; /* the inbox is full: a peer far ahead of the protocol */
                    st = HB_LIBRARY;
                }
                *got = 1;
            } else {
                st = foreign(e, name, data, len);
            }
        }
    }
    nx.map_clear(e->map);
    return st;
}

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---------------------------------------------------------------- the Python channel, for what the loop rarely needs */

/* bridge.<what>(address, nbytes): the Python channel's own send or receive, its state handed
 * over first (the bridge reads it with state() and gives it back with set_state()). */
static int python_call(nixl_ep *e, const char *what, const void *p, size_t n, int64_t extra) {
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = PyObject_CallMethod(e->bridge, what, "KnL", (unsigned long long)(uintptr_t)p, (Py_ssize_t)n,
                                      (long long)extra);
    int st = r ? HB_OK : HB_INTERRUPTED; /* the exception stays set: the core raises it as it is */
    Py_XDECREF(r);
    PyGILState_Release(g);
    return st;
}

/* The region id of the loop's buffer (registered by the Python channel the first time). */
static int region(nixl_ep *e, const void *p, size_t n, int64_t *id) {
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = PyObject_CallMethod(e->bridge, "region", "Kn", (unsigned long long)(uintptr_t)p, (Py_ssize_t)n);
    int st = HB_OK;
    if (!r)
        st = HB_INTERRUPTED;
    else {
        *id = PyLong_AsLongLong(r);
        Py_DECREF(r);
        if (*id == -1 && PyErr_Occurred())
            st = HB_INTERRUPTED;
    }
    PyGILState_Release(g);
    return st;
}

static xfer_t *xfer_for(nixl_ep *e, uint32_t rid) {
    for (int i = 0; i < 16; i++)
        if (e->xfers[i].used && e->xfers[i].src == e->src_id && e->xfers[i].rid == rid)
            return &e->xfers[i];
    return NULL;
}

/* ---------------------------------------------------------------- send and receive */

static int wait_done(hb_ctx *c, nixl_ep *e, capi_req *req, int64_t *detail) {
    hb_wait w = {0, 0, 0};
    for (;;) {
        for (int i = 0; i < 64; i++) {
            capi_status s = nx.status(&e->agent, req);
            if (s == CAPI_SUCCESS)
                return HB_OK;
            if (s != CAPI_IN_PROG) {
                *detail = s;
                return HB_LIBRARY;
            }
        }
        int got;
        int st = poll_notifs(e, &got, detail); /* the peer's notifications keep flowing meanwhile */
        if (st)
            return st;
        if (e->goodbye)
            return HB_CLOSED;
        if ((st = c->tick(c, &w)))
            return st;
    }
}

#define EAGER_MAX (64 << 10)
#define EAGER_WAIT_NS 10000000LL

static int nixl_send(hb_ctx *c, void *self, const uint8_t *p, size_t n, int64_t *detail) {
    nixl_ep *e = self;
    int st;
    if (p != e->src || n != e->src_n) {
        if ((st = region(e, p, n, &e->src_id)))
            return st;
        e->src = p, e->src_n = n;
    }
    uint32_t k = (uint32_t)e->sent;
    /* wait for the credit of k (the Python channel's _credit, for the loop's case); read under
     * the lock: a hard credit for k may replace a predicted one while we look */
    hb_wait w = {0, 0, 0};
    int64_t eager_at = n <= EAGER_MAX ? now_ns() + EAGER_WAIT_NS : 0;
    int have = 0, hard = 0;
    uint32_t rid = 0;
    int64_t length = 0;
    for (;;) {
        int stale = 0;
        pthread_mutex_lock(&e->lock);
        credit_t *cr = credit_slot(e, k, 0);
        if (cr)
            have = 1, hard = cr->hard, rid = cr->rid, length = cr->length;
        for (int i = 0; i < SLOTS; i++)
            stale |= e->credits[i].used && e->credits[i].k < k;
        pthread_mutex_unlock(&e->lock);
        if (have || stale)
            break;
        int got;
        if ((st = poll_notifs(e, &got, detail)))
            return st;
        if (got)
            continue;
        if (e->goodbye)
            return HB_CLOSED;
        if (eager_at && now_ns() > eager_at)
            break;
        if ((st = c->tick(c, &w)))
            return st;
    }
    xfer_t *x = have ? xfer_for(e, rid) : NULL;
    if (!x || (hard ? length != (int64_t)n : x->remote_len != (int64_t)n))
        return python_call(e, "send", p, n, 0); /* the first credit of a buffer, eager, a mismatch */
    int taken = 0;
    pthread_mutex_lock(&e->lock);
    credit_t *cr = credit_slot(e, k, 0);
    if (cr && cr->rid == rid && cr->hard == hard)
        credit_clear(cr), taken = 1;
    pthread_mutex_unlock(&e->lock);
    if (!taken) /* replaced meanwhile: the Python channel reads the one there now */
        return python_call(e, "send", p, n, 0);
    e->sent = k + 1;
    uint8_t msg[DATA_SIZE + NEXT_SIZE];
    size_t len = DATA_SIZE;
    msg[0] = 'D';
    wr32(msg + 1, e->chan), wr32(msg + 5, k), wr32(msg + 9, rid);
    if (e->last_a == e->last_b && e->credited == e->received && e->npred < 8) { /* steady: predict our next receive */
        wr32(msg + DATA_SIZE, (uint32_t)e->received), wr32(msg + DATA_SIZE + 4, (uint32_t)e->last_a);
        len += NEXT_SIZE;
        e->pred_k[e->npred] = e->received, e->pred_rid[e->npred] = e->last_a, e->npred++;
        e->credited++;
    }
    nx.set_notif_msg(e->args, msg, len);
    capi_status s = nx.post(&e->agent, &x->req, e->args);
    if (s == CAPI_IN_PROG)
        return wait_done(c, e, &x->req, detail);
    if (s != CAPI_SUCCESS) {
        *detail = s;
        return HB_LIBRARY;
    }
    return HB_OK;
}

static int nixl_recv(hb_ctx *c, void *self, uint8_t *p, size_t n, int64_t *detail) {
    nixl_ep *e = self;
    int st;
    if (p != e->dst || n != e->dst_n) {
        if ((st = region(e, p, n, &e->dst_id)))
            return st;
        e->dst = p, e->dst_n = n;
    }
    int64_t k = e->received;
    int at = -1;
    for (int i = 0; i < e->npred; i++)
        if (e->pred_k[i] == k)
            at = i;
    if (at < 0 || e->pred_rid[at] != e->dst_id) /* our credit must go out first: the Python channel sends it */
        return python_call(e, "recv", p, n, 0);
    e->pred_k[at] = e->pred_k[e->npred - 1], e->pred_rid[at] = e->pred_rid[e->npred - 1], e->npred--;
    e->received = k + 1;
    e->last_a = e->last_b, e->last_b = e->dst_id;
    hb_wait w = {0, 0, 0};
    event_t got_ev;
    for (;;) {
        pthread_mutex_lock(&e->lock);
        event_t *ev = event_slot(e, (uint32_t)k, 0);
        if (ev) {
            got_ev = *ev;
            memset(ev, 0, sizeof *ev); /* its body now got_ev's */
        }
        pthread_mutex_unlock(&e->lock);
        if (ev)
            break;
        if (e->goodbye)
            return HB_CLOSED;
        int got;
        if ((st = poll_notifs(e, &got, detail)))
            return st;
        if (!got && (st = c->tick(c, &w)))
            return st;
    }
    st = HB_OK;
    if (got_ev.kind == 'D') {
        if (got_ev.value != e->dst_id) /* written where the peer was told to: copied over */
            st = python_call(e, "copy_from", p, n, got_ev.value);
    } else if (got_ev.kind == 'M') {
        *detail = got_ev.value, st = HB_LENGTH;
    } else if (got_ev.bodylen != n) {
        *detail = (int64_t)got_ev.bodylen, st = HB_LENGTH;
    } else {
        memcpy(p, got_ev.body, n);
    }
    free(got_ev.body);
    return st;
}

/* ---------------------------------------------------------------- the capsule and the state */

static void ep_free(PyObject *capsule) {
    hb_endpoint *hp = PyCapsule_GetPointer(capsule, HB_CAPSULE);
    if (!hp)
        return;
    nixl_ep *e = hp->self;
    if (e) {
        for (int i = 0; i < SLOTS; i++)
            credit_clear(&e->credits[i]), event_clear(&e->events[i]);
        if (e->args)
            nx.destroy_opt_args(e->args);
        if (e->map)
            nx.destroy_notif_map(e->map);
        pthread_mutex_destroy(&e->lock);
        Py_XDECREF(e->bridge);
        free(e);
    }
    free(hp);
}


static PyObject *py_endpoint(PyObject *Py_UNUSED(self), PyObject *args) {
    unsigned long long agent;
    const char *peer;
    unsigned int chan, me;
    PyObject *bridge;
    if (!PyArg_ParseTuple(args, "KsIIO", &agent, &peer, &chan, &me, &bridge))
        return NULL;
    if (!nx.bound) {
        PyErr_SetString(PyExc_RuntimeError, "NIXL's C API is not bound (call bind first)");
        return NULL;
    }
    if (strlen(peer) >= sizeof(((nixl_ep *)0)->peer)) {
        PyErr_SetString(PyExc_ValueError, "peer agent name too long");
        return NULL;
    }
    nixl_ep *e = calloc(1, sizeof *e);
    hb_endpoint *hp = calloc(1, sizeof *hp);
    if (!e || !hp) {
        free(e), free(hp);
        return PyErr_NoMemory();
    }
    e->agent.inner = (void *)(uintptr_t)agent;
    strcpy(e->peer, peer);
    e->chan = chan, e->me = me;
    e->src_id = e->dst_id = -1;
    e->last_b = -1;
    pthread_mutex_init(&e->lock, NULL);
    Py_INCREF(bridge);
    e->bridge = bridge;
    *hp = (hb_endpoint){HB_ENDPOINT_ABI, nixl_send, nixl_recv, e};
    PyObject *cap = PyCapsule_New(hp, HB_CAPSULE, ep_free);
    if (!cap) {
        Py_DECREF(bridge);
        free(e), free(hp);
        return NULL;
    }
    if (nx.create_opt_args(&e->args) != CAPI_SUCCESS || nx.set_has_notif(e->args, true) != CAPI_SUCCESS ||
        nx.create_notif_map(&e->map) != CAPI_SUCCESS) {
        Py_DECREF(cap);
        PyErr_SetString(PyExc_OSError, "NIXL's C API could not make its argument and notification objects");
        return NULL;
    }
    return cap;
}


/* put(capsule, notification): one of this channel's notifications, polled by another thread. */
static PyObject *py_put(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *cap;
    Py_buffer v;
    if (!PyArg_ParseTuple(args, "Oy*", &cap, &v))
        return NULL;
    nixl_ep *e = ep_of(cap);
    int r = e ? put(e, v.buf, (size_t)v.len) : -1;
    PyBuffer_Release(&v);
    if (!e)
        return NULL;
    if (r) {
        PyErr_SetString(PyExc_OverflowError, "the compiled nixl endpoint's inbox is full");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"endpoint", py_endpoint, METH_VARARGS,
     "endpoint(agent, peer, chan, me, bridge): a nixl channel's calls as an hb_endpoint capsule."},
    {"state", py_state, METH_VARARGS, "The channel state the endpoint holds (its inbox handed over)."},
    {"set_state", py_set_state, METH_VARARGS, "Hand the Python channel's state to the endpoint."},
    {"put", py_put, METH_VARARGS, "File one of the channel's notifications polled by another thread."},
    {"agent_pointer", py_agent_pointer, METH_VARARGS, "The nixlAgent * of a nixl_cu12 nixlAgent object."},
    {"local_md", py_local_md, METH_VARARGS, "getLocalMD through NIXL's C API (checks an agent pointer)."},
    {"bind", py_bind, METH_VARARGS, "Resolve NIXL's C API from libnixl_capi.so at PATH."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "hopbench.transports._nixl",
    .m_doc = "The nixl channel's send and recv in C (hopbench/core/hb_endpoint.h).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__nixl(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "ABI", HB_ENDPOINT_ABI) || PyModule_AddIntConstant(m, "CREDIT_SIZE", CREDIT_SIZE) ||
              PyModule_AddIntConstant(m, "DATA_SIZE", DATA_SIZE) || PyModule_AddIntConstant(m, "NEXT_SIZE", NEXT_SIZE) ||
              PyModule_AddIntConstant(m, "EAGER_SIZE", EAGER_SIZE) ||
              PyModule_AddIntConstant(m, "MISMATCH_SIZE", MISMATCH_SIZE)))
        Py_CLEAR(m);
    return m;
}