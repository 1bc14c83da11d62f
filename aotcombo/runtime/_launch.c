/* The per-launch fast path of aotcombo's runtime (cuda.py): one C call per kernel launch.

   A CPython extension on the stable ABI only (abi3, CPython >= 3.10), so one build loads on
   every later Python. No CUDA header and no link to libcuda: Python hands over the address of
   cuLaunchKernelEx from its ctypes handle of the driver.

   launcher(driver_fn, function, grid, block, shared, stream, tail, pointer_of, on_error, keep, kinds, pdl)
   returns ``launch(*args)``, a builtin function bound to a Launcher holding the whole launch but
   the arguments. ``kinds`` (bytes, one per parameter) says how each argument is passed: b"p" a
   tensor, whose ``pointer_of(t)`` (torch.Tensor.data_ptr) is passed; b"i" a Python int, passed
   as its 64-bit two's complement (the driver reads the parameter's own width from it:
   little-endian); b"f" a float passed as fp32; b"d" as fp64. The ``tail`` pointers (Triton's
   scratch) follow. The parameter values live on the C stack of the call, so concurrent calls of
   one launcher never share them. A wrong argument count raises TypeError; a failed launch calls
   ``on_error(CUresult)``, which raises the driver's error (RuntimeError if it returns). ``keep``
   is held for the launcher's lifetime (buffers whose addresses the launch uses). ``pdl`` true:
   the launch carries CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (the kernel waits
   for the one before it itself: griddepcontrol.wait). */
#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_PARAMS 4096 /* 32 KiB of pointers: the most any driver takes */
#define MAX_TAIL 8

typedef struct { /* CUlaunchConfig, as cuda.h declares it */
    unsigned int grid[3], block[3], shared;
    void *stream, *attrs;
    unsigned int num_attrs;
} LaunchConfig;

typedef struct { /* CUlaunchAttribute, as cuda.h declares it: an id, padding, a 64-byte union */
    unsigned int id;
    char pad[4];
    uint64_t value[8];
} LaunchAttribute;

#define CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION 6

typedef int (*LaunchExFn)(const LaunchConfig *config, void *function, void **params, void **extra);

typedef struct {
    PyObject_HEAD
    void *driver_fn, *function;
    LaunchConfig config;
    LaunchAttribute pdl; /* config.attrs points here when the launch is programmatic */
    Py_ssize_t n, n_tail;
    uint64_t tail[MAX_TAIL];
    PyObject *pointer_of, *on_error, *keep, *kinds;
    const char *kind;
} Launcher;

static PyTypeObject *launcher_type;

static PyObject *launch(PyObject *self_, PyObject *const *args, Py_ssize_t nargs) {
    Launcher *self = (Launcher *)self_;
    if (nargs != self->n)
        return PyErr_Format(PyExc_TypeError, "kernel takes %zd arguments, got %zd", self->n, nargs);
    uint64_t values[self->n + self->n_tail + 1];
    void *params[self->n + self->n_tail + 1];
    for (Py_ssize_t i = 0; i < self->n; i++) {
        params[i] = &values[i];
        values[i] = 0;
        switch (self->kind[i]) {
        case 'i':
            values[i] = PyLong_AsUnsignedLongLongMask(args[i]);
            break;
        case 'f': {
            float value = (float)PyFloat_AsDouble(args[i]);
            memcpy(&values[i], &value, sizeof value);
            break;
        }
        case 'd': {
            double value = PyFloat_AsDouble(args[i]);
            memcpy(&values[i], &value, sizeof value);
            break;
        }
        default: {
            PyObject *pointer = PyObject_CallFunctionObjArgs(self->pointer_of, args[i], NULL);
            if (pointer == NULL)
                return NULL;
            values[i] = PyLong_AsUnsignedLongLong(pointer);
            Py_DECREF(pointer);
        }
        }
        if (PyErr_Occurred())
            return NULL;
    }
    for (Py_ssize_t i = 0; i < self->n_tail; i++) {
        values[self->n + i] = self->tail[i];
        params[self->n + i] = &values[self->n + i];
    }
    const LaunchConfig *c = &self->config;
    int result = ((LaunchExFn)self->driver_fn)(c, self->function, params, NULL);
    if (result == 0)
        Py_RETURN_NONE;
    PyObject *code = PyLong_FromLong(result);
    PyObject *raised = code ? PyObject_CallFunctionObjArgs(self->on_error, code, NULL) : NULL;
    Py_XDECREF(code);
    if (raised == NULL)
        return NULL;
    Py_DECREF(raised);
    return PyErr_Format(PyExc_RuntimeError, "cuLaunchKernelEx failed: CUresult %d", result);
}

