/* hopbench._native: the timed loop and the echo loop in C, for TCP sockets and UCX.
 *
 * The same contract as hopbench/core/timing.py (the reference): per cycle, stamp the
 * seq into the request (untimed), t0, send the whole request, receive the whole reply,
 * t1, samples[i] = t1 - t0, then check the reply's ids (untimed); a wrong reply is never
 * a sample. One clock read per edge: CLOCK_MONOTONIC, the clock of time.perf_counter_ns.
 * The GIL is released for the whole loop; it is taken back only to look at signals
 * (EINTR, or every ~1 ms while spinning), so Ctrl-C still stops a run.
 *
 * Each loop returns (cycles completed, status, detail); Python turns a status into the
 * same exception the Python loop raises (hopbench/core/native.py), so errors are mapped
 * at one boundary and a bad reply is re-checked by the Python checker for its message.
 *
 * UCX: no UCX header or library is needed to build this. The ucp functions are resolved
 * at run time (dlsym) from the libucp that ucxx already loaded (the wheel's), and the one
 * struct used, ucp_request_param_t, is declared below as the prefix of UCX's own (its ABI
 * is append-only, selected by op_attr_mask; tests/test_native.py compares the offsets
 * with the installed ucp.h when a compiler and the header are there).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

enum {
    ST_OK = 0,
    ST_TIMEOUT = 1,
    ST_CLOSED = 2,       /* peer closed; detail = bytes of the message received so far */
    ST_OSERR = 3,        /* detail = errno */
    ST_BAD_REPLY = 4,    /* the reply of cycle `completed` carries the wrong ids */
    ST_INTERRUPTED = 5,  /* a Python exception (KeyboardInterrupt) is set */
    ST_UCS = 6,          /* detail = ucs_status_t */
    ST_SHORT = 7,        /* UCX: a message of another length; detail = its length */
    ST_BAD_SEQ = 8,      /* server: the request of cycle `completed` carries another seq */
};

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---------------------------------------------------------------- waiting */

typedef struct {
    PyThreadState *save;
    int64_t timeout_ns;
    int yield_every;      /* sched_yield every N empty polls (a peer may share this CPU); 0 = never */
    int64_t *progress;    /* completed calls, read by the TCP watchdog; may be NULL */
    PyObject *alive;      /* a callable asked every ~1 ms while waiting: False = the peer is gone (UCX) */
} loopctx;

/* Take the GIL back for a moment and run Python's signal handlers. -1: an exception is set. */
static int check_signals(loopctx *c) {
    int r;
    PyEval_RestoreThread(c->save);
    r = PyErr_CheckSignals();
    c->save = PyEval_SaveThread();
    return r;
}

/* While waiting: is the peer still there? (UCX tag receives are the worker's, so an
 * endpoint's failure does not end them; ucxx's endpoint knows, and says so in `alive`.) */
static int peer_gone(loopctx *c) {
    int gone = 0;
    if (!c->alive)
        return 0;
    PyEval_RestoreThread(c->save);
    PyObject *r = PyObject_CallNoArgs(c->alive);
    if (r == NULL)
        PyErr_Clear();
    else {
        gone = !PyObject_IsTrue(r);
        Py_DECREF(r);
    }
    c->save = PyEval_SaveThread();
    return gone;
}

/* Called on every empty poll: yields, checks the deadline and signals every 256 spins.
 * Returns 0 to keep waiting, ST_TIMEOUT or ST_INTERRUPTED. */
