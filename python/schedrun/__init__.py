"""schedrun from Python: programs, jobs and job graphs over libschedrun, with
NumPy arrays in and out.

    import numpy as np, schedrun
    with schedrun.open(devices="host:2") as s:
        p = s.load("configs/saxpy.yaml")
        r = s.submit(p, inputs={"x": np.ones(4096, np.float32)}).result()
        print(r["y"][:4])

Every job completes once: its Future gets a Result (outputs as NumPy arrays
with the buffer's type and shape) or an exception of the C error's kind
(ConfigError, CompileError, VerifyError, ...), carrying its code and message.
"""

import atexit
import concurrent.futures
import ctypes
import itertools
import json
import os
import re
import threading
import weakref

import numpy as np

from . import _lib

__all__ = [
    "open", "Scheduler", "Program", "Builder", "Graph", "Result", "HostTask", "Registered", "SchedrunError",
    "ConfigError",
    "CompileError", "VerifyError", "BackendError", "JobTimeoutError", "ClosedError", "FaultError", "LostError",
    "DependencyError", "HostError", "version",
]


def version():
    """The C library's version, "0.7.0"."""
    return _lib.version().decode()


# ---- errors ----

class SchedrunError(Exception):
    """An error from libschedrun: `code` (SCHEDRUN_E*, negative), `name`
    (schedrun_strerror's) and `message` (the library's text)."""

    def __init__(self, code, message):
        self.code = code
        self.name = _lib.strerror(code).decode()
        self.message = message
        super().__init__("%s: %s" % (self.name, message) if message else self.name)


class ConfigError(SchedrunError):
    """A config or program that does not load: `file`, `line` and `column`
    of its first problem (None where the message names no place)."""

    def __init__(self, code, message):
        super().__init__(code, message)
        m = re.match(r"^(.*?):(\d+):(\d+): ", message or "")
        self.file, self.line, self.column = (m.group(1), int(m.group(2)), int(m.group(3))) if m else (None, None, None)


class CompileError(SchedrunError):
    """A kernel that does not compile: `log` holds the compiler's lines."""

    def __init__(self, code, message):
        super().__init__(code, message)
        lines = (message or "").split("\n")
        self.log = "\n".join(lines[1:]).strip()


class VerifyError(SchedrunError):
    """A job whose outputs did not match its expectations; `result` holds it."""
    result = None


class BackendError(SchedrunError):
    pass


class JobTimeoutError(SchedrunError, TimeoutError):
    pass


class ClosedError(SchedrunError):
    pass


class FaultError(SchedrunError):
    pass


class LostError(SchedrunError):
    pass


class DependencyError(SchedrunError):
    pass


class HostError(SchedrunError):
    pass


class InvalidArgument(SchedrunError, ValueError):
    pass


_ERRORS = {-1: InvalidArgument, -3: ConfigError, -4: CompileError, -5: VerifyError, -6: BackendError,
           -8: JobTimeoutError, -9: ClosedError, -15: FaultError, -16: LostError, -17: DependencyError,
           -18: HostError}


def _error(code, message):
    return _ERRORS.get(code, SchedrunError)(code, message)


def _take(err):
    """The message of a filled schedrun_error_t, which it clears."""
    text = ctypes.string_at(err.message).decode("utf-8", "replace") if err.message else ""
    _lib.error_clear(ctypes.byref(err))
    return text


def _check(rc, err):
    if rc != 0:
        raise _error(rc, _take(err))


def _b(s):
    return None if s is None else s.encode() if isinstance(s, str) else s


# ---- programs ----

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
        def dim3(v):
            v = list(v) if isinstance(v, (list, tuple)) else [v]
            v += [1] * (3 - len(v))
            return (ctypes.c_uint * 3)(*[int(x) for x in v[:3]])
        argv = (ctypes.c_char_p * max(1, len(args)))(*[_b(str(a)) for a in args])
        _lib.builder_launch(self._h, _b(kernel), dim3(grid), dim3(block), argv, len(args))
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


# ---- results ----

