/* The per-call check of a bound graph's inputs (bound.py), in one C call: whether each input is
   a plain tensor with the dtype, device, shape and strides the graph was captured with, and
   whether its data pointers are a set seen before (which one).

   A CPython extension on the stable ABI only (abi3, CPython >= 3.10) that links to nothing but
   libc: it reads tensors through torch's stable C shim (``aoti_torch_get_*``, the functions
   AOTInductor's packages call, kept stable across torch releases), whose addresses Python hands
   over from its ctypes handle of libtorch. A shim function takes an ``at::Tensor*``: the one a
   Python tensor holds at ``offset`` bytes into its object (torch >= 2.10: a plain at::Tensor right
   after PyObject_HEAD). torch_private.py checks that offset before it builds a Guard, by ``word_at``
   against ``Tensor._cdata``; any doubt, and the runtime keeps torch's TensorGuards.

   Guard(functions, offset, types, templates, capacity)
       functions: the addresses of aoti_torch_get_{data_ptr, dim, sizes, strides, dtype,
       device_type, device_index, layout}; types: the exact Python types accepted (torch.Tensor,
       torch.nn.Parameter: a subclass may override anything, and is refused); templates: the
       tensors whose layout inputs must have (sizes equal; strides equal where a size is not 1;
       any strides when a size is 0; strided layout); capacity: how many pointer sets it can
       remember.
   guard(inputs) -> int: -2 the inputs are not accepted (count, type, layout); else the index of
       the remembered pointer set they match, or -1 for addresses not remembered.
   guard.pointers() -> tuple: the data pointers of the last accepted call.
   guard.remember() -> int: remembers those pointers; their index (ValueError when full).
   guard.forget(index): frees an index.
   word_at(obj, offset) -> int: the pointer-sized word at ``offset`` bytes into ``obj``.
   refcounts(objects) -> tuple; same_refcounts(objects, counts) -> bool: the reference counts of
       a list's objects, and whether they are still those (outputs.py's free slots). */
#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIMS 64

typedef int32_t (*GetPointer)(void *tensor, void **out);
typedef int32_t (*GetInt64)(void *tensor, int64_t *out);
typedef int32_t (*GetInt64s)(void *tensor, int64_t **out);
typedef int32_t (*GetInt32)(void *tensor, int32_t *out);

typedef struct {
    GetPointer data_ptr;
    GetInt64 dim;
    GetInt64s sizes, strides;
    GetInt32 dtype, device_type, device_index, layout;
} Shim;

typedef struct {
    int32_t dtype, device_type, device_index;
    int64_t dim, sizes[MAX_DIMS], strides[MAX_DIMS];
} Layout;

typedef struct {
    PyObject_HEAD
    Shim shim;
    Py_ssize_t offset, n, capacity;
    PyObject *types;
    Layout *layouts;    /* n */
    uint64_t *pointers; /* n: the last accepted call's */
    uint64_t hash;      /* of those pointers */
    uint64_t *sets;     /* capacity * n */
    uint64_t *hashes;   /* capacity */
    char *used;         /* capacity */
} Guard;

static PyTypeObject *guard_type;

static uint64_t mix(uint64_t hash, uint64_t value) {
    hash ^= value + 0x9e3779b97f4a7c15ULL + (hash << 6) + (hash >> 2);
    return hash;
}

/* The layout of the tensor ``obj``, through the shim; 0 when it is not a strided tensor the
   shim can read (sparse, nested, without storage, more than MAX_DIMS dims). */
static int read_layout(const Shim *shim, Py_ssize_t offset, PyObject *obj, Layout *out, uint64_t *pointer) {
    void *tensor = (char *)obj + offset, *data = NULL;
    int64_t *sizes, *strides;
    int32_t layout;
    if (shim->layout(tensor, &layout) || layout != 0 || shim->dim(tensor, &out->dim) || out->dim < 0 ||
        out->dim > MAX_DIMS || shim->sizes(tensor, &sizes) || shim->strides(tensor, &strides) ||
        shim->dtype(tensor, &out->dtype) || shim->device_type(tensor, &out->device_type) ||
        shim->device_index(tensor, &out->device_index) || shim->data_ptr(tensor, &data))
        return 0;
    memcpy(out->sizes, sizes, (size_t)out->dim * sizeof *sizes);
    memcpy(out->strides, strides, (size_t)out->dim * sizeof *strides);
    *pointer = (uint64_t)(uintptr_t)data;
    return 1;
}