static inline int spin_tick(loopctx *c, uint64_t *spins, int64_t *deadline, int64_t *next_sig) {
    uint64_t s = ++*spins;
    if (c->yield_every && s % (uint64_t)c->yield_every == 0)
        sched_yield();
    if ((s & 0xFF) == 0) {
        int64_t t = now_ns();
        if (*deadline == 0) {
            *deadline = t + c->timeout_ns;
            *next_sig = t + 1000000;
        } else if (t > *deadline) {
            return ST_TIMEOUT;
        }
        if (t > *next_sig) {
            *next_sig = t + 1000000;
            if (check_signals(c) < 0)
                return ST_INTERRUPTED;
            if (peer_gone(c))
                return ST_CLOSED;
        }
    }
    return 0;
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

static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int j = 0; j < 8; j++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc32_buf(const uint8_t *p, size_t n) { /* zlib.crc32 */
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static int sleep_ns(loopctx *c, int64_t ns) { /* think time between cycles, not synchronisation */
    struct timespec ts = {ns / 1000000000LL, ns % 1000000000LL};
    while (nanosleep(&ts, &ts) != 0) {
        if (errno != EINTR)
            return 0;
        if (check_signals(c) < 0)
            return ST_INTERRUPTED;
    }
    return 0;
}

/* ---------------------------------------------------------------- TCP */

typedef struct {
    int fd;
    int busy;  /* non-blocking socket, spun; otherwise blocking (the watchdog bounds it) */
} tcpep;

/* After a send/recv that moved nothing: -1 to try again, else the status to return. */
static int tcp_again(loopctx *c, tcpep *e, uint64_t *spins, int64_t *deadline, int64_t *next_sig, int64_t *detail) {
    if (errno == EINTR)
        return check_signals(c) < 0 ? ST_INTERRUPTED : -1;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!e->busy) /* a blocking socket only says EAGAIN once the watchdog shut it down */
            return ST_TIMEOUT;
        int t = spin_tick(c, spins, deadline, next_sig);
        return t ? t : -1;
    }
    *detail = errno;
    return ST_OSERR;
}

static int tcp_send(loopctx *c, tcpep *e, const uint8_t *p, size_t n, int64_t *detail) {
    size_t sent = 0;
    uint64_t spins = 0;
    int64_t deadline = 0, next_sig = 0;
    while (sent < n) {
        ssize_t r = send(e->fd, p + sent, n - sent, MSG_NOSIGNAL);
        if (r >= 0) {
            sent += (size_t)r;
            continue;
        }
        int t = tcp_again(c, e, &spins, &deadline, &next_sig, detail);
        if (t >= 0)
            return t;
    }
    if (c->progress)
        ++*c->progress;
    return ST_OK;
}

static int tcp_recv(loopctx *c, tcpep *e, uint8_t *p, size_t n, int64_t *detail) {
    size_t got = 0;
    uint64_t spins = 0;
    int64_t deadline = 0, next_sig = 0;
    while (got < n) {
        ssize_t r = recv(e->fd, p + got, n - got, e->busy ? 0 : MSG_WAITALL);
        if (r > 0) {
            got += (size_t)r;
            if (c->progress && got < n)
                ++*c->progress; /* a slow but moving message is not stuck */
            continue;
        }
        if (r == 0) {
            *detail = (int64_t)got;
            return ST_CLOSED;
        }
        int t = tcp_again(c, e, &spins, &deadline, &next_sig, detail);
        if (t >= 0)
            return t;
    }
    if (c->progress)
        ++*c->progress;
    return ST_OK;
}

/* ---------------------------------------------------------------- UCX (resolved at run time) */

typedef int ucs_status_t;
typedef uint64_t ucp_tag_t;
typedef struct {
    ucp_tag_t sender_tag;
    size_t length;
} ucp_tag_recv_info_t;
/* The prefix of UCX's ucp_request_param_t (ucp/api/ucp.h) up to recv_info; memh and any
 * later fields are not used (UCX reads a field only when its op_attr_mask bit is set). */
typedef struct {
    uint32_t op_attr_mask;
    uint32_t flags;
    void *request;
    void *cb;
    uint64_t datatype;
    void *user_data;
    void *reply_buffer;
    int memory_type;
    union {
        size_t *length;
        ucp_tag_recv_info_t *tag_info;
    } recv_info;
    void *memh;
} hb_request_param_t;
#define HB_OP_ATTR_FIELD_MEMORY_TYPE (1u << 6)
#define HB_OP_ATTR_FIELD_RECV_INFO (1u << 7)
#define HB_MEMORY_TYPE_HOST 0 /* host memory: UCX need not detect the memory type per call */
#define UCS_INPROGRESS 1
#define UCS_ERR_LAST (-100)
#define UCS_PTR_IS_ERR(p) (((uintptr_t)(p)) >= ((uintptr_t)UCS_ERR_LAST))

