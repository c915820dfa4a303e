/* hopbench's native endpoint ABI: what a transport hands the core's compiled loops.
 *
 * iperf3's `struct protocol`, in C: a transport's extension module (transports/_tcp.c,
 * transports/_ucx.c, transports/_nixl.c) owns its bytes: it implements send and recv for one connected
 * endpoint and hands the core an hb_endpoint inside a PyCapsule named HB_CAPSULE. The
 * core (hopbench/core/_native.c) keeps only the two loops, the clock, the ids, the CRC
 * and the progress counter; it never calls a socket or UCX function itself.
 *
 * A tx or rx moves the whole message or returns a status (enum hb_status) with a
 * detail (errno, bytes received, the library's status or the message's length). While it
 * waits, it calls c->tick after every empty poll (the core's deadline, signal and liveness
 * checks, and the yield when a peer may share this CPU) and stops on a non-zero answer;
 * on EINTR it calls c->signals. It counts a completed call with hb_moved(c).
 */
#ifndef HB_ENDPOINT_H
#define HB_ENDPOINT_H

#include <stddef.h>
#include <stdint.h>

#define HB_ENDPOINT_ABI 2
#define HB_CAPSULE "hopbench.endpoint"

/* One status, spelled once: the core exports these names (hopbench._native.STATUS) and
 * hopbench.core.native reads them into its Status enum. */
enum hb_status {
    HB_OK = 0,
    HB_TIMEOUT = 1,     /* no progress within the endpoint's timeout */
    HB_CLOSED = 2,      /* the peer closed; detail = bytes of the message received so far */
    HB_OSERROR = 3,     /* detail = errno */
    HB_BAD_REPLY = 4,   /* core: the reply of cycle `completed` carries the wrong ids */
    HB_INTERRUPTED = 5, /* a Python exception (KeyboardInterrupt) is set */
    HB_LIBRARY = 6,     /* the transport library's own error; detail = its status code */
    HB_LENGTH = 7,      /* a message of another length arrived; detail = its length */
    HB_BAD_SEQ = 8,     /* core, server: the request of cycle `completed` carries another seq */
};
#define HB_STATUS_NAMES \
    { "ok", "timeout", "closed", "oserror", "bad_reply", "interrupted", "library", "length", "bad_seq" }

/* Per wait: the core's bookkeeping between empty polls (zero it before the first). */
typedef struct hb_wait {
    uint64_t spins;
    int64_t deadline, next_check;
} hb_wait;

typedef struct hb_ctx hb_ctx;
struct hb_ctx {
    /* after an empty poll: 0 = keep waiting, else the status to return (HB_TIMEOUT,
     * HB_INTERRUPTED, HB_CLOSED when the peer is known gone) */
    int (*tick)(hb_ctx *c, hb_wait *w);
    /* after EINTR: 0 = carry on, HB_INTERRUPTED = a Python exception is set */
    int (*signals)(hb_ctx *c);
    /* completed calls, read by a transport's watchdog (tcp's blocking mode); may be NULL */
    int64_t *progress;
    void *core; /* the core's own state; endpoints never touch it */
};

static inline void hb_moved(hb_ctx *c) {
    if (c->progress)
        ++*c->progress;
}

/* tx moves one whole message out, rx one whole message of exactly n bytes in */
typedef int (*hb_tx_fn)(hb_ctx *c, void *self, const uint8_t *p, size_t n, int64_t *detail);
typedef int (*hb_rx_fn)(hb_ctx *c, void *self, uint8_t *p, size_t n, int64_t *detail);

typedef struct hb_endpoint {
    int abi; /* HB_ENDPOINT_ABI */
    hb_tx_fn tx;
    hb_rx_fn rx;
    void *self; /* the transport's state for this endpoint, freed by the capsule's destructor */
} hb_endpoint;

#ifdef Py_PYTHON_H
#include <stdlib.h>

static void hb_capsule_free(PyObject *capsule) {
    hb_endpoint *ep = PyCapsule_GetPointer(capsule, HB_CAPSULE);
    if (ep) {
        free(ep->self);
        free(ep);
    }
}

/* A transport's endpoint as the capsule the core takes; it owns `self` (malloc'd, freed with
 * the capsule). NULL with an exception set on failure (self freed). */
static inline PyObject *hb_capsule(hb_tx_fn tx, hb_rx_fn rx, void *self) {
    hb_endpoint *ep = self ? calloc(1, sizeof *ep) : NULL;
    if (!ep) {
        free(self);
        return PyErr_NoMemory();
    }
    *ep = (hb_endpoint){HB_ENDPOINT_ABI, tx, rx, self};
    PyObject *cap = PyCapsule_New(ep, HB_CAPSULE, hb_capsule_free);
    if (!cap) {
        free(self);
        free(ep);
    }
    return cap;
}
#endif

#endif
