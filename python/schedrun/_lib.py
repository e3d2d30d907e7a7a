"""The C library, loaded with ctypes: its structures and function signatures,
as include/schedrun.h declares them.

Where the library is found, first match wins:
  1. $SCHEDRUN_LIBRARY (a path to libschedrun.so);
  2. the path written into _install.py by `cmake --install`;
  3. a build tree next to this package's source (../../build/libschedrun.so);
  4. the system's search path (libschedrun.so.0).

ctypes (not cffi) because the API is plain C with opaque handles and small
structures: nothing to compile when the package is installed, and it works
with Debian's /usr/bin/python3 as it comes. ctypes lets go of the GIL for
every call into the library, so a call that waits (schedrun_wait, close)
never holds up a Python callback the library's threads are running.
"""

import ctypes
import os

_here = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    env = os.environ.get("SCHEDRUN_LIBRARY")
    if env:
        yield env
        return
    try:
        from . import _install  # written by cmake --install

        yield _install.LIBRARY
    except ImportError:
        pass
    root = os.path.dirname(os.path.dirname(_here))
    for build in ("build", "build-release"):
        yield os.path.join(root, build, "libschedrun.so")
    yield "libschedrun.so.0"


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (absent)")
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError("schedrun: libschedrun.so not found; tried " + "; ".join(tried) +
                      " (set SCHEDRUN_LIBRARY to its path)")


lib = _load()

c_char_p = ctypes.c_char_p
c_int = ctypes.c_int
c_size_t = ctypes.c_size_t
c_uint64 = ctypes.c_uint64
c_void_p = ctypes.c_void_p
POINTER = ctypes.POINTER


class Error(ctypes.Structure):
    _fields_ = [("code", c_int), ("message", ctypes.c_void_p)]


class Options(ctypes.Structure):
    _fields_ = [
        ("devices", c_char_p),
        ("cache_dir", c_char_p),
        ("no_disk_cache", c_int),
        ("compile_workers", c_int),
        ("spin_us", c_int),
        ("max_inflight", c_int),
        ("host_in_process", c_int),
        ("record_always", c_int),
        ("record_whole_program", c_int),
        ("no_batching", c_int),
        ("no_caller_scheduling", c_int),
        ("compile_timeout_ms", c_int),
        ("time_nodes", c_int),
        ("retune", c_int),
        ("placement", c_char_p),
    ]


class Placement(ctypes.Structure):
    _fields_ = [("placed", c_uint64), ("by_model", c_uint64), ("predicted", c_uint64),
                ("model_error", ctypes.c_double)]


class Stats(ctypes.Structure):
    _fields_ = [
        ("submitted", c_uint64),
        ("completed", c_uint64),
        ("in_flight", c_uint64),
        ("held", c_uint64),
        ("messages_dropped", c_uint64),
        ("devices_lost", c_int),
        ("placement", Placement * 64),
        ("posted", c_uint64),
        ("posted_late", c_uint64),
    ]


class TuneInfo(ctypes.Structure):
    _fields_ = [
        ("kernel", ctypes.c_char * 64),
        ("where", ctypes.c_char * 256),
        ("key", ctypes.c_char * 128),
        ("device", ctypes.c_char * 64),
        ("block", ctypes.c_uint * 3),
        ("grid", ctypes.c_uint * 3),
        ("timed", c_int),
        ("ncandidates", ctypes.c_uint),
        ("candidates", (ctypes.c_uint * 3) * 16),
        ("candidate_ns", ctypes.c_uint64 * 16),
        ("constants", ctypes.c_char * 64),
        ("candidate_constants", (ctypes.c_char * 64) * 16),
    ]


class Input(ctypes.Structure):
    _fields_ = [("buffer", c_char_p), ("data", c_void_p), ("bytes", c_size_t)]


class Bind(ctypes.Structure):
    _fields_ = [("buffer", c_char_p), ("memory", c_void_p)]


JOB_CALLBACK = ctypes.CFUNCTYPE(None, c_uint64, c_void_p, c_void_p)
HOST_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p)


class JobOptions(ctypes.Structure):
    _fields_ = [
        ("run", c_int),
        ("job", c_int),
        ("device", c_int),
        ("keep_outputs", c_int),
        ("inputs", POINTER(Input)),
        ("ninputs", c_size_t),
        ("timeout_ms", c_int),
        ("submit_timeout_ms", c_int),
        ("on_complete", JOB_CALLBACK),
        ("user", c_void_p),
        ("record_only", c_int),
        ("after", POINTER(c_uint64)),
        ("nafter", c_size_t),
        ("binds", POINTER(Bind)),
        ("nbinds", c_size_t),
    ]


