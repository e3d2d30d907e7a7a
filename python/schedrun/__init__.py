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

from . import _lib
from ._errors import (BackendError, ClosedError, CompileError, ConfigError, DependencyError, FaultError, HostError,
                      InvalidArgument, JobTimeoutError, LostError, SchedrunError, VerifyError)
from ._host import HostTask
from ._jobs import Graph, Registered, Result
from ._program import Buffer, Builder, Program
from ._scheduler import Scheduler, open

__all__ = [
    "open", "Scheduler", "Program", "Buffer", "Builder", "Graph", "Result", "HostTask", "Registered",
    "SchedrunError", "ConfigError", "CompileError", "VerifyError", "BackendError", "JobTimeoutError", "ClosedError",
    "FaultError", "LostError", "DependencyError", "HostError", "InvalidArgument", "version",
]


def version():
    """The C library's version, "0.7.0"."""
    return _lib.version().decode()