static struct {
    int bound;
    void *(*tag_send_nbx)(void *ep, const void *buf, size_t count, ucp_tag_t tag, const hb_request_param_t *p);
    void *(*tag_recv_nbx)(void *worker, void *buf, size_t count, ucp_tag_t tag, ucp_tag_t mask,
                          const hb_request_param_t *p);
    unsigned (*worker_progress)(void *worker);
    ucs_status_t (*request_check_status)(void *req);
    ucs_status_t (*tag_recv_request_test)(void *req, ucp_tag_recv_info_t *info);
    void (*request_cancel)(void *worker, void *req);
    void (*request_free)(void *req);
    const char *(*status_string)(ucs_status_t st);
} ucp;

typedef struct {
    void *worker;
    void *ep;
    ucp_tag_t send_tag, recv_tag;
} ucxep;

static int ucx_wait(loopctx *c, ucxep *e, void *req, ucs_status_t *st) {
    uint64_t spins = 0;
    int64_t deadline = 0, next_sig = 0;
    while ((*st = ucp.request_check_status(req)) == UCS_INPROGRESS) {
        if (ucp.worker_progress(e->worker))
            continue;
        int t = spin_tick(c, &spins, &deadline, &next_sig);
        if (t) {
            ucp.request_cancel(e->worker, req);
            while (ucp.request_check_status(req) == UCS_INPROGRESS)
                ucp.worker_progress(e->worker);
            ucp.request_free(req);
            return t;
        }
    }
    return ST_OK;
}

static int ucx_send(loopctx *c, ucxep *e, const uint8_t *p, size_t n, int64_t *detail) {
    hb_request_param_t prm;
    ucs_status_t st = 0;
    memset(&prm, 0, sizeof prm);
    prm.op_attr_mask = HB_OP_ATTR_FIELD_MEMORY_TYPE;
    prm.memory_type = HB_MEMORY_TYPE_HOST;
    void *req = ucp.tag_send_nbx(e->ep, p, n, e->send_tag, &prm);
    if (req == NULL)
        return ST_OK;
    if (UCS_PTR_IS_ERR(req)) {
        *detail = (int64_t)(intptr_t)req;
        return ST_UCS;
    }
    int t = ucx_wait(c, e, req, &st);
    if (t)
        return t;
    ucp.request_free(req);
    if (st != 0) {
        *detail = st;
        return ST_UCS;
    }
    return ST_OK;
}

static int ucx_recv(loopctx *c, ucxep *e, uint8_t *p, size_t n, int64_t *detail) {
    hb_request_param_t prm;
    ucp_tag_recv_info_t info = {0, 0};
    ucs_status_t st = 0;
    memset(&prm, 0, sizeof prm);
    prm.op_attr_mask = HB_OP_ATTR_FIELD_RECV_INFO | HB_OP_ATTR_FIELD_MEMORY_TYPE;
    prm.memory_type = HB_MEMORY_TYPE_HOST;
    prm.recv_info.tag_info = &info;
    void *req = ucp.tag_recv_nbx(e->worker, p, n, e->recv_tag, ~(ucp_tag_t)0, &prm);
    if (UCS_PTR_IS_ERR(req)) {
        *detail = (int64_t)(intptr_t)req;
        return ST_UCS;
    }
    if (req != NULL) {
        int t = ucx_wait(c, e, req, &st);
        if (t)
            return t;
        if (st == 0)
            ucp.tag_recv_request_test(req, &info);
        ucp.request_free(req);
        if (st != 0) {
            *detail = st;
            return ST_UCS;
        }
    }
    if (info.length != n) {
        *detail = (int64_t)info.length;
        return ST_SHORT;
    }
    return ST_OK;
}

/* ---------------------------------------------------------------- the loops */

typedef int (*send_fn)(loopctx *, void *, const uint8_t *, size_t, int64_t *);
typedef int (*recv_fn)(loopctx *, void *, uint8_t *, size_t, int64_t *);

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
 * back with the count, so the caller can attach completed_cycles to it as the Python loop
 * does; phase names the failing call (0 = receive, 1 = send). */
