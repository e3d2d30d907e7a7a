"""What a host task or host step sees, and the ctypes callback that runs one."""

import ctypes

import numpy as np

from . import _lib
from ._errors import _b


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