class JobInfo(ctypes.Structure):
    _fields_ = [
        ("status", c_int),
        ("device", c_int),
        ("run", c_int),
        ("job", c_int),
        ("verified", c_int),
        ("compile_ns", c_uint64),
        ("record_ns", c_uint64),
        ("execute_ns", c_uint64),
        ("nodes_created", c_uint64),
        ("nodes_updated", c_uint64),
        ("nodes_reused", c_uint64),
        ("handoffs_local", ctypes.c_uint32),
        ("handoffs_copied", ctypes.c_uint32),
        ("handoffs_peer", ctypes.c_uint32),
        ("bytes_in", c_uint64),
        ("bytes_out", c_uint64),
        ("bytes_peer", c_uint64),
    ]


MAX_DIMS = 8


class BufferInfo(ctypes.Structure):
    _fields_ = [
        ("name", c_char_p),
        ("type", c_char_p),
        ("elem_size", c_size_t),
        ("count", c_uint64),
        ("ndims", c_int),
        ("dims", c_uint64 * MAX_DIMS),
    ]


PROGRESS = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32, c_void_p)
PROGRESS_PHASE = ctypes.CFUNCTYPE(None, c_char_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32,
                                  ctypes.c_uint32, c_void_p)


class RunOptions(ctypes.Structure):
    _fields_ = [
        ("repeat", c_int),
        ("jobs", c_int),
        ("keep_outputs", c_int),
        ("timeout_ms", c_int),
        ("job_timeout_ms", c_int),
        ("progress", PROGRESS),
        ("progress_user", c_void_p),
        ("check_only", c_int),
        ("progress_phase", PROGRESS_PHASE),
    ]


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


E = POINTER(Error)
version = _fn("schedrun_version", c_char_p)
strerror = _fn("schedrun_strerror", c_char_p, c_int)
error_clear = _fn("schedrun_error_clear", None, E)
options_init = _fn("schedrun_options_init", None, POINTER(Options))
open_ = _fn("schedrun_open", c_int, POINTER(c_void_p), POINTER(Options), E)
close = _fn("schedrun_close", c_int, POINTER(c_void_p))
shutdown = _fn("schedrun_shutdown", c_int, c_void_p, c_int, E)
device_count = _fn("schedrun_device_count", c_int, c_void_p)
tune_count = _fn("schedrun_tune_count", c_size_t, c_void_p)
tune_get = _fn("schedrun_tune_get", c_int, c_void_p, c_size_t, POINTER(TuneInfo), E)
get_stats = _fn("schedrun_get_stats", c_int, c_void_p, POINTER(Stats), E)
device_name = _fn("schedrun_device_name", c_char_p, c_void_p, c_int)
device_fallback = _fn("schedrun_device_fallback", c_char_p, c_void_p)
compile_target = _fn("schedrun_compile_target", c_char_p, c_void_p)
load_file = _fn("schedrun_program_load_file", c_int, c_void_p, c_char_p, POINTER(c_void_p), E)
load_string = _fn("schedrun_program_load_string", c_int, c_void_p, c_char_p, c_char_p, POINTER(c_void_p), E)
program_free = _fn("schedrun_program_free", None, POINTER(c_void_p))
program_name = _fn("schedrun_program_name", c_char_p, c_void_p)
program_repeat = _fn("schedrun_program_repeat", c_int, c_void_p)
program_jobs = _fn("schedrun_program_jobs", c_int, c_void_p)
program_buffer_count = _fn("schedrun_program_buffer_count", c_int, c_void_p)
program_buffer = _fn("schedrun_program_buffer", c_int, c_void_p, c_int, POINTER(BufferInfo))
job_options_init = _fn("schedrun_job_options_init", None, POINTER(JobOptions))
submit = _fn("schedrun_submit", c_int, c_void_p, c_void_p, POINTER(JobOptions), POINTER(c_uint64), E)
submit_many = _fn("schedrun_submit_many", c_int, c_void_p, c_void_p, c_size_t, POINTER(JobOptions),
                  POINTER(c_uint64), E)
