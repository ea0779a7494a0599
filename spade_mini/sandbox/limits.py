"""The sandbox's vocabulary: the limits of one sandboxed environment and its typed errors.

Every failure of an environment surfaces as a `SandboxError` subclass, so a caller can end the
episode (or reject the design) with a recorded reason and carry on; none of them means that the
trainer itself is in trouble.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class SandboxLimits:
    call_timeout_s: float = 5.0
    """Wall-clock limit for one reset/step/hint call."""
    load_timeout_s: float = 10.0
    """Wall-clock limit for starting the child and loading the environment source."""
    cpu_s: int = 60
    """CPU seconds over the child's lifetime; then the kernel SIGKILLs it."""
    memory_mb: int = 1024
    """Address space the environment may add on top of the child interpreter."""
    max_open_files: int = 64
    """RLIMIT_NOFILE: descriptors the child may hold, the interpreter's own included."""
    file_size_mb: int = 16
    """RLIMIT_FSIZE: the largest file the child may write (it has no writable directory)."""
    max_obs_chars: int = 20_000
    """Observations (and info strings) are cut to this length, in the child and again here."""
    max_hint_chars: int = 4_000
    """hint() text is cut to this length, in the child and again here."""
    max_action_chars: int = 20_000
    """Actions are truncated to this length before they are sent."""
    max_reply_bytes: int = 2**20
    """A reply line longer than this is refused before it is parsed."""


class SandboxError(Exception):
    """Anything that went wrong running an environment; the environment, never the trainer."""


class EnvLoadError(SandboxError):
    """The source did not load: syntax, forbidden import, no single *Env class, constructor.

    `.stage` is "structure" for a forbidden import or a wrong number of *Env classes, "load"
    for everything else (see `STAGES`); `.traceback` holds the child's traceback text."""

    def __init__(self, message: str, traceback: str = "", stage: str = "load"):
        super().__init__(message)
        self.traceback = traceback
        self.stage = stage


class EnvTimeout(SandboxError):
    """A call ran past its wall-clock limit; the child was killed."""


class EnvCrashed(SandboxError):
    """The child process died or exited (os._exit, a signal, an rlimit kill)."""


class EnvRuntimeError(SandboxError):
    """The environment raised; `.traceback` holds its traceback text."""

    def __init__(self, message: str, traceback: str = ""):
        super().__init__(message)
        self.traceback = traceback


class EnvProtocolError(SandboxError):
    """Wrong return shape or types, a non-finite reward, or a malformed reply."""