/* Whether ``obj``'s type is exactly one of ``types``. */
static int known_type(PyObject *types, PyObject *obj) {
    for (Py_ssize_t k = 0; k < PyTuple_Size(types); k++)
        if ((PyObject *)Py_TYPE(obj) == PyTuple_GetItem(types, k))
            return 1;
    return 0;
}

/* Whether ``obj`` is a tensor laid out as ``want``; its data pointer in ``pointer``. */
static int matches(const Guard *self, PyObject *obj, const Layout *want, uint64_t *pointer) {
    if (!known_type(self->types, obj))
        return 0;
    const Shim *shim = &self->shim;
    void *tensor = (char *)obj + self->offset, *data = NULL;
    int64_t dim, *sizes, *strides;
    int32_t dtype, device_type, device_index, layout;
    if (shim->dtype(tensor, &dtype) || dtype != want->dtype || shim->dim(tensor, &dim) || dim != want->dim ||
        shim->sizes(tensor, &sizes) || memcmp(sizes, want->sizes, (size_t)dim * sizeof *sizes) ||
        shim->device_type(tensor, &device_type) || device_type != want->device_type ||
        shim->device_index(tensor, &device_index) || device_index != want->device_index ||
        shim->layout(tensor, &layout) || layout != 0 || shim->strides(tensor, &strides))
        return 0;
    int empty = 0;
    for (int64_t d = 0; d < dim; d++)
        empty |= sizes[d] == 0;
    for (int64_t d = 0; d < dim && !empty; d++)
        if (sizes[d] != 1 && strides[d] != want->strides[d])
            return 0;
    if (shim->data_ptr(tensor, &data))
        return 0;
    *pointer = (uint64_t)(uintptr_t)data;
    return 1;
}

static PyObject *guard_call(PyObject *self_, PyObject *args, PyObject *kwargs) {
    Guard *self = (Guard *)self_;
    PyObject *inputs = PyTuple_Size(args) == 1 ? PyTuple_GetItem(args, 0) : NULL;
    if (kwargs != NULL || inputs == NULL || !PyTuple_Check(inputs))
        return PyErr_Format(PyExc_TypeError, "guard(inputs): one tuple of inputs, no keywords");
    if (PyTuple_Size(inputs) != self->n)
        return PyLong_FromLong(-2);
    uint64_t hash = 0;
    for (Py_ssize_t i = 0; i < self->n; i++) {
        if (!matches(self, PyTuple_GetItem(inputs, i), &self->layouts[i], &self->pointers[i]))
            return PyLong_FromLong(-2);
        hash = mix(hash, self->pointers[i]);
    }
    self->hash = hash;
    size_t bytes = (size_t)self->n * sizeof *self->pointers;
    for (Py_ssize_t k = 0; k < self->capacity; k++)
        if (self->used[k] && self->hashes[k] == hash && !memcmp(self->sets + k * self->n, self->pointers, bytes))
            return PyLong_FromSsize_t(k);
    return PyLong_FromLong(-1);
}

static PyObject *guard_pointers(PyObject *self_, PyObject *unused) {
    (void)unused;
    Guard *self = (Guard *)self_;
    PyObject *tuple = PyTuple_New(self->n);
    for (Py_ssize_t i = 0; tuple != NULL && i < self->n; i++) {
        PyObject *value = PyLong_FromUnsignedLongLong(self->pointers[i]);
        if (value == NULL || PyTuple_SetItem(tuple, i, value)) {
            Py_DECREF(tuple);
            return NULL;
        }
    }
    return tuple;
}

