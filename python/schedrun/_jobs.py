"""Job results, the completion callback that resolves futures, job graphs,
registered arrays, and the C job options a submission is made of."""

import itertools
import threading

import ctypes

import numpy as np

from . import _lib

from ._errors import VerifyError, _b, _check, _error
from ._host import _host_callback
from ._program import _HostBuffer

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
