/* hopbench.transports._tcp: the TCP transport's bytes in C, for the core's compiled loops.
 *
 * endpoint(fd, busy) -> a capsule holding an hb_endpoint (hopbench/core/hb_endpoint.h)
 * whose send and recv move one whole message over the socket: MSG_NOSIGNAL sends, and
 * receives with MSG_WAITALL on a blocking socket (the channel's watchdog bounds a blocked
 * call: it shuts the socket down when the progress counter stops) or spinning on a
 * non-blocking one (busy poll). The socket stays the channel's: the capsule never closes it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <sys/socket.h>

#include "hb_endpoint.h"

typedef struct {
    int fd;
    int busy; /* non-blocking socket, spun; otherwise blocking (the watchdog bounds it) */
} tcp_ep;

/* After a send/recv that moved nothing: -1 to try again, else the status to return. */
static int again(hb_ctx *c, tcp_ep *e, hb_wait *w, int64_t *detail) {
    if (errno == EINTR)
        return c->signals(c) ? HB_INTERRUPTED : -1;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!e->busy) /* a blocking socket only says EAGAIN once the watchdog shut it down */
            return HB_TIMEOUT;
        int t = c->tick(c, w);
        return t ? t : -1;
    }
    *detail = errno;
    return HB_OSERROR;
}

static int tcp_send(hb_ctx *c, void *self, const uint8_t *p, size_t n, int64_t *detail) {
    tcp_ep *e = self;
    hb_wait w = {0, 0, 0};
    size_t sent = 0;
    while (sent < n) {
        ssize_t r = send(e->fd, p + sent, n - sent, MSG_NOSIGNAL);
        if (r >= 0) {
            sent += (size_t)r;
            w.deadline = 0; /* progress: the timeout counts from the last byte that moved */
            continue;
        }
        int t = again(c, e, &w, detail);
        if (t >= 0)
            return t;
    }
    return HB_OK;
}

static int tcp_recv(hb_ctx *c, void *self, uint8_t *p, size_t n, int64_t *detail) {
    tcp_ep *e = self;
    hb_wait w = {0, 0, 0};
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(e->fd, p + got, n - got, e->busy ? 0 : MSG_WAITALL);
        if (r > 0) {
            got += (size_t)r;
            w.deadline = 0; /* a slow but moving message is not stuck */
            if (got < n)
                hb_moved(c);
            continue;
        }
        if (r == 0) {
            *detail = (int64_t)got;
            return HB_CLOSED;
        }
        int t = again(c, e, &w, detail);
        if (t >= 0)
            return t;
    }
    return HB_OK;
}

static PyObject *py_endpoint(PyObject *Py_UNUSED(self), PyObject *args) {
    int fd, busy;
    if (!PyArg_ParseTuple(args, "ii", &fd, &busy))
        return NULL;
    tcp_ep *e = malloc(sizeof *e);
    if (e)
        *e = (tcp_ep){fd, busy};
    return hb_capsule(tcp_send, tcp_recv, e);
}

static PyMethodDef methods[] = {
    {"endpoint", py_endpoint, METH_VARARGS, "endpoint(fd, busy): the socket as an hb_endpoint capsule."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "hopbench.transports._tcp",
    .m_doc = "The TCP transport's send and recv in C (hopbench/core/hb_endpoint.h).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__tcp(void) {
    PyObject *m = PyModule_Create(&module);
    if (m)
        PyModule_AddIntConstant(m, "ABI", HB_ENDPOINT_ABI);
    return m;
}