class Result:
    """A completed job: `status` (0 or SCHEDRUN_E*), `device`, `run`, `job`,
    `verified`, `error` (why it failed, "" when it verified), the times in
    nanoseconds (`compile_ns`, `record_ns`, `execute_ns`), the bytes it moved,
    and `outputs`: buffer name to a NumPy array of the buffer's type and
    shape (a copy). result["y"] is result.outputs["y"]."""

    def __init__(self, job_id, handle, buffers):
        info = _lib.result_info(handle).contents
        self.id = job_id
        self.status = info.status
        self.device = info.device
        self.run = info.run
        self.job = info.job
        self.verified = bool(info.verified)
        for k in ("compile_ns", "record_ns", "execute_ns", "nodes_created", "nodes_updated", "nodes_reused",
                  "bytes_in", "bytes_out", "bytes_peer", "handoffs_local", "handoffs_copied", "handoffs_peer"):
            setattr(self, k, int(getattr(info, k)))
        e = _lib.result_error(handle)
        self.error = e.decode("utf-8", "replace") if e else ""
        self.outputs = {}
        for name, buf in buffers.items():
            n = ctypes.c_size_t()
            ptr = _lib.result_output(handle, _b(name), ctypes.byref(n))
            if not ptr:
                continue
            raw = np.frombuffer(ctypes.string_at(ptr, n.value), dtype=buf.dtype if buf else np.uint8)
            if buf and buf.count is not None and raw.size == buf.count:
                raw = raw.reshape(buf.shape)
            self.outputs[name] = raw

    def __getitem__(self, name):
        return self.outputs[name]

    def __contains__(self, name):
        return name in self.outputs

    def __repr__(self):
        return "Result(id=%d, status=%d, device=%d, verified=%s, outputs=%s)" % (
            self.id, self.status, self.device, self.verified, list(self.outputs))


# Futures waiting for their job: key -> (future, buffers, what must stay alive)
_pending = {}
_pending_lock = threading.Lock()
_keys = itertools.count(1)


def _complete(job_id, handle, user):
    with _pending_lock:
        entry = _pending.pop(user, None)
    h = ctypes.c_void_p(handle)
    try:
        if entry is None:
            return
        fut, buffers, _ = entry
        try:
            r = Result(job_id, h, buffers)
        except BaseException as e:  # never let an exception cross into C
            fut.set_exception(e)
            return
        if r.status == 0:
            fut.set_result(r)
        else:
            exc = _error(r.status, r.error)
            if isinstance(exc, VerifyError):
                exc.result = r
            fut.set_exception(exc)
    finally:
        _lib.result_free(ctypes.byref(h))


_on_complete = _lib.JOB_CALLBACK(_complete)


class HostTask:
    """What a host task or host step sees: its buffers as host memory."""

    def __init__(self, handle):
        self._h = handle

    @property
    def name(self):
        return _lib.task_name(self._h).decode()

    @property
    def job(self):
        return int(_lib.task_job(self._h))

    def array(self, name, dtype=np.uint8, shape=None):
        """Buffer `name` as a writable NumPy array over its bytes (valid while
        the task runs), or None when the task has none of that name."""
        n = ctypes.c_size_t()
        ptr = _lib.task_buffer(self._h, _b(name), ctypes.byref(n))
        if not ptr:
            return None
        a = np.frombuffer((ctypes.c_char * n.value).from_address(ptr), dtype=dtype)
        return a.reshape(shape) if shape is not None else a

    def output(self, name, array):
        """Makes buffer `name` (to hand on) hold a copy of `array`'s bytes."""
        a = np.ascontiguousarray(array)
        ptr = _lib.task_output(self._h, _b(name), a.nbytes)
        if not ptr:
            raise MemoryError("host task output '%s' (%d bytes)" % (name, a.nbytes))
        ctypes.memmove(ptr, a.ctypes.data, a.nbytes)


def _host_callback(fn):
    def call(task, user):
        try:
            rc = fn(HostTask(task))
            return int(rc) if rc else 0
        except BaseException as e:  # the job fails naming it; nothing crosses into C
            _lib.task_fail(task, _b("%s: %s" % (type(e).__name__, e)))
            return -18
    return _lib.HOST_FN(call)


# ---- graphs ----