static PyObject *result(Py_ssize_t done, int st, int phase, int64_t detail) {
    PyObject *exc = Py_None;
    if (st == ST_INTERRUPTED) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        if (tb && value)
            PyException_SetTraceback(value, tb);
        Py_XDECREF(type);
        Py_XDECREF(tb);
        exc = value ? value : Py_None;
        if (!value)
            Py_INCREF(Py_None);
        return Py_BuildValue("(niiLN)", done, st, phase, (long long)detail, exc);
    }
    return Py_BuildValue("(niiLO)", done, st, phase, (long long)detail, exc);
}

static PyObject *client_loop(send_fn snd, recv_fn rcv, void *ep, loopctx *c, bufs *b, int k, int idb,
                             Py_ssize_t n, int64_t gap_ns) {
    uint8_t *req = b->req.buf, *rep = b->rep.buf;
    int64_t *samples = b->samples.buf;
    size_t nreq = (size_t)b->req.len, nrep = (size_t)b->rep.len;
    Py_ssize_t i = 0;
    int st = ST_OK, phase = 0; /* phase: the failing call, 0 = receive, 1 = send */
    int64_t detail = 0;
    if (b->req.len < 8 || b->rep.len < (Py_ssize_t)k * idb || b->samples.len / 8 < n) {
        PyErr_SetString(PyExc_ValueError, "buffers too small for the seq, the ids or the samples");
        return NULL;
    }
    c->save = PyEval_SaveThread();
    for (; i < n; i++) {
        put_seq(req, (uint64_t)i);
        int64_t t0 = now_ns();
        st = snd(c, ep, req, nreq, &detail);
        if (st) {
            phase = 1;
            break;
        }
        st = rcv(c, ep, rep, nrep, &detail);
        int64_t t1 = now_ns();
        if (st) break;
        if (!ids_ok(rep, (uint64_t)i, k, idb)) {
            st = ST_BAD_REPLY;
            break;
        }
        samples[i] = t1 - t0;
        if (gap_ns > 0 && (st = sleep_ns(c, gap_ns)) != 0) {
            i++; /* the cycle completed: its sample stands */
            break;
        }
    }
    PyEval_RestoreThread(c->save);
    return result(i, st, phase, detail);
}

static PyObject *echo_loop(send_fn snd, recv_fn rcv, void *ep, loopctx *c, bufs *b, int k, int idb,
                           Py_ssize_t total, long long crc) {
    uint8_t *req = b->req.buf, *rep = b->rep.buf;
    size_t nreq = (size_t)b->req.len, nrep = (size_t)b->rep.len;
    Py_ssize_t seq = 0;
    int st = ST_OK, phase = 0; /* phase: the failing call, 0 = receive, 1 = send */
    int64_t detail = 0;
    if (b->req.len < 8 || b->rep.len < (Py_ssize_t)k * idb) {
        PyErr_SetString(PyExc_ValueError, "buffers too small for the seq or the ids");
        return NULL;
    }
    c->save = PyEval_SaveThread();
    pack_ids(rep, 0, k, idb, 0); /* the reply for the expected seq is packed before the request arrives */
    for (; seq < total; seq++) {
        st = rcv(c, ep, req, nreq, &detail);
        if (st) break;
        if (get_seq(req) != (uint64_t)seq) {
            st = ST_BAD_SEQ;
            break;
        }
        if (crc >= 0 && crc32_buf(req + 8, nreq - 8) != (uint32_t)crc)
            pack_ids(rep, (uint64_t)seq, k, idb, 1);
        st = snd(c, ep, rep, nrep, &detail);
        if (st) {
            phase = 1;
            break;
        }
        pack_ids(rep, (uint64_t)seq + 1, k, idb, 0);
    }
    PyEval_RestoreThread(c->save);
    return result(seq, st, phase, detail);
}

/* ---------------------------------------------------------------- Python entry points */

static PyObject *py_tcp_client(PyObject *Py_UNUSED(self), PyObject *args) {
    int fd, busy, k, idb, yield_every;
    long long timeout_ns, gap_ns;
    Py_ssize_t n;
    PyObject *req, *rep, *samples, *progress;
    bufs b;
    if (!PyArg_ParseTuple(args, "iiLiOOiiOnLO", &fd, &busy, &timeout_ns, &yield_every, &req, &rep, &k, &idb, &samples,
                          &n, &gap_ns, &progress))
        return NULL;
    if (get_bufs(&b, req, rep, samples, progress) < 0) return NULL;
    tcpep e = {fd, busy};
    loopctx c = {NULL, timeout_ns, yield_every, b.have_progress ? (int64_t *)b.progress.buf : NULL, NULL};
    PyObject *r = client_loop((send_fn)tcp_send, (recv_fn)tcp_recv, &e, &c, &b, k, idb, n, gap_ns);
    release(&b);
    return r;
}

