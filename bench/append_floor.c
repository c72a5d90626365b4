/* What a compiled append's floor costs: one C call per 16 KiB batch that copies it into a
 * reused buffer, checks its CRC-32C (the crc32c package's own C function, passed in by
 * address), stamps the base offset and pwrites it. Built and run by bench_append_floor.py;
 * not part of kafkalog. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

typedef uint32_t (*crc_fn)(uint32_t, const unsigned char *, unsigned long);
static crc_fn crc = NULL;
static unsigned char *scratch = NULL;
static Py_ssize_t scratch_size = 0;

static PyObject *set_crc(PyObject *self, PyObject *arg) {
    crc = (crc_fn)PyLong_AsVoidPtr(arg);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void put_be64(unsigned char *p, uint64_t v) {
    for (int i = 7; i >= 0; i--) { p[i] = v & 0xff; v >>= 8; }
}

/* append(fd, batch, position, base_offset, copy) -> bytes written */
static PyObject *append(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || crc == NULL) {
        PyErr_SetString(PyExc_TypeError, "append(fd, batch, position, base_offset, copy)");
        return NULL;
    }
    int fd = (int)PyLong_AsLong(args[0]);
    long long position = PyLong_AsLongLong(args[2]);
    long long base = PyLong_AsLongLong(args[3]);
    int copy = PyObject_IsTrue(args[4]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(args[1], &b, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *p = b.buf;
    Py_ssize_t n = b.len;
    ssize_t written;
    if (n < 61) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "short batch");
        return NULL;
    }
    uint32_t want = be32(p + 17);
    if (copy) {
        if (scratch_size < n) {
            free(scratch);
            scratch = malloc(n);
            scratch_size = scratch ? n : 0;
            if (!scratch) { PyBuffer_Release(&b); return PyErr_NoMemory(); }
        }
        memcpy(scratch, p, n);
        if ((crc(0xffffffffu, scratch + 21, n - 21) ^ 0xffffffffu) != want) goto bad_crc;
        put_be64(scratch, (uint64_t)base);
        written = pwrite(fd, scratch, n, position);
    } else {
        if ((crc(0xffffffffu, p + 21, n - 21) ^ 0xffffffffu) != want) goto bad_crc;
        unsigned char head[8];
        put_be64(head, (uint64_t)base);
        struct iovec iov[2] = {{head, 8}, {(void *)(p + 8), n - 8}};
        written = pwritev(fd, iov, 2, position);
    }
    PyBuffer_Release(&b);
    if (written < 0) return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromSsize_t(written);
bad_crc:
    PyBuffer_Release(&b);
    PyErr_SetString(PyExc_ValueError, "CRC mismatch");
    return NULL;
}

static PyMethodDef methods[] = {
    {"set_crc", set_crc, METH_O, "the address of a crc32c(crc, data, length) C function"},
    {"append", (PyCFunction)(void (*)(void))append, METH_FASTCALL, "one batch, see above"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "append_floor", NULL, -1, methods};

PyMODINIT_FUNC PyInit_append_floor(void) { return PyModule_Create(&module); }
