/* hopbench._native: the timed loop and the echo loop in C, over any transport's endpoint.
 *
 * The same contract as hopbench/core/timing.py (the reference): per cycle, stamp the
 * seq into the request (untimed), t0, send the whole request, receive the whole reply,
 * t1, samples[i] = t1 - t0, then check the reply's ids (untimed); a wrong reply is never
 * a sample. One clock read per edge: CLOCK_MONOTONIC, the clock of time.perf_counter_ns.
 * The GIL is released for the whole loop; it is taken back only to look at signals
 * (EINTR, or every ~1 ms while spinning), so Ctrl-C still stops a run.
 *
 * This file keeps only the loops, the clock, the ids, the CRC and the progress counter.
 * The bytes move through an hb_endpoint (hb_endpoint.h) a transport's own extension
 * hands over in a capsule: no socket or UCX call is made here.
 *
 * Each loop returns (cycles completed, status, phase, detail, exception or None); Python
 * turns a status into the transport's own exception (hopbench/core/native.py), so errors
 * are mapped at one boundary and a bad reply is re-checked by the Python checker for its
 * message. The CRC is zlib's crc32, from the libz Python's zlib module loaded.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "hb_endpoint.h"

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---------------------------------------------------------------- waiting (services to endpoints) */

typedef struct {
    PyThreadState *save;
    int64_t timeout_ns;
    int yield_every; /* sched_yield every N empty polls (a peer may share this CPU); 0 = never */
    PyObject *alive; /* asked every ~1 ms while waiting: False = the peer is gone; may be NULL */
} core_state;

/* Take the GIL back for a moment and run Python's signal handlers. */
static int signals(hb_ctx *c) {
    core_state *s = c->core;
    int r;
    PyEval_RestoreThread(s->save);
    r = PyErr_CheckSignals();
    s->save = PyEval_SaveThread();
    return r < 0 ? HB_INTERRUPTED : HB_OK;
}

/* While waiting: is the peer still there? (UCX tag receives are the worker's, so an
 * endpoint's failure does not end them; the transport's `alive` knows.) */
static int peer_gone(core_state *s) {
    int gone = 0;
    if (!s->alive)
        return 0;
    PyEval_RestoreThread(s->save);
    PyObject *r = PyObject_CallNoArgs(s->alive);
    if (r == NULL)
        PyErr_Clear();
    else {
        gone = !PyObject_IsTrue(r);
        Py_DECREF(r);
    }
    s->save = PyEval_SaveThread();
    return gone;
}

/* Called on every empty poll: yields, checks the deadline, signals and liveness every 256 spins. */
static int tick(hb_ctx *c, hb_wait *w) {
    core_state *s = c->core;
    uint64_t n = ++w->spins;
    if (s->yield_every && n % (uint64_t)s->yield_every == 0)
        sched_yield();
    if ((n & 0xFF) == 0) {
        int64_t t = now_ns();
        if (w->deadline == 0) {
            w->deadline = t + s->timeout_ns;
            w->next_check = t + 1000000;
        } else if (t > w->deadline) {
            return HB_TIMEOUT;
        }
        if (t > w->next_check) {
            w->next_check = t + 1000000;
            if (signals(c))
                return HB_INTERRUPTED;
            if (peer_gone(s))
                return HB_CLOSED;
        }
    }
    return HB_OK;
}

static int sleep_ns(hb_ctx *c, int64_t ns) { /* think time between cycles, not synchronisation */
    struct timespec ts = {ns / 1000000000LL, ns % 1000000000LL};
    while (nanosleep(&ts, &ts) != 0) {
        if (errno != EINTR)
            return HB_OK;
        if (signals(c))
            return HB_INTERRUPTED;
    }
    return HB_OK;
}

/* ---------------------------------------------------------------- ids and checksums */