static PyObject *py_tcp_echo(PyObject *Py_UNUSED(self), PyObject *args) {
    int fd, busy, k, idb, yield_every;
    long long timeout_ns, crc;
    Py_ssize_t total;
    PyObject *req, *rep, *progress;
    bufs b;
    if (!PyArg_ParseTuple(args, "iiLiOOiinLO", &fd, &busy, &timeout_ns, &yield_every, &req, &rep, &k, &idb, &total,
                          &crc, &progress))
        return NULL;
    if (get_bufs(&b, req, rep, Py_None, progress) < 0) return NULL;
    tcpep e = {fd, busy};
    loopctx c = {NULL, timeout_ns, yield_every, b.have_progress ? (int64_t *)b.progress.buf : NULL, NULL};
    PyObject *r = echo_loop((send_fn)tcp_send, (recv_fn)tcp_recv, &e, &c, &b, k, idb, total, crc);
    release(&b);
    return r;
}

static int need_ucp(void) {
    if (!ucp.bound) {
        PyErr_SetString(PyExc_RuntimeError, "ucp functions not bound (call ucx_bind first)");
        return -1;
    }
    return 0;
}

static PyObject *py_ucx_client(PyObject *Py_UNUSED(self), PyObject *args) {
    unsigned long long worker, ep, stag, rtag;
    long long timeout_ns, gap_ns;
    int k, idb, yield_every;
    Py_ssize_t n;
    PyObject *req, *rep, *samples, *alive;
    bufs b;
    if (!PyArg_ParseTuple(args, "KKKKLOiOOiiOnL", &worker, &ep, &stag, &rtag, &timeout_ns, &alive, &yield_every, &req,
                          &rep, &k, &idb, &samples, &n, &gap_ns))
        return NULL;
    if (need_ucp() < 0 || get_bufs(&b, req, rep, samples, Py_None) < 0) return NULL;
    ucxep e = {(void *)(uintptr_t)worker, (void *)(uintptr_t)ep, stag, rtag};
    loopctx c = {NULL, timeout_ns, yield_every, NULL, alive == Py_None ? NULL : alive};
    PyObject *r = client_loop((send_fn)ucx_send, (recv_fn)ucx_recv, &e, &c, &b, k, idb, n, gap_ns);
    release(&b);
    return r;
}

static PyObject *py_ucx_echo(PyObject *Py_UNUSED(self), PyObject *args) {
    unsigned long long worker, ep, stag, rtag;
    long long timeout_ns, crc;
    int k, idb, yield_every;
    Py_ssize_t total;
    PyObject *req, *rep, *alive;
    bufs b;
    if (!PyArg_ParseTuple(args, "KKKKLOiOOiinL", &worker, &ep, &stag, &rtag, &timeout_ns, &alive, &yield_every, &req,
                          &rep, &k, &idb, &total, &crc))
        return NULL;
    if (need_ucp() < 0 || get_bufs(&b, req, rep, Py_None, Py_None) < 0) return NULL;
    ucxep e = {(void *)(uintptr_t)worker, (void *)(uintptr_t)ep, stag, rtag};
    loopctx c = {NULL, timeout_ns, yield_every, NULL, alive == Py_None ? NULL : alive};
    PyObject *r = echo_loop((send_fn)ucx_send, (recv_fn)ucx_recv, &e, &c, &b, k, idb, total, crc);
    release(&b);
    return r;
}

static PyObject *py_ucx_bind(PyObject *Py_UNUSED(self), PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path))
        return NULL;
    /* the library ucxx loaded: RTLD_NOLOAD finds it, never a second copy */
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (!h) {
        PyErr_Format(PyExc_OSError, "libucp is not loaded from %s: %s", path, dlerror());
        return NULL;
    }