class Graph:
    """Jobs and host tasks submitted at once (schedrun_graph_*): job() and
    host() return node numbers; after() and handoff() connect them.
    Scheduler.submit_graph returns a Future per node."""

    def __init__(self):
        err = _lib.Error()
        h = ctypes.c_void_p()
        _check(_lib.graph_new(ctypes.byref(h), ctypes.byref(err)), err)
        self._h = h
        self._keep = []
        self._buffers = []  # per node: the program's buffers, or None for a host task

    def job(self, program, inputs=None, run=0, job=0, device=-1, timeout=None):
        o, keep = _job_options(program, inputs, run, job, device, timeout, True)
        err = _lib.Error()
        node = ctypes.c_int()
        _check(_lib.graph_job(self._h, program._h, ctypes.byref(o), ctypes.byref(node), ctypes.byref(err)), err)
        self._keep.append(keep)
        self._buffers.append(program.buffers)
        return node.value

    def host(self, name, fn, outputs=None):
        """A host task: fn(task) with the buffers handed to it (task.array);
        what it makes with task.output() can be handed on. outputs: buffer
        name to dtype, the buffers its Result gives as arrays."""
        cb = _host_callback(fn)
        err = _lib.Error()
        node = ctypes.c_int()
        _check(_lib.graph_host(self._h, _b(name), cb, None, ctypes.byref(node), ctypes.byref(err)), err)
        self._keep.append(cb)
        self._buffers.append({k: _HostBuffer(k, v) for k, v in (outputs or {}).items()})
        return node.value

    def after(self, node, before):
        err = _lib.Error()
        _check(_lib.graph_after(self._h, node, before, ctypes.byref(err)), err)
        return self

    def handoff(self, src, src_buffer, dst, dst_buffer):
        err = _lib.Error()
        _check(_lib.graph_handoff(self._h, src, _b(src_buffer), dst, _b(dst_buffer), ctypes.byref(err)), err)
        return self

    def __len__(self):
        return int(_lib.graph_size(self._h))

    def free(self):
        if self._h:
            _lib.graph_free(ctypes.byref(self._h))

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass


class Registered:
    """An array registered with a scheduler (schedrun_buffer_register): a job
    bound to it (submit's `binds`) starts that buffer from the array's bytes
    and writes the buffer back into it before the job completes, with no
    copy through a message; on memory from Scheduler.host_array the job
    works on it in place. The array must stay untouched while a job bound to
    it runs; unregister() (or leaving a `with`) ends it."""

    def __init__(self, sched, array):
        a = array
        if not isinstance(a, np.ndarray) or not a.flags.c_contiguous or not a.flags.writeable or a.nbytes == 0:
            raise ValueError("register: a writable, C-contiguous, non-empty NumPy array is needed")
        self.array = a
        self._h = ctypes.c_void_p()
        err = _lib.Error()
        _check(_lib.buffer_register(sched._h, a.ctypes.data, a.nbytes, ctypes.byref(self._h), ctypes.byref(err)), err)

    def unregister(self):
        """Ends the registration; BusyError-like SchedrunError (EBUSY) while a
        job bound to it has not completed."""
        if self._h:
            err = _lib.Error()
            _check(_lib.buffer_unregister(ctypes.byref(self._h), ctypes.byref(err)), err)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.unregister()


def _job_options(program, inputs, run, job, device, timeout, keep_outputs, binds=None):
    o = _lib.JobOptions()
    _lib.job_options_init(ctypes.byref(o))
    o.run, o.job, o.device, o.keep_outputs = int(run), int(job), int(device), 1 if keep_outputs else 0
    if timeout is not None:
        o.timeout_ms = max(1, int(timeout * 1000))
    keep = []
    if inputs:
        arr = (_lib.Input * len(inputs))()
        for i, (name, value) in enumerate(inputs.items()):
            buf = program.buffers.get(name)
            if buf is None:
                raise ValueError("input '%s': program '%s' has no such buffer (it has %s)" %
                                 (name, program.name, ", ".join(program.buffers)))
            a = np.asarray(memoryview(value) if not isinstance(value, np.ndarray) else value)
            if a.dtype != buf.dtype:
                raise TypeError("input '%s': dtype %s, the buffer is %s (%s)" % (name, a.dtype, buf.type, buf.dtype))
            if a.size != buf.count:
                raise ValueError("input '%s': %d elements, the buffer has %d" % (name, a.size, buf.count))
            a = np.ascontiguousarray(a)
            keep += [a, _b(name)]
            arr[i] = _lib.Input(keep[-1], a.ctypes.data, a.nbytes)
        o.inputs = arr
        o.ninputs = len(inputs)
        keep.append(arr)
    if binds:
        barr = (_lib.Bind * len(binds))()
        for i, (name, reg) in enumerate(binds.items()):
            buf = program.buffers.get(name)
            if buf is None:
                raise ValueError("bind '%s': program '%s' has no such buffer" % (name, program.name))
            if not isinstance(reg, Registered) or not reg._h:
                raise TypeError("bind '%s': a Registered array is needed (Scheduler.register)" % name)
            if reg.array.dtype != buf.dtype or reg.array.nbytes != buf.nbytes:
                raise ValueError("bind '%s': %s of %d bytes, the buffer is %s of %d bytes" %
                                 (name, reg.array.dtype, reg.array.nbytes, buf.type, buf.nbytes))
            keep += [_b(name), reg]
            barr[i] = _lib.Bind(keep[-2], reg._h)
        o.binds = barr
        o.nbinds = len(binds)
        keep.append(barr)
    return o, keep


