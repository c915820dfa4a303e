/* hopbench.transports._ucx: the UCX transport's bytes in C, for the core's compiled loops.
 *
 * endpoint(worker, ep, send_tag, recv_tag) -> a capsule holding an hb_endpoint
 * (hopbench/core/hb_endpoint.h) whose send and recv post the same tag operations the
 * Python channel posts (ucp_tag_send_nbx / ucp_tag_recv_nbx on the worker and endpoint
 * ucxx created) and busy-poll ucp_worker_progress until they complete. The worker and
 * endpoint stay ucxx's: the capsule never releases them.
 *
 * No UCX header or library is needed to build this. The ucp functions are resolved at run
 * time (bind(path), dlsym) from the libucp that ucxx already loaded (the wheel's), and the
 * one struct used, ucp_request_param_t, is declared below as the prefix of UCX's own (its
 * ABI is append-only, selected by op_attr_mask; tests/test_native.py compares the offsets
 * with the installed ucp.h when a compiler and the header are there).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <string.h>

#include "hb_endpoint.h"

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
} ucx_ep;

/* Progress the worker until the request completes; cancel it when the core says stop. */
static int wait_req(hb_ctx *c, ucx_ep *e, void *req, ucs_status_t *st) {
    hb_wait w = {0, 0, 0};
    while ((*st = ucp.request_check_status(req)) == UCS_INPROGRESS) {
        if (ucp.worker_progress(e->worker))
            continue;
        int t = c->tick(c, &w);
        if (t) {
            ucp.request_cancel(e->worker, req);
            while (ucp.request_check_status(req) == UCS_INPROGRESS)
                ucp.worker_progress(e->worker);
            ucp.request_free(req);
            return t;
        }
    }
    return HB_OK;
}

static int ucx_send(hb_ctx *c, void *self, const uint8_t *p, size_t n, int64_t *detail) {
    ucx_ep *e = self;
    hb_request_param_t prm;
    ucs_status_t st = 0;
    memset(&prm, 0, sizeof prm);
    prm.op_attr_mask = HB_OP_ATTR_FIELD_MEMORY_TYPE;
    prm.memory_type = HB_MEMORY_TYPE_HOST;
    void *req = ucp.tag_send_nbx(e->ep, p, n, e->send_tag, &prm);
    if (req == NULL)
        return HB_OK;
    if (UCS_PTR_IS_ERR(req)) {
        *detail = (int64_t)(intptr_t)req;
        return HB_LIBRARY;
    }
    int t = wait_req(c, e, req, &st);
    if (t)
        return t;
    ucp.request_free(req);
    if (st != 0) {
        *detail = st;
        return HB_LIBRARY;
    }
    return HB_OK;
}

static int ucx_recv(hb_ctx *c, void *self, uint8_t *p, size_t n, int64_t *detail) {
    ucx_ep *e = self;
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
        return HB_LIBRARY;
    }
    if (req != NULL) {
        int t = wait_req(c, e, req, &st);
        if (t)
            return t;
        if (st == 0)
            ucp.tag_recv_request_test(req, &info);
        ucp.request_free(req);
        if (st != 0) {
            *detail = st;
            return HB_LIBRARY;
        }
    }
    if (info.length != n) {
        *detail = (int64_t)info.length;
        return HB_LENGTH;
    }
    return HB_OK;
}

static PyObject *py_endpoint(PyObject *Py_UNUSED(self), PyObject *args) {
    unsigned long long worker, uep, stag, rtag;
    if (!PyArg_ParseTuple(args, "KKKK", &worker, &uep, &stag, &rtag))
        return NULL;
    if (!ucp.bound) {
        PyErr_SetString(PyExc_RuntimeError, "ucp functions not bound (call bind first)");
        return NULL;
    }
    ucx_ep *e = malloc(sizeof *e);
    if (e)
        *e = (ucx_ep){(void *)(uintptr_t)worker, (void *)(uintptr_t)uep, stag, rtag};
    return hb_capsule(ucx_send, ucx_recv, e);
}

static PyObject *py_bind(PyObject *Py_UNUSED(self), PyObject *args) {
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

static PyObject *py_status_string(PyObject *Py_UNUSED(self), PyObject *args) {
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
    {"endpoint", py_endpoint, METH_VARARGS,
     "endpoint(worker, ep, send_tag, recv_tag): a ucxx endpoint as an hb_endpoint capsule."},
    {"bind", py_bind, METH_VARARGS, "Resolve the ucp functions from the loaded libucp at PATH."},
    {"status_string", py_status_string, METH_VARARGS, "UCX's text for a status code."},
    {"layout", py_layout, METH_NOARGS, "Offsets of the declared ucp_request_param_t prefix."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "hopbench.transports._ucx",
    .m_doc = "The UCX transport's send and recv in C (hopbench/core/hb_endpoint.h).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__ucx(void) {
    PyObject *m = PyModule_Create(&module);
    if (m)
        PyModule_AddIntConstant(m, "ABI", HB_ENDPOINT_ABI);
    return m;
}
