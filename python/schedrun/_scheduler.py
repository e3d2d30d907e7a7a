"""The scheduler: open(), Scheduler."""

import atexit
import concurrent.futures
import json
import os
import threading
import weakref

import ctypes

import numpy as np

from . import _lib

from ._errors import ClosedError, VerifyError, _b, _check, _error, _take
from ._jobs import Registered, Result, _job_options, _keys, _on_complete, _pending, _pending_lock
from ._program import Program

_open = weakref.WeakSet()


class Scheduler:
    """An open scheduler (schedrun_t). Use as a context manager, or close()."""

    def __init__(self, devices="auto", cache_dir=None, no_disk_cache=False, compile_workers=0, max_inflight=0,
                 time_nodes=False, placement=None, **options):
        o = _lib.Options()
        _lib.options_init(ctypes.byref(o))
        o.devices = _b(devices)
        o.cache_dir = _b(cache_dir)
        o.no_disk_cache = 1 if no_disk_cache else 0
        o.compile_workers = int(compile_workers)
        o.max_inflight = int(max_inflight)
        o.time_nodes = 1 if time_nodes else 0
        o.placement = _b(placement)
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
    def tunes(self):
        """The autotuned launches' choices (schedrun_tune_get), as dicts: kernel,
        where, key, device, block, grid, timed (this process timed the
        candidates, or the kernel cache had the choice), constants (the
        chosen values of named constants, "" without), candidates, a list of
        (block, ns), and candidate_constants, each candidate's."""
        self._alive()
        out = []
        for i in range(_lib.tune_count(self._h)):
            t, err = _lib.TuneInfo(), _lib.Error()
            _check(_lib.tune_get(self._h, i, ctypes.byref(t), ctypes.byref(err)), err)
            out.append({"kernel": t.kernel.decode(), "where": t.where.decode(), "key": t.key.decode(),
                        "device": t.device.decode(), "block": tuple(t.block), "grid": tuple(t.grid),
                        "timed": bool(t.timed), "constants": t.constants.decode(),
                        "candidates": [(tuple(t.candidates[c]), t.candidate_ns[c]) for c in range(t.ncandidates)],
                        "candidate_constants": [t.candidate_constants[c].value.decode()
                                                for c in range(t.ncandidates)]})
        return out

    @property
    def placement(self):
        """Per device (schedrun_get_stats): a dict of the jobs placed there,
        those placed by the performance model, how many it predicted, and
        its mean relative error over them."""
        self._alive()
        st, err = _lib.Stats(), _lib.Error()
        _check(_lib.get_stats(self._h, ctypes.byref(st), ctypes.byref(err)), err)
        return [{"device": name, "placed": p.placed, "by_model": p.by_model, "predicted": p.predicted,
                 "model_error": p.model_error} for name, p in zip(self.devices, st.placement)]

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
    "cuda:0,1", "all", or both kinds as "cuda+host:N"); options as
    schedrun_options_t's fields (placement: "auto", "model",
    "least-loaded")."""
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
