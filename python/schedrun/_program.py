"""Programs: loaded or built (Builder), with their buffers as declared."""

import ctypes

import numpy as np

from . import _lib

from ._errors import _b, _check
from ._host import _host_callback

_DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "u32": np.uint32, "i64": np.int64,
           "u64": np.uint64, "u8": np.uint8}


class Buffer:
    """A program's buffer as declared: name, type ("f32"), dtype, count, shape."""

    def __init__(self, info):
        self.name = info.name.decode()
        self.type = info.type.decode()
        self.dtype = np.dtype(_DTYPES.get(self.type, np.uint8))
        self.count = int(info.count)
        self.shape = tuple(int(info.dims[d]) for d in range(info.ndims)) if info.ndims else (self.count,)
        self.nbytes = self.count * int(info.elem_size)

    def __repr__(self):
        return "Buffer(%r, %s, shape=%s)" % (self.name, self.type, self.shape)


class _HostBuffer:
    """A host task's buffer as its caller names it: any count of one dtype."""

    def __init__(self, name, dtype):
        self.name = name
        self.dtype = np.dtype(dtype)
        self.count = None
        self.shape = None


class Program:
    """A loaded or built program (schedrun_program_t). Its `buffers` map
    names to Buffer. Given back with free(), or when its scheduler closes."""

    def __init__(self, handle):
        self._h = ctypes.c_void_p(handle)
        self._hosts = []  # host step callbacks, alive as long as the program
        self.name = _lib.program_name(self._h).decode()
        self.buffers = {}
        for i in range(_lib.program_buffer_count(self._h)):
            info = _lib.BufferInfo()
            if _lib.program_buffer(self._h, i, ctypes.byref(info)) == 0:
                b = Buffer(info)
                self.buffers[b.name] = b

    @property
    def repeat(self):
        return _lib.program_repeat(self._h)

    @property
    def jobs(self):
        return _lib.program_jobs(self._h)

    def free(self):
        if self._h:
            _lib.program_free(ctypes.byref(self._h))
            self._h = ctypes.c_void_p()

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass

    def __repr__(self):
        return "Program(%r, buffers=%s)" % (self.name, list(self.buffers))


def _dim3(v):
    """A number or up to three, as x, y, z (unused ones 1)."""
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    v += [1] * (3 - len(v))
    return (ctypes.c_uint * 3)(*[int(x) for x in v[:3]])