static inline void pack_ids(uint8_t *buf, uint64_t seq, int k, int idb, int corrupt) {
    uint64_t mask = idb >= 8 ? ~0ULL : ((1ULL << (8 * idb)) - 1);
    for (int j = 0; j < k; j++) {
        uint64_t v = (seq * (uint64_t)k + (uint64_t)j) & mask;
        if (corrupt)
            v ^= mask;
        for (int b = 0; b < idb; b++)
            buf[j * idb + b] = (uint8_t)(v >> (8 * b));
    }
}

static inline int ids_ok(const uint8_t *buf, uint64_t seq, int k, int idb) {
    uint64_t mask = idb >= 8 ? ~0ULL : ((1ULL << (8 * idb)) - 1);
    for (int j = 0; j < k; j++) {
        uint64_t want = (seq * (uint64_t)k + (uint64_t)j) & mask, got = 0;
        for (int b = 0; b < idb; b++)
            got |= (uint64_t)buf[j * idb + b] << (8 * b);
        if (got != want)
            return 0;
    }
    return 1;
}

static inline void put_seq(uint8_t *buf, uint64_t seq) {
    for (int b = 0; b < 8; b++)
        buf[b] = (uint8_t)(seq >> (8 * b));
}

static inline uint64_t get_seq(const uint8_t *buf) {
    uint64_t v = 0;
    for (int b = 0; b < 8; b++)
        v |= (uint64_t)buf[b] << (8 * b);
    return v;
}

/* zlib's crc32 (the one zlib.crc32 calls), resolved at import from the loaded libz */
static unsigned long (*z_crc32)(unsigned long crc, const unsigned char *buf, unsigned int len);