# ---- the scheduler ----

_open = weakref.WeakSet()


class Scheduler:
    """An open scheduler (schedrun_t). Use as a context manager, or close()."""

    def __init__(self, devices="auto", cache_dir=None, no_disk_cache=False, compile_workers=0, max_inflight=0,
                 time_nodes=False, **options):
        o = _lib.Options()
        _lib.options_init(ctypes.byref(o))
        o.devices = _b(devices)
        o.cache_dir = _b(cache_dir)
        o.no_disk_cache = 1 if no_disk_cache else 0
        o.compile_workers = int(compile_workers)
        o.max_inflight = int(max_inflight)
        o.time_nodes = 1 if time_nodes else 0
        for k, v in options.items():
            if not hasattr(o, k):
                raise TypeError("schedrun.open: unknown option '%s'" % k)
            setattr(o, k, int(v))
        self._opts = o
        self._h = ctypes.c_void_p()
        self._programs = []
        err = _lib.Error()
        _check(_lib.open_(ctypes.byref(self._h), ctypes.byref(o), ctypes.byref(err)), err)
        _open.add(self)

    @property
    def devices(self):
        """The devices' names, "host:0", "cuda:1"."""
        return [_lib.device_name(self._h, i).decode() for i in range(_lib.device_count(self._h))]

    @property
    def fallback(self):
        """Why `auto` runs on host devices, or None."""
        f = _lib.device_fallback(self._h)
        return f.decode() if f else None

    @property
    def target(self):
        t = _lib.compile_target(self._h)
        return t.decode() if t else None

    def _alive(self):
        if not self._h:
            raise ClosedError(-9, "the scheduler is closed")

    def load(self, config, origin=None):
        """A program from a config file's path, or from YAML text."""
        self._alive()
        err = _lib.Error()
        out = ctypes.c_void_p()
        text = str(config)
        if "\n" not in text and (os.path.exists(text) or text.endswith((".yaml", ".yml"))):
            rc = _lib.load_file(self._h, _b(os.fspath(config)), ctypes.byref(out), ctypes.byref(err))
        else:
            rc = _lib.load_string(self._h, _b(text), _b(origin or "<string>"), ctypes.byref(out), ctypes.byref(err))
        _check(rc, err)
        p = Program(out.value)
        self._programs.append(p)
        return p

    def build(self, builder):
        """The Program a Builder describes."""
        p = builder.finish()
        self._programs.append(p)
        return p

    def register(self, array):
        """Registers a NumPy array for jobs to use (submit's `binds`)."""
        self._alive()
        return Registered(self, array)

    def host_array(self, shape, dtype):
        """A zeroed NumPy array in memory the devices reach directly
        (schedrun_host_alloc): registered and bound, a job works on it in
        place. Valid until the scheduler closes."""
        self._alive()
        dtype = np.dtype(dtype)
        n = int(np.prod(shape)) * dtype.itemsize
        ptr = ctypes.c_void_p()
        err = _lib.Error()
        _check(_lib.host_alloc(self._h, n, ctypes.byref(ptr), ctypes.byref(err)), err)
        return np.frombuffer((ctypes.c_char * n).from_address(ptr.value), dtype=dtype).reshape(shape)

    def submit(self, program, inputs=None, run=0, job=0, device=-1, timeout=None, keep_outputs=True, binds=None):
        """Submits one job and returns a concurrent.futures.Future of its
        Result. inputs: buffer name to an array (any buffer-protocol object)
        of the buffer's type and element count, instead of its init. binds:
        buffer name to a Registered array, used instead of a copy. timeout:
        seconds from submission."""
        return self.submit_many(program, [dict(inputs=inputs, run=run, job=job, device=device, timeout=timeout,
                                               keep_outputs=keep_outputs, binds=binds)])[0]

    def submit_many(self, program, jobs):
        """Submits a job per dict of submit()'s keywords, in one call; a list of Futures."""
        self._alive()
        n = len(jobs)
        if n == 0:
            return []
        opts = (_lib.JobOptions * n)()
        futs, keeps, keys = [], [], []
        for i, j in enumerate(jobs):
            j = dict(j)
            o, keep = _job_options(program, j.pop("inputs", None), j.pop("run", 0), j.pop("job", 0),
                                   j.pop("device", -1), j.pop("timeout", None), j.pop("keep_outputs", True),
                                   j.pop("binds", None))
            if j:
                raise TypeError("submit: unknown keyword(s) %s" % ", ".join(j))
            key = next(_keys)
            o.on_complete = _on_complete
            o.user = key
            opts[i] = o
            fut = concurrent.futures.Future()
            fut.set_running_or_notify_cancel()
            futs.append(fut)
            keeps.append(keep)
            keys.append(key)
        with _pending_lock:
            for key, fut, keep in zip(keys, futs, keeps):
                _pending[key] = (fut, program.buffers, keep)
        ids = (ctypes.c_uint64 * n)()
        err = _lib.Error()
        rc = _lib.submit_many(self._h, program._h, n, opts, ids, ctypes.byref(err))
        if rc != 0:
            exc = _error(rc, _take(err))
            with _pending_lock:
                for i, key in enumerate(keys):
                    if not ids[i]:  # not submitted: it never completes
                        _pending.pop(key, None)
                        futs[i].set_exception(exc)
        return futs

    def submit_graph(self, graph):
        """Submits a Graph; a Future per node, in node order."""
        self._alive()
        n = len(graph)
        err = _lib.Error()
        ids = (ctypes.c_uint64 * max(1, n))()
        futs = [concurrent.futures.Future() for _ in range(n)]
        for f in futs:
            f.set_running_or_notify_cancel()
        rc = _lib.graph_submit(self._h, graph._h, ids, ctypes.byref(err))
        _check(rc, err)
        # the nodes have no callback: one thread collects their results in turn
        threading.Thread(target=self._collect_graph, args=(graph, ids, futs), daemon=True).start()
        return futs

    def _collect_graph(self, graph, ids, futs):
        for i, fut in enumerate(futs):
            try:
                fut.set_result(self._wait(ids[i], graph._buffers[i]))
            except BaseException as e:
                fut.set_exception(e)

    def _wait(self, job_id, buffers):
        out = ctypes.c_void_p()
        err = _lib.Error()
        rc = _lib_wait(self._h, job_id, -1, ctypes.byref(out), ctypes.byref(err))
        _check(rc, err)
        try:
            r = Result(job_id, out, buffers or {})
        finally:
            _lib.result_free(ctypes.byref(out))
        if r.status != 0:
            exc = _error(r.status, r.error)
            if isinstance(exc, VerifyError):
                exc.result = r
            raise exc
        return r

    def run(self, program, repeat=0, jobs=0, timeout=None, job_timeout=None, trace=None):
        """Runs the whole program as a config run does (`repeat` runs of `jobs`
        jobs, every job verified) and returns the report as a dict, the JSON
        `sched-run --json` prints less the command's keys. trace: a path for
        the Chrome trace."""
        self._alive()
        o = _lib.RunOptions()
        _lib.run_options_init(ctypes.byref(o))
        o.repeat, o.jobs = int(repeat), int(jobs)
        if timeout is not None:
            o.timeout_ms = max(1, int(timeout * 1000))
        if job_timeout is not None:
            o.job_timeout_ms = max(1, int(job_timeout * 1000))
        rep = ctypes.c_void_p()
        err = _lib.Error()
        rc = _lib.run(self._h, program._h, ctypes.byref(o), ctypes.byref(rep), ctypes.byref(err))
        message = _take(err)
        if not rep:
            raise _error(rc, message)
        try:
            text = _lib.report_json(rep)
            report = json.loads(ctypes.string_at(text).decode()) if text else {}
            _lib.free(text)
            if trace:
                terr = _lib.Error()
                _check(_lib.report_write_trace(rep, _b(os.fspath(trace)), ctypes.byref(terr)), terr)
        finally:
            _lib.report_free(ctypes.byref(rep))
        if rc not in (0, -5):  # a verify failure is in the report
            raise _error(rc, message)
        return report

    def close(self, timeout=None):
        """Stops taking jobs, lets those started finish (timeout: seconds,
        None: two minutes), and closes. Every job's Future is resolved."""
        if not self._h:
            return
        err = _lib.Error()
        _lib.shutdown(self._h, -1 if timeout is None else int(timeout * 1000), ctypes.byref(err))
        _take(err)
        _lib.close(ctypes.byref(self._h))
        self._h = ctypes.c_void_p()
        for p in self._programs:
            p.free()
        self._programs = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


_lib_wait = _lib._fn("schedrun_wait", ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int,
                     ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(_lib.Error))


def open(devices="auto", **options):
    """Opens a scheduler on `devices` ("auto", "host", "host:N", "cuda",
    "cuda:0,1", "all"); options as schedrun_options_t's fields."""
    return Scheduler(devices=devices, **options)


@atexit.register
def _close_all():
    # jobs still in flight at exit complete (their futures resolved) before
    # the interpreter tears down what their callbacks use
    for s in list(_open):
        try:
            s.close(timeout=5)
        except Exception:
            pass