class Builder:
    """A program made by calls, as the C builder (schedrun_builder_*) makes
    one: each call returns the builder, so they chain. Strings are written as
    in a config: types "f32", expressions "$iter * 64". finish() (or
    Scheduler.build) checks it all and makes the Program; a ConfigError names
    the call of every problem."""

    def __init__(self, name):
        err = _lib.Error()
        h = ctypes.c_void_p()
        _check(_lib.builder_new(ctypes.byref(h), _b(name), ctypes.byref(err)), err)
        self._h = h
        self._keep = []  # host step callbacks and init bytes the C side points at until finish

    def runs(self, repeat=0, buffer_sets=0, jobs=0):
        _lib.builder_runs(self._h, repeat, buffer_sets, jobs)
        return self

    def devices(self, devices):
        _lib.builder_devices(self._h, _b(devices))
        return self

    def kernel(self, name, params, source, entry=None):
        """params as "ptr, f32, i32"; entry defaults to the name."""
        _lib.builder_kernel(self._h, _b(name), _b(params), _b(source), _b(entry))
        return self

    def buffer(self, name, init=None, type=None, count=None, shape=None, output=False, resident=False):
        """A buffer from a NumPy array (its type, count and shape, and its
        contents as `init`), or of `type` and `count` (zeroed)."""
        flags = (1 if output else 0) | (2 if resident else 0)
        data, nbytes = None, 0
        if init is not None:
            a = np.ascontiguousarray(init)
            rev = {np.dtype(v): k for k, v in _DTYPES.items()}
            if a.dtype not in rev:
                raise TypeError("buffer '%s': no schedrun type for dtype %s" % (name, a.dtype))
            type = type or rev[a.dtype]
            count = a.size if count is None else count
            shape = a.shape if shape is None and a.ndim > 1 else shape
            self._keep.append(a)
            data, nbytes = a.ctypes.data, a.nbytes
        if type is None or count is None:
            raise ValueError("buffer '%s': give an init array, or a type and a count" % name)
        _lib.builder_buffer(self._h, _b(name), _b(type), int(count), data, nbytes, flags)
        if shape is not None:
            dims = (ctypes.c_uint64 * len(shape))(*shape)
            _lib.builder_shape(self._h, dims, len(shape))
        return self

    def launch(self, kernel, grid, block, args=(), shared=0):
        """grid and block: a number or up to three; args as strings or numbers
        (a buffer's name, "NAME[EXPR]", a number, an expression)."""
        argv = (ctypes.c_char_p * max(1, len(args)))(*[_b(str(a)) for a in args])
        _lib.builder_launch(self._h, _b(kernel), _dim3(grid), _dim3(block), argv, len(args))
        if shared:
            _lib.builder_shared(self._h, int(shared))
        return self

    def launch_autotune(self, kernel, blocks, grid, args=(), key=(), shared=0, constants=None):
        """A launch whose block is chosen by timing the candidates `blocks`
        (each a number or up to three); grid: an expression that may read a
        candidate's x size as $block; key: names of the kernel's scalar
        parameters the choice depends on; constants: {NAME: [values]}, named
        constants of the kernel's source whose values are candidates too (the
        grid reads them as $NAME) (a config's `autotune:`)."""
        cands = (ctypes.c_uint * 3 * max(1, len(blocks)))(*[_dim3(b) for b in blocks])
        argv = (ctypes.c_char_p * max(1, len(args)))(*[_b(str(a)) for a in args])
        keys = (ctypes.c_char_p * max(1, len(key)))(*[_b(k) for k in key])
        _lib.builder_launch_autotune(self._h, _b(kernel), cands, len(blocks), _b(str(grid)), keys, len(key), argv,
                                     len(args))
        for name, values in (constants or {}).items():
            vals = (ctypes.c_longlong * max(1, len(values)))(*[int(v) for v in values])
            _lib.builder_autotune_constant(self._h, _b(name), vals, len(values))
        if shared:
            _lib.builder_shared(self._h, int(shared))
        return self

    def copy(self, src, dst, count=None, src_offset=None, dst_offset=None):
        _lib.builder_copy(self._h, _b(src), _b(dst), _b(_s(count)), _b(_s(src_offset)), _b(_s(dst_offset)))
        return self

    def fill(self, buffer, value, count=None, offset=None):
        _lib.builder_fill(self._h, _b(buffer), _b(str(value)), _b(_s(count)), _b(_s(offset)))
        return self

    def loop(self, trips):
        """The steps until end() repeat `trips` times."""
        _lib.builder_loop(self._h, int(trips))
        return self

    def while_(self, flag_buffer, index=0, max_trips=1000):
        _lib.builder_while(self._h, _b(flag_buffer), int(index), int(max_trips))
        return self

    def end(self):
        _lib.builder_end(self._h)
        return self

    def host(self, name, fn):
        """A host step: fn(task) runs between the device steps with the job's
        buffers as host memory (task.array(name)). An exception fails the
        job, naming the step and the exception."""
        cb = _host_callback(fn)
        self._keep.append(cb)
        _lib.builder_host(self._h, _b(name), cb, None)
        return self

    def expect(self, buffer, values, sum=None, tol=0.0):
        """The first elements of buffer must be `values` (numbers or expressions)."""
        vals = (ctypes.c_char_p * max(1, len(values)))(*[_b(str(v)) for v in values])
        _lib.builder_expect_values(self._h, _b(buffer), vals, len(values), _b(_s(sum)), float(tol))
        return self

    def finish(self):
        err = _lib.Error()
        out = ctypes.c_void_p()
        rc = _lib.builder_finish(self._h, ctypes.byref(out), ctypes.byref(err))
        _lib.builder_free(ctypes.byref(self._h))
        _check(rc, err)
        p = Program(out.value)
        p._hosts = [k for k in self._keep if not isinstance(k, np.ndarray)]
        return p


def _s(v):
    return None if v is None else str(v)