static PyObject *guard_remember(PyObject *self_, PyObject *unused) {
    (void)unused;
    Guard *self = (Guard *)self_;
    for (Py_ssize_t k = 0; k < self->capacity; k++)
        if (!self->used[k]) {
            memcpy(self->sets + k * self->n, self->pointers, (size_t)self->n * sizeof *self->pointers);
            self->hashes[k] = self->hash, self->used[k] = 1;
            return PyLong_FromSsize_t(k);
        }
    return PyErr_Format(PyExc_ValueError, "guard: all %zd pointer sets are in use", self->capacity);
}

static PyObject *guard_forget(PyObject *self_, PyObject *index) {
    Guard *self = (Guard *)self_;
    Py_ssize_t k = PyLong_AsSsize_t(index);
    if (k == -1 && PyErr_Occurred())
        return NULL;
    if (k < 0 || k >= self->capacity)
        return PyErr_Format(PyExc_IndexError, "guard: no pointer set %zd", k);
    self->used[k] = 0;
    Py_RETURN_NONE;
}

static void guard_dealloc(PyObject *self_) {
    Guard *self = (Guard *)self_;
    PyTypeObject *type = Py_TYPE(self_);
    Py_XDECREF(self->types);
    free(self->layouts), free(self->pointers), free(self->sets), free(self->hashes), free(self->used);
    PyObject_Free(self_);
    Py_DECREF(type);
}

static int read_functions(PyObject *functions, Shim *shim) {
    void **slots[] = {(void **)&shim->data_ptr, (void **)&shim->dim, (void **)&shim->sizes,
                      (void **)&shim->strides, (void **)&shim->dtype, (void **)&shim->device_type,
                      (void **)&shim->device_index, (void **)&shim->layout};
    Py_ssize_t n = sizeof slots / sizeof *slots;
    if (PyTuple_Size(functions) != n) {
        PyErr_Format(PyExc_ValueError, "Guard: expected %zd shim functions", n);
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t address = PyLong_AsUnsignedLongLong(PyTuple_GetItem(functions, i));
        if (PyErr_Occurred())
            return 0;
        if (address == 0) {
            PyErr_Format(PyExc_ValueError, "Guard: shim function %zd is missing", i);
            return 0;
        }
        *slots[i] = (void *)(uintptr_t)address;
    }
    return 1;
}

static PyObject *guard_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *functions, *types, *templates;
    Py_ssize_t offset, capacity;
    if (kwargs != NULL && PyDict_Size(kwargs))
        return PyErr_Format(PyExc_TypeError, "Guard: no keywords");
    if (!PyArg_ParseTuple(args, "O!nO!O!n:Guard", &PyTuple_Type, &functions, &offset, &PyTuple_Type, &types,
                          &PyTuple_Type, &templates, &capacity))
        return NULL;
    if (offset < (Py_ssize_t)sizeof(PyObject) || capacity < 1)
        return PyErr_Format(PyExc_ValueError, "Guard: offset %zd or capacity %zd out of range", offset, capacity);
    for (Py_ssize_t k = 0; k < PyTuple_Size(types); k++)
        if (!PyType_Check(PyTuple_GetItem(types, k)))
            return PyErr_Format(PyExc_TypeError, "Guard: types must be types");
    Guard *self = PyObject_New(Guard, type);
    if (self == NULL)
        return NULL;
    self->types = NULL, self->layouts = NULL, self->pointers = NULL, self->sets = NULL;
    self->hashes = NULL, self->used = NULL;
    Py_ssize_t n = PyTuple_Size(templates);
    self->offset = offset, self->n = n, self->capacity = capacity, self->hash = 0;
    Py_INCREF(types);
    self->types = types;
    self->layouts = calloc((size_t)n + 1, sizeof *self->layouts);
    self->pointers = calloc((size_t)n + 1, sizeof *self->pointers);
    self->sets = calloc((size_t)(capacity * n) + 1, sizeof *self->sets);
    self->hashes = calloc((size_t)capacity, sizeof *self->hashes);
    self->used = calloc((size_t)capacity, 1);
    if (!self->layouts || !self->pointers || !self->sets || !self->hashes || !self->used) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    if (!read_functions(functions, &self->shim)) {
        Py_DECREF(self);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *template = PyTuple_GetItem(templates, i);
        if (!known_type(types, template) ||
            !read_layout(&self->shim, offset, template, &self->layouts[i], &self->pointers[i])) {
            Py_DECREF(self);
            return PyErr_Format(PyExc_ValueError, "Guard: template %zd is not a strided tensor the shim reads", i);
        }
    }
    return (PyObject *)self;
}