#define SYM(field, name)                                                                          \
    do {                                                                                          \
        *(void **)(&ucp.field) = dlsym(h, name);                                                  \
        if (!ucp.field) {                                                                         \
            PyErr_Format(PyExc_OSError, "%s not found in %s", name, path);                        \
            return NULL;                                                                          \
        }                                                                                         \
    } while (0)
    SYM(tag_send_nbx, "ucp_tag_send_nbx");
    SYM(tag_recv_nbx, "ucp_tag_recv_nbx");
    SYM(worker_progress, "ucp_worker_progress");
    SYM(request_check_status, "ucp_request_check_status");
    SYM(tag_recv_request_test, "ucp_tag_recv_request_test");
    SYM(request_cancel, "ucp_request_cancel");
    SYM(request_free, "ucp_request_free");
    *(void **)(&ucp.status_string) = dlsym(h, "ucs_status_string"); /* from libucs; dlsym follows libucp's deps */
    ucp.bound = 1;
    Py_RETURN_NONE;
#undef SYM
}

static PyObject *py_ucs_status_string(PyObject *Py_UNUSED(self), PyObject *args) {
    int st;
    if (!PyArg_ParseTuple(args, "i", &st))
        return NULL;
    if (!ucp.status_string)
        return PyUnicode_FromFormat("UCS status %d", st);
    return PyUnicode_FromString(ucp.status_string(st));
}

static PyObject *py_layout(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(noargs)) {
    /* offsets of the declared ucp_request_param_t prefix, for the test against ucp.h */
    return Py_BuildValue("{s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n}", "op_attr_mask",
                         (Py_ssize_t)offsetof(hb_request_param_t, op_attr_mask), "flags",
                         (Py_ssize_t)offsetof(hb_request_param_t, flags), "request",
                         (Py_ssize_t)offsetof(hb_request_param_t, request), "cb",
                         (Py_ssize_t)offsetof(hb_request_param_t, cb), "datatype",
                         (Py_ssize_t)offsetof(hb_request_param_t, datatype), "user_data",
                         (Py_ssize_t)offsetof(hb_request_param_t, user_data), "reply_buffer",
                         (Py_ssize_t)offsetof(hb_request_param_t, reply_buffer), "memory_type",
                         (Py_ssize_t)offsetof(hb_request_param_t, memory_type), "recv_info",
                         (Py_ssize_t)offsetof(hb_request_param_t, recv_info));
}

static PyMethodDef methods[] = {
    {"tcp_client", py_tcp_client, METH_VARARGS, "The timed loop over a TCP socket."},
    {"tcp_echo", py_tcp_echo, METH_VARARGS, "The echo loop over a TCP socket."},
    {"ucx_client", py_ucx_client, METH_VARARGS, "The timed loop over a UCX endpoint (tag API)."},
    {"ucx_echo", py_ucx_echo, METH_VARARGS, "The echo loop over a UCX endpoint (tag API)."},
    {"ucx_bind", py_ucx_bind, METH_VARARGS, "Resolve the ucp functions from the loaded libucp at PATH."},
    {"ucs_status_string", py_ucs_status_string, METH_VARARGS, "UCX's text for a status code."},
    {"layout", py_layout, METH_NOARGS, "Offsets of the declared ucp_request_param_t prefix."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "hopbench._native",
    .m_doc = "hopbench's compiled timed loop (hopbench/core/native.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    crc_init();
    PyModule_AddIntConstant(m, "ST_OK", ST_OK);
    PyModule_AddIntConstant(m, "ST_TIMEOUT", ST_TIMEOUT);
    PyModule_AddIntConstant(m, "ST_CLOSED", ST_CLOSED);
    PyModule_AddIntConstant(m, "ST_OSERR", ST_OSERR);
    PyModule_AddIntConstant(m, "ST_BAD_REPLY", ST_BAD_REPLY);
    PyModule_AddIntConstant(m, "ST_INTERRUPTED", ST_INTERRUPTED);
    PyModule_AddIntConstant(m, "ST_UCS", ST_UCS);
    PyModule_AddIntConstant(m, "ST_SHORT", ST_SHORT);
    PyModule_AddIntConstant(m, "ST_BAD_SEQ", ST_BAD_SEQ);
    PyModule_AddIntConstant(m, "ABI", 1);
    return m;
}
