/* The lossy codecs' per-value loops (hopbench.core.codecs fp8 and int8), compiled: the
 * same float32 arithmetic as the NumPy path, value by value in one pass instead of a dozen
 * array passes. fp8's rounding stays ml_dtypes' own: the caller passes the 65,536-entry
 * table ml_dtypes built (BF16-truncated float32 -> e4m3 code) and the 256-entry decode
 * table. No I/O here: buffers in, buffers out. Tests check both paths byte for byte. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define BLOCK 512
#define RNE_MAGIC 12582912.0f /* 1.5 x 2^23: adding and subtracting it rounds a float to an integer, half to even */

static inline float f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static int check(Py_buffer *b, Py_ssize_t need, const char *what) {
    if (b->len < need) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, need %zd", what, b->len, need);
        return -1;
    }
    return 0;
}

/* encode(bf16 bits, width, qmax, table or None, scales out, codes out) */
static PyObject *py_encode(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer in, sc, co, tb = {0};
    Py_ssize_t width;
    double qmax;
    PyObject *table;
    if (!PyArg_ParseTuple(args, "y*ndOw*w*", &in, &width, &qmax, &table, &sc, &co))
        return NULL;
    PyObject *ret = NULL;
    Py_ssize_t n = in.len / 2, groups = width > 0 ? (n + width - 1) / width : 0;
    if (table != Py_None && PyObject_GetBuffer(table, &tb, PyBUF_SIMPLE) < 0)
        goto out;
    if (width < 1 || check(&sc, groups * 4, "scales") || check(&co, n, "codes") ||
        (table != Py_None && check(&tb, 65536, "table")))
        goto out;
    const uint16_t *x = in.buf;
    float *scales = sc.buf;
    uint8_t *codes = co.buf;
    const uint8_t *t = table != Py_None ? tb.buf : NULL;
    float q = (float)qmax;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t g = 0; g < groups; g++) {
        Py_ssize_t lo = g * width, hi = lo + width < n ? lo + width : n;
        uint16_t m = 0;
        for (Py_ssize_t i = lo; i < hi; i++) {
            uint16_t a = x[i] & 0x7FFF;
            m = a > m ? a : m;
        }
        float amax = f32((uint32_t)m << 16);
        float s = amax > 0 ? amax / q : 1.0f;
        float inv = 1.0f / s;
        scales[g] = s;
        for (Py_ssize_t b = lo; b < hi; b += BLOCK) {  /* keys in a block (vectorised), then the lookups */
            Py_ssize_t e = b + BLOCK < hi ? b + BLOCK : hi;
            uint32_t key[BLOCK];
            for (Py_ssize_t i = b; i < e; i++) {
                float y = f32((uint32_t)x[i] << 16) * inv;
                if (t) {
                    uint32_t u = bits(y);
                    key[i - b] = (u >> 16) | ((u & 0xFFFF) != 0);
                } else {  /* round half to even, as numpy's rint: |y| <= 127.x, far below 2^22 */
                    key[i - b] = (uint32_t)(int32_t)((y + RNE_MAGIC) - RNE_MAGIC);
                }
            }
            if (t)
                for (Py_ssize_t i = b; i < e; i++)
                    codes[i] = t[key[i - b]];
            else
                for (Py_ssize_t i = b; i < e; i++)
                    codes[i] = (uint8_t)key[i - b];
        }
    }
    Py_END_ALLOW_THREADS
    ret = Py_NewRef(Py_None);
out:
    if (tb.obj)
        PyBuffer_Release(&tb);
    PyBuffer_Release(&in);
    PyBuffer_Release(&sc);
    PyBuffer_Release(&co);
    return ret;
}

/* decode(codes, scales, width, lut or None, bf16 bits out) */
static PyObject *py_decode(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer co, sc, out, lb = {0};
    Py_ssize_t width;
    PyObject *lut;
    if (!PyArg_ParseTuple(args, "y*y*nOw*", &co, &sc, &width, &lut, &out))
        return NULL;
    PyObject *ret = NULL;
    Py_ssize_t n = co.len, groups = width > 0 ? (n + width - 1) / width : 0;
    if (lut != Py_None && PyObject_GetBuffer(lut, &lb, PyBUF_SIMPLE) < 0)
        goto out;
    if (width < 1 || check(&sc, groups * 4, "scales") || check(&out, n * 2, "out") ||
        (lut != Py_None && check(&lb, 256 * 4, "lut")))
        goto out;
    const uint8_t *c = co.buf;
    const float *scales = sc.buf;
    const float *l = lut != Py_None ? lb.buf : NULL;
    uint16_t *y = out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t g = 0; g < groups; g++) {
        Py_ssize_t lo = g * width, hi = lo + width < n ? lo + width : n;
        float s = scales[g];
        for (Py_ssize_t b = lo; b < hi; b += BLOCK) {  /* the lookups, then scale and round (vectorised) */
            Py_ssize_t e = b + BLOCK < hi ? b + BLOCK : hi;
            float v[BLOCK];
            if (l)
                for (Py_ssize_t i = b; i < e; i++)
                    v[i - b] = l[c[i]];
            else
                for (Py_ssize_t i = b; i < e; i++)
                    v[i - b] = (float)(int8_t)c[i];
            for (Py_ssize_t i = b; i < e; i++) {
                uint32_t u = bits(v[i - b] * s);
                y[i] = (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
            }
        }
    }
    Py_END_ALLOW_THREADS
    ret = Py_NewRef(Py_None);
out:
    if (lb.obj)
        PyBuffer_Release(&lb);
    PyBuffer_Release(&co);
    PyBuffer_Release(&sc);
    PyBuffer_Release(&out);
    return ret;
}

static PyMethodDef methods[] = {
    {"encode", py_encode, METH_VARARGS, "Scale per group and quantise (fp8 with a table, int8 without)."},
    {"decode", py_decode, METH_VARARGS, "Dequantise, scale, round to BF16."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_codec", "The lossy codecs' compiled loops.", -1, methods};

PyMODINIT_FUNC PyInit__codec(void) { return PyModule_Create(&module); }