result_info = _fn("schedrun_job_result_info", POINTER(JobInfo), c_void_p)
result_error = _fn("schedrun_job_result_error", c_char_p, c_void_p)
result_output = _fn("schedrun_job_result_output", c_void_p, c_void_p, c_char_p, POINTER(c_size_t))
result_free = _fn("schedrun_job_result_free", None, POINTER(c_void_p))
run_options_init = _fn("schedrun_run_options_init", None, POINTER(RunOptions))
run = _fn("schedrun_run", c_int, c_void_p, c_void_p, POINTER(RunOptions), POINTER(c_void_p), E)
report_json = _fn("schedrun_report_json", c_void_p, c_void_p)
report_write_trace = _fn("schedrun_report_write_trace", c_int, c_void_p, c_char_p, E)
report_output = _fn("schedrun_report_output", c_void_p, c_void_p, c_int, c_int, c_char_p, POINTER(c_size_t))
report_free = _fn("schedrun_report_free", None, POINTER(c_void_p))
builder_new = _fn("schedrun_builder_new", c_int, POINTER(c_void_p), c_char_p, E)
builder_runs = _fn("schedrun_builder_runs", None, c_void_p, c_int, c_int, c_int)
builder_devices = _fn("schedrun_builder_devices", None, c_void_p, c_char_p)
builder_kernel = _fn("schedrun_builder_kernel", None, c_void_p, c_char_p, c_char_p, c_char_p, c_char_p)
builder_buffer = _fn("schedrun_builder_buffer", None, c_void_p, c_char_p, c_char_p, c_uint64, c_void_p, c_size_t, c_int)
builder_shape = _fn("schedrun_builder_shape", None, c_void_p, POINTER(c_uint64), c_size_t)
builder_launch = _fn("schedrun_builder_launch", None, c_void_p, c_char_p, POINTER(ctypes.c_uint),
                     POINTER(ctypes.c_uint), POINTER(c_char_p), c_size_t)
builder_launch_autotune = _fn("schedrun_builder_launch_autotune", None, c_void_p, c_char_p,
                              POINTER(ctypes.c_uint * 3), c_size_t, c_char_p, POINTER(c_char_p), c_size_t,
                              POINTER(c_char_p), c_size_t)
builder_autotune_constant = _fn("schedrun_builder_autotune_constant", None, c_void_p, c_char_p,
                                POINTER(ctypes.c_longlong), c_size_t)
builder_shared = _fn("schedrun_builder_shared", None, c_void_p, ctypes.c_uint)
builder_copy = _fn("schedrun_builder_copy", None, c_void_p, c_char_p, c_char_p, c_char_p, c_char_p, c_char_p)
builder_fill = _fn("schedrun_builder_fill", None, c_void_p, c_char_p, c_char_p, c_char_p, c_char_p)
builder_loop = _fn("schedrun_builder_loop", None, c_void_p, ctypes.c_uint)
builder_while = _fn("schedrun_builder_while", None, c_void_p, c_char_p, c_uint64, ctypes.c_uint)
builder_end = _fn("schedrun_builder_end", None, c_void_p)
builder_host = _fn("schedrun_builder_host", None, c_void_p, c_char_p, HOST_FN, c_void_p)
builder_expect_values = _fn("schedrun_builder_expect_values", None, c_void_p, c_char_p, POINTER(c_char_p), c_size_t,
                            c_char_p, ctypes.c_double)
builder_finish = _fn("schedrun_builder_finish", c_int, c_void_p, POINTER(c_void_p), E)
builder_free = _fn("schedrun_builder_free", None, POINTER(c_void_p))
graph_new = _fn("schedrun_graph_new", c_int, POINTER(c_void_p), E)
graph_job = _fn("schedrun_graph_job", c_int, c_void_p, c_void_p, POINTER(JobOptions), POINTER(c_int), E)
graph_host = _fn("schedrun_graph_host", c_int, c_void_p, c_char_p, HOST_FN, c_void_p, POINTER(c_int), E)
graph_after = _fn("schedrun_graph_after", c_int, c_void_p, c_int, c_int, E)
graph_handoff = _fn("schedrun_graph_handoff", c_int, c_void_p, c_int, c_char_p, c_int, c_char_p, E)
graph_size = _fn("schedrun_graph_size", c_size_t, c_void_p)
graph_submit = _fn("schedrun_graph_submit", c_int, c_void_p, c_void_p, POINTER(c_uint64), E)
graph_free = _fn("schedrun_graph_free", None, POINTER(c_void_p))
task_buffer = _fn("schedrun_host_task_buffer", c_void_p, c_void_p, c_char_p, POINTER(c_size_t))
task_output = _fn("schedrun_host_task_output", c_void_p, c_void_p, c_char_p, c_size_t)
task_name = _fn("schedrun_host_task_name", c_char_p, c_void_p)
task_job = _fn("schedrun_host_task_job", c_uint64, c_void_p)
task_fail = _fn("schedrun_host_task_fail", c_int, c_void_p, c_char_p)
buffer_register = _fn("schedrun_buffer_register", c_int, c_void_p, c_void_p, c_size_t, POINTER(c_void_p), E)
buffer_unregister = _fn("schedrun_buffer_unregister", c_int, POINTER(c_void_p), E)
host_alloc = _fn("schedrun_host_alloc", c_int, c_void_p, c_size_t, POINTER(c_void_p), E)
host_free = _fn("schedrun_host_free", c_int, c_void_p, c_void_p, E)
free = ctypes.CDLL(None).free
free.argtypes = [c_void_p]
free.restype = None
