"""Errors from libschedrun as exceptions, one class per kind, and the
helpers that turn a C status and message into them."""

import ctypes
import re

from . import _lib

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