static PyMethodDef launch_def = {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL,
                                 "launch(*args): the kernel on its stream, with these arguments."};

static PyObject *new_launcher(PyObject *module, PyObject *args) {
    (void)module;
    unsigned long long driver_fn, function, stream;
    unsigned int grid[3], block[3], shared;
    PyObject *tail, *pointer_of, *on_error, *keep, *kinds;
    int pdl;
    if (!PyArg_ParseTuple(args, "KK(III)(III)IKO!OOOO!p:launcher", &driver_fn, &function, &grid[0], &grid[1],
                          &grid[2], &block[0], &block[1], &block[2], &shared, &stream, &PyTuple_Type, &tail,
                          &pointer_of, &on_error, &keep, &PyBytes_Type, &kinds, &pdl))
        return NULL;
    Py_ssize_t n = PyBytes_Size(kinds), n_tail = PyTuple_Size(tail);
    const char *kind = PyBytes_AsString(kinds);
    for (Py_ssize_t i = 0; i < n; i++)
        if (strchr("pifd", kind[i]) == NULL || kind[i] == 0)
            return PyErr_Format(PyExc_ValueError, "launcher: unknown parameter kind %c", kind[i]);
    if (driver_fn == 0 || n < 0 || n_tail > MAX_TAIL || n + n_tail > MAX_PARAMS)
        return PyErr_Format(PyExc_ValueError, "launcher: no driver function, or %zd + %zd parameters (at most %d + %d)",
                            n, n_tail, MAX_PARAMS - MAX_TAIL, MAX_TAIL);
    if (!PyCallable_Check(pointer_of) || !PyCallable_Check(on_error))
        return PyErr_Format(PyExc_TypeError, "launcher: pointer_of and on_error must be callable");
    uint64_t tail_values[MAX_TAIL];
    for (Py_ssize_t i = 0; i < n_tail; i++) {
        tail_values[i] = PyLong_AsUnsignedLongLong(PyTuple_GetItem(tail, i));
        if (tail_values[i] == (uint64_t)-1 && PyErr_Occurred())
            return NULL;
    }
    Launcher *self = PyObject_New(Launcher, launcher_type);
    if (self == NULL)
        return NULL;
    self->driver_fn = (void *)(uintptr_t)driver_fn;
    self->function = (void *)(uintptr_t)function;
    LaunchConfig config = {{grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}, shared,
                           (void *)(uintptr_t)stream, NULL, 0};
    self->config = config;
    memset(&self->pdl, 0, sizeof self->pdl);
    if (pdl) {
        self->pdl.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        self->pdl.value[0] = 1; /* programmaticStreamSerializationAllowed, an int: little-endian */
        self->config.attrs = &self->pdl;
        self->config.num_attrs = 1;
    }
    self->n = n;
    self->n_tail = n_tail;
    memcpy(self->tail, tail_values, sizeof tail_values);
    Py_INCREF(pointer_of), Py_INCREF(on_error), Py_INCREF(keep), Py_INCREF(kinds);
    self->pointer_of = pointer_of, self->on_error = on_error, self->keep = keep, self->kinds = kinds;
    self->kind = kind;
    PyObject *bound = PyCFunction_NewEx(&launch_def, (PyObject *)self, NULL);
    Py_DECREF(self);
    return bound;
}

static void launcher_dealloc(PyObject *self_) {
    Launcher *self = (Launcher *)self_;
    PyTypeObject *type = Py_TYPE(self_);
    Py_XDECREF(self->pointer_of);
    Py_XDECREF(self->on_error);
    Py_XDECREF(self->keep);
    Py_XDECREF(self->kinds);
    PyObject_Free(self_);
    Py_DECREF(type);
}

static PyType_Slot launcher_slots[] = {{Py_tp_dealloc, launcher_dealloc}, {0, NULL}};
static PyType_Spec launcher_spec = {"_launch.Launcher", sizeof(Launcher), 0, Py_TPFLAGS_DEFAULT, launcher_slots};

static PyMethodDef methods[] = {
    {"launcher", new_launcher, METH_VARARGS,
     "launcher(driver_fn, function, grid, block, shared, stream, tail, pointer_of, on_error, keep, kinds, pdl)"
     " -> launch"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_launch", "aotcombo's kernel launcher in C.", -1,
                                        methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__launch(void) {
    launcher_type = (PyTypeObject *)PyType_FromSpec(&launcher_spec);
    if (launcher_type == NULL)
        return NULL;
    return PyModule_Create(&module_def);
}
