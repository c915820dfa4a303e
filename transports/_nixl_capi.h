/* hopbench.transports._nixl: NIXL's C API (libnixl_capi.so, beside libnixl.so in the nixl-cu12
 * wheel) as it declares the few functions the nixl channel's compiled calls use, resolved at
 * run time (bind(path), dlsym) so no NIXL header or library is needed to build; and the two
 * module functions that reach an agent through it (agent_pointer, local_md). Included once, by
 * transports/_nixl.c: the extension is one translation unit. */
#ifndef HB_NIXL_CAPI_H
#define HB_NIXL_CAPI_H

#include <Python.h>

#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>

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


#endif
