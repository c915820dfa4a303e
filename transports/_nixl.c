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
 * No NIXL header is needed to build this: the few functions used are declared below as
 * NIXL's C API (libnixl_capi.so, beside libnixl.so in the nixl-cu12 wheel) declares them, and
 * resolved at run time (bind(path), dlsym). That API wraps a `nixlAgent *` in a one-field
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

/* ---------------------------------------------------------------- NIXL's C API (libnixl_capi) */

typedef int capi_status; /* 0 success, 1 in progress, < 0 an error */
#define CAPI_SUCCESS 0
#define CAPI_IN_PROG 1
typedef struct {
    void *inner; /* nixlAgent * */
} capi_agent;
typedef struct {
    void *req; /* nixlXferReqH * */
} capi_req;
typedef void *capi_opt_args;
typedef void *capi_notif_map;

static struct {
    int bound;
    capi_status (*post)(capi_agent *, capi_req *, capi_opt_args);
    capi_status (*status)(capi_agent *, capi_req *);
    capi_status (*create_opt_args)(capi_opt_args *);
    capi_status (*destroy_opt_args)(capi_opt_args);
    capi_status (*set_notif_msg)(capi_opt_args, const void *, size_t);
    capi_status (*set_has_notif)(capi_opt_args, bool);
    capi_status (*create_notif_map)(capi_notif_map *);
    capi_status (*destroy_notif_map)(capi_notif_map);
    capi_status (*get_notifs)(capi_agent *, capi_notif_map, capi_opt_args);
    capi_status (*map_size)(capi_notif_map, size_t *);
    capi_status (*map_agent_at)(capi_notif_map, size_t, const char **);
    capi_status (*map_notifs_size)(capi_notif_map, const char *, size_t *);
    capi_status (*map_notif)(capi_notif_map, const char *, size_t, const void **, size_t *);
    capi_status (*map_clear)(capi_notif_map);
    capi_status (*gen_notif)(capi_agent *, const char *, const void *, size_t, capi_opt_args);
    capi_status (*local_md)(capi_agent *, void **, size_t *);
} nx;

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

static nixl_ep *ep_of(PyObject *capsule) {
    hb_endpoint *hp = PyCapsule_GetPointer(capsule, HB_CAPSULE);
    return hp ? hp->self : NULL;
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
        if (raw != Py_None) {
            Py_buffer v;
            if (PyObject_GetBuffer(raw, &v, PyBUF_SIMPLE)) {
                bad = 1;
                break;
            }
            c->raw = malloc(v.len ? (size_t)v.len : 1), c->rawlen = (size_t)v.len;
            if (c->raw)
                memcpy(c->raw, v.buf, (size_t)v.len);
            PyBuffer_Release(&v);
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
        if (body != Py_None) {
            Py_buffer v;
            if (PyObject_GetBuffer(body, &v, PyBUF_SIMPLE)) {
                bad = 1;
                break;
            }
            ev->body = malloc(v.len ? (size_t)v.len : 1), ev->bodylen = (size_t)v.len;
            if (ev->body)
                memcpy(ev->body, v.buf, (size_t)v.len);
            PyBuffer_Release(&v);
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

/* The nixlAgent * inside a pybind11 instance of nixl_cu12._bindings.nixlAgent: pybind11's
 * simple layout (one C++ base, a std::unique_ptr holder) keeps the value pointer right after
 * the object head and the holder, which owns the same pointer, next to it. Both must agree;
 * the caller then checks the pointer with local_md() against the binding's getLocalMD(). */
static PyObject *py_agent_pointer(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *obj;
    if (!PyArg_ParseTuple(args, "O", &obj))
        return NULL;
    void **words = (void **)((char *)obj + sizeof(PyObject));
    if (Py_TYPE(obj)->tp_basicsize < (Py_ssize_t)(sizeof(PyObject) + 2 * sizeof(void *)) || !words[0] ||
        words[0] != words[1]) {
        PyErr_SetString(PyExc_TypeError, "not a pybind11 instance with the simple layout (value pointer, holder)");
        return NULL;
    }
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)words[0]);
}

static PyObject *py_local_md(PyObject *Py_UNUSED(self), PyObject *args) {
    unsigned long long agent;
    if (!PyArg_ParseTuple(args, "K", &agent))
        return NULL;
    if (!nx.bound) {
        PyErr_SetString(PyExc_RuntimeError, "NIXL's C API is not bound (call bind first)");
        return NULL;
    }
    capi_agent a = {(void *)(uintptr_t)agent};
    void *data = NULL;
    size_t len = 0;
    if (nx.local_md(&a, &data, &len) != CAPI_SUCCESS) {
        PyErr_SetString(PyExc_OSError, "nixl_capi_get_local_md failed");
        return NULL;
    }
    PyObject *r = PyBytes_FromStringAndSize(data, (Py_ssize_t)len);
    free(data);
    return r;
}

static PyObject *py_bind(PyObject *Py_UNUSED(self), PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path))
        return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        PyErr_Format(PyExc_OSError, "cannot load %s: %s", path, dlerror());
        return NULL;
    }
#define SYM(field, name)                                                                          \
    do {                                                                                          \
        *(void **)(&nx.field) = dlsym(h, name);                                                   \
        if (!nx.field) {                                                                          \
            PyErr_Format(PyExc_OSError, "%s not found in %s", name, path);                        \
            return NULL;                                                                          \
        }                                                                                         \
    } while (0)
    SYM(post, "nixl_capi_post_xfer_req");
    SYM(status, "nixl_capi_get_xfer_status");
    SYM(create_opt_args, "nixl_capi_create_opt_args");
    SYM(destroy_opt_args, "nixl_capi_destroy_opt_args");
    SYM(set_notif_msg, "nixl_capi_opt_args_set_notif_msg");
    SYM(set_has_notif, "nixl_capi_opt_args_set_has_notif");
    SYM(create_notif_map, "nixl_capi_create_notif_map");
    SYM(destroy_notif_map, "nixl_capi_destroy_notif_map");
    SYM(get_notifs, "nixl_capi_get_notifs");
    SYM(map_size, "nixl_capi_notif_map_size");
    SYM(map_agent_at, "nixl_capi_notif_map_get_agent_at");
    SYM(map_notifs_size, "nixl_capi_notif_map_get_notifs_size");
    SYM(map_notif, "nixl_capi_notif_map_get_notif");
    SYM(map_clear, "nixl_capi_notif_map_clear");
    SYM(gen_notif, "nixl_capi_gen_notif");
    SYM(local_md, "nixl_capi_get_local_md");
#undef SYM
    nx.bound = 1;
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
    if (m)
        PyModule_AddIntConstant(m, "ABI", HB_ENDPOINT_ABI);
    return m;
}