static uint32_t crc32_buf(const uint8_t *p, size_t n) {
    unsigned long c = z_crc32(0, NULL, 0);
    while (n > 0) { /* zlib takes an unsigned int length */
        unsigned int chunk = n > 0x40000000u ? 0x40000000u : (unsigned int)n;
        c = z_crc32(c, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return (uint32_t)c;
}

/* ---------------------------------------------------------------- the loops */

typedef struct {
    Py_buffer req, rep, samples, progress;
    int have_progress;
} bufs;

static void release(bufs *b) {
    if (b->req.obj) PyBuffer_Release(&b->req);
    if (b->rep.obj) PyBuffer_Release(&b->rep);
    if (b->samples.obj) PyBuffer_Release(&b->samples);
    if (b->progress.obj) PyBuffer_Release(&b->progress);
}

static int get_bufs(bufs *b, PyObject *req, PyObject *rep, PyObject *samples, PyObject *progress) {
    memset(b, 0, sizeof *b);
    if (PyObject_GetBuffer(req, &b->req, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) goto fail;
    if (PyObject_GetBuffer(rep, &b->rep, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) goto fail;
    if (samples != Py_None) {
        if (PyObject_GetBuffer(samples, &b->samples, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto fail;
        if (b->samples.itemsize != 8) {
            PyErr_SetString(PyExc_TypeError, "samples must be a contiguous int64 array");
            goto fail;
        }
    }
    if (progress != Py_None) {
        if (PyObject_GetBuffer(progress, &b->progress, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) goto fail;
        if (b->progress.len < 8) {
            PyErr_SetString(PyExc_TypeError, "progress must hold one int64");
            goto fail;
        }
        b->have_progress = 1;
    }
    return 0;
fail:
    release(b);
    return -1;
}

/* (completed, status, phase, detail, exception or None): an interrupt's exception is handed
 * back with the count, so the caller can record it (progress.done) as the Python loop
 * does; phase names the failing call (0 = receive, 1 = send). */
static PyObject *result(Py_ssize_t done, int st, int phase, int64_t detail) {
    if (st == HB_INTERRUPTED) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        if (tb && value)
            PyException_SetTraceback(value, tb);
        Py_XDECREF(type);
        Py_XDECREF(tb);
        if (!value) {
            Py_INCREF(Py_None);
            value = Py_None;
        }
        return Py_BuildValue("(niiLN)", done, st, phase, (long long)detail, value);
    }
    return Py_BuildValue("(niiLO)", done, st, phase, (long long)detail, Py_None);
}

/* The endpoint out of its capsule, checked against this core's ABI. */
static hb_endpoint *endpoint(PyObject *capsule) {
    hb_endpoint *ep = PyCapsule_GetPointer(capsule, HB_CAPSULE);
    if (ep && ep->abi != HB_ENDPOINT_ABI) {
        PyErr_Format(PyExc_TypeError, "endpoint ABI %d, the core's is %d (rebuild hopbench)", ep->abi, HB_ENDPOINT_ABI);
        return NULL;
    }
    return ep;
}

typedef struct {
    hb_endpoint *ep;
    hb_ctx c;
    core_state s;
    bufs b;
} loop_args;

/* endpoint, timeout_ns, yield_every, progress (int64 buffer or None), alive (callable or
 * None), request, reply: the arguments both loops start with. */
static int open_loop(loop_args *a, PyObject *capsule, long long timeout_ns, int yield_every, PyObject *progress,
                     PyObject *alive, PyObject *req, PyObject *rep, PyObject *samples) {
    memset(a, 0, sizeof *a);
    if (!(a->ep = endpoint(capsule)))
        return -1;
    if (get_bufs(&a->b, req, rep, samples, progress) < 0)
        return -1;
    a->s.timeout_ns = timeout_ns;
    a->s.yield_every = yield_every;
    a->s.alive = alive == Py_None ? NULL : alive;
    a->c.tick = tick;
    a->c.signals = signals;
    a->c.progress = a->b.have_progress ? (int64_t *)a->b.progress.buf : NULL;
    a->c.core = &a->s;
    return 0;
}

static PyObject *py_client(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *capsule, *progress, *alive, *reqo, *repo, *samples_o;
    long long timeout_ns, gap_ns;
    int yield_every, k, idb;
    Py_ssize_t n;
    loop_args a;
    if (!PyArg_ParseTuple(args, "OLiOOOOiiOnL", &capsule, &timeout_ns, &yield_every, &progress, &alive, &reqo, &repo,
                          &k, &idb, &samples_o, &n, &gap_ns))
        return NULL;
    if (open_loop(&a, capsule, timeout_ns, yield_every, progress, alive, reqo, repo, samples_o) < 0)
        return NULL;
    uint8_t *req = a.b.req.buf, *rep = a.b.rep.buf;
    int64_t *samples = a.b.samples.buf;
    size_t nreq = (size_t)a.b.req.len, nrep = (size_t)a.b.rep.len;
    hb_endpoint *ep = a.ep;
    hb_ctx *c = &a.c;
    Py_ssize_t i = 0;
    int st = HB_OK, phase = 0;
    int64_t detail = 0;
    if (a.b.req.len < 8 || a.b.rep.len < (Py_ssize_t)k * idb || a.b.samples.len / 8 < n) {
        release(&a.b);
        PyErr_SetString(PyExc_ValueError, "buffers too small for the seq, the ids or the samples");
        return NULL;
    }
    a.s.save = PyEval_SaveThread();
    for (; i < n; i++) {
        put_seq(req, (uint64_t)i);
        int64_t t0 = now_ns();
        st = ep->tx(c, ep->self, req, nreq, &detail);
        if (st) {
            phase = 1;
            break;
        }
        hb_moved(c);
        st = ep->rx(c, ep->self, rep, nrep, &detail);
        int64_t t1 = now_ns();
        if (st) break;
        hb_moved(c);
        if (!ids_ok(rep, (uint64_t)i, k, idb)) {
            st = HB_BAD_REPLY;
            break;
        }
        samples[i] = t1 - t0;
        if (gap_ns > 0 && (st = sleep_ns(c, gap_ns)) != 0) {
            i++; /* the cycle completed: its sample stands */
            break;
        }
    }
    PyEval_RestoreThread(a.s.save);
    release(&a.b);
    return result(i, st, phase, detail);
}

static PyObject *py_echo(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *capsule, *progress, *alive, *reqo, *repo;
    long long timeout_ns, crc;
    int yield_every, k, idb;
    Py_ssize_t total;
    loop_args a;
    if (!PyArg_ParseTuple(args, "OLiOOOOiinL", &capsule, &timeout_ns, &yield_every, &progress, &alive, &reqo, &repo,
                          &k, &idb, &total, &crc))
        return NULL;
    if (open_loop(&a, capsule, timeout_ns, yield_every, progress, alive, reqo, repo, Py_None) < 0)
        return NULL;
    uint8_t *req = a.b.req.buf, *rep = a.b.rep.buf;
    size_t nreq = (size_t)a.b.req.len, nrep = (size_t)a.b.rep.len;
    hb_endpoint *ep = a.ep;
    hb_ctx *c = &a.c;
    Py_ssize_t seq = 0;
    int st = HB_OK, phase = 0;
    int64_t detail = 0;
    if (a.b.req.len < 8 || a.b.rep.len < (Py_ssize_t)k * idb) {
        release(&a.b);
        PyErr_SetString(PyExc_ValueError, "buffers too small for the seq or the ids");
        return NULL;
    }
    a.s.save = PyEval_SaveThread();
    pack_ids(rep, 0, k, idb, 0); /* the reply for the expected seq is packed before the request arrives */
    for (; seq < total; seq++) {
        st = ep->rx(c, ep->self, req, nreq, &detail);
        if (st) break;
        hb_moved(c);
        if (get_seq(req) != (uint64_t)seq) {
            st = HB_BAD_SEQ;
            break;
        }
        if (crc >= 0 && crc32_buf(req + 8, nreq - 8) != (uint32_t)crc)
            pack_ids(rep, (uint64_t)seq, k, idb, 1);
        st = ep->tx(c, ep->self, rep, nrep, &detail);
        if (st) {
            phase = 1;
            break;
        }
        hb_moved(c);
        pack_ids(rep, (uint64_t)seq + 1, k, idb, 0);
    }
    PyEval_RestoreThread(a.s.save);
    release(&a.b);
    return result(seq, st, phase, detail);
}

static PyObject *py_crc32(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "y*", &b))
        return NULL;
    uint32_t c = crc32_buf(b.buf, (size_t)b.len);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef methods[] = {
    {"client", py_client, METH_VARARGS,
     "client(endpoint, timeout_ns, yield_every, progress, alive, request, reply, k, id_bytes, samples, n, gap_ns)"},
    {"echo", py_echo, METH_VARARGS,
     "echo(endpoint, timeout_ns, yield_every, progress, alive, request, reply, k, id_bytes, total, crc)"},
    {"crc32", py_crc32, METH_VARARGS, "The echo loop's checksum (zlib's crc32), for the tests."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "hopbench._native",
    .m_doc = "hopbench's compiled timed loops over a transport's endpoint (hopbench/core/native.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    /* the libz Python's zlib module links (hopbench.core.native imports zlib first) */
    void *z = dlopen("libz.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!z)
        z = dlopen("libz.so.1", RTLD_NOW);
    if (z)
        *(void **)(&z_crc32) = dlsym(z, "crc32");
    if (!z_crc32) {
        PyErr_SetString(PyExc_ImportError, "zlib's crc32 not found (libz.so.1)");
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    static const char *names[] = HB_STATUS_NAMES;
    PyObject *t = PyTuple_New(sizeof names / sizeof names[0]);
    for (Py_ssize_t i = 0; t && i < (Py_ssize_t)(sizeof names / sizeof names[0]); i++)
        PyTuple_SET_ITEM(t, i, PyUnicode_FromString(names[i]));
    if (!t || PyModule_AddObject(m, "STATUS", t) < 0) {
        Py_XDECREF(t);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "ABI", HB_ENDPOINT_ABI);
    return m;
}