static PyObject *word_at(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *obj;
    Py_ssize_t offset;
    if (!PyArg_ParseTuple(args, "On:word_at", &obj, &offset))
        return NULL;
    if (offset < 0)
        return PyErr_Format(PyExc_ValueError, "word_at: negative offset");
    uint64_t word;
    memcpy(&word, (char *)obj + offset, sizeof word);
    return PyLong_FromUnsignedLongLong(word);
}

static PyObject *refcounts(PyObject *module, PyObject *objects) {
    (void)module;
    if (!PyList_Check(objects))
        return PyErr_Format(PyExc_TypeError, "refcounts: expected a list");
    Py_ssize_t n = PyList_Size(objects);
    PyObject *counts = PyTuple_New(n);
    for (Py_ssize_t i = 0; counts != NULL && i < n; i++) {
        PyObject *count = PyLong_FromSsize_t(Py_REFCNT(PyList_GetItem(objects, i)));
        if (count == NULL || PyTuple_SetItem(counts, i, count)) {
            Py_DECREF(counts);
            return NULL;
        }
    }
    return counts;
}

static PyObject *same_refcounts(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *objects, *counts;
    if (!PyArg_ParseTuple(args, "O!O!:same_refcounts", &PyList_Type, &objects, &PyTuple_Type, &counts))
        return NULL;
    Py_ssize_t n = PyList_Size(objects);
    if (PyTuple_Size(counts) != n)
        Py_RETURN_FALSE;
    for (Py_ssize_t i = 0; i < n; i++)
        if (Py_REFCNT(PyList_GetItem(objects, i)) != PyLong_AsSsize_t(PyTuple_GetItem(counts, i)))
            Py_RETURN_FALSE;
    Py_RETURN_TRUE;
}

static PyMethodDef guard_methods[] = {
    {"pointers", guard_pointers, METH_NOARGS, "pointers() -> the data pointers of the last accepted call"},
    {"remember", guard_remember, METH_NOARGS, "remember() -> the index those pointers are remembered at"},
    {"forget", guard_forget, METH_O, "forget(index): frees a remembered pointer set"},
    {NULL, NULL, 0, NULL}};

static PyType_Slot guard_slots[] = {{Py_tp_new, guard_new},
                                    {Py_tp_call, guard_call},
                                    {Py_tp_dealloc, guard_dealloc},
                                    {Py_tp_methods, guard_methods},
                                    {0, NULL}};
static PyType_Spec guard_spec = {"_guard.Guard", sizeof(Guard), 0, Py_TPFLAGS_DEFAULT, guard_slots};

static PyMethodDef methods[] = {
    {"word_at", word_at, METH_VARARGS, "word_at(obj, offset) -> the pointer-sized word at offset bytes into obj"},
    {"refcounts", refcounts, METH_O, "refcounts(list) -> the reference counts of its items"},
    {"same_refcounts", same_refcounts, METH_VARARGS, "same_refcounts(list, counts) -> whether they are still those"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_guard", "aotcombo's input guard in C.", -1,
                                        methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__guard(void) {
    guard_type = (PyTypeObject *)PyType_FromSpec(&guard_spec);
    if (guard_type == NULL)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module != NULL && PyModule_AddObjectRef(module, "Guard", (PyObject *)guard_type) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
