"""Parent side: the life cycle of one sandbox child: start it, check it is ready, stop it.

A child is `python -s -S -P worker.py CONFIG` (no site-packages, no script directory on
sys.path, an explicit environment with PYTHONHASHSEED=0 and nothing of the trainer's) in its own
session, with two private pipes. `available_layers()` starts one probe child per trainer process
and records which kernel layers work on this machine; every later child is told to apply exactly
those and refuses to start if one fails, so the layer list comes from what the parent set up,
never from a reply. As root each child gets a uid of its own from a reserved range.

Stopping is bounded: `kill()` sends SIGKILL to the whole process group first, then waits at most
KILL_WAIT_S for the processes to be gone; the child has no writable directory, so there are no
files to remove. Threads and subprocesses of a child are counted here, from /proc, not from
anything the child says.
"""
import ctypes.util
import functools
import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid

from spade_mini.sandbox.limits import EnvLoadError, SandboxError, SandboxLimits
from spade_mini.sandbox.protocol import Channel, decode, unwrap

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER_PATH = os.path.join(HERE, "worker.py")
TOOLUSE_PATH = os.path.join(os.path.dirname(HERE), "tooluse.py")
# The same names, in the same order, as kernel.LAYERS (a child-side module, not imported here).
LAYERS = ("rlimits", "userns", "netns", "ipcns", "pidns", "mntns", "uid", "pdeathsig",
          "no_new_privs", "landlock", "seccomp")
# uids no distribution or systemd hands out (systemd leaves 1879048192-2147483647 unused).
UID_BASE, UID_COUNT = 1_900_000_000, 2**24
KILL_WAIT_S = 1.0
PYTHON_FLAGS = ["-s", "-S"] + (["-P"] if sys.version_info >= (3, 11) else [])

_uid_lock = threading.Lock()
_live_uids: set[int] = set()
_probe_lock = threading.Lock()
_probed: tuple[str, ...] | None = None


def _allocate_uid() -> int | None:
    if os.geteuid() != 0:
        return None
    with _uid_lock:
        while True:
            uid = UID_BASE + random.randrange(UID_COUNT)
            if uid not in _live_uids:
                _live_uids.add(uid)
                return uid


@functools.cache
def _seccomp_config() -> tuple[str | None, dict]:
    """Where the child can import pyseccomp from, and the libraries it loads (resolved once)."""
    spec = importlib.util.find_spec("pyseccomp")
    if spec is None or spec.origin is None:
        return None, {}
    libs = {name: ctypes.util.find_library(name) for name in ("c", "seccomp")}
    return (os.path.dirname(spec.origin) if libs["seccomp"] else None), libs


def available_layers() -> tuple[str, ...]:
    """The isolation layers every sandbox child gets on this machine (probed once per process)."""
    global _probed
    with _probe_lock:
        if _probed is None:
            child = Child(SandboxLimits(), uuid.uuid4().hex, layers=None)
            try:
                found = child.ready(time.monotonic() + 30.0, 30.0)
            finally:
                child.kill()
            if not isinstance(found, list):
                raise EnvLoadError("the sandbox probe gave a malformed reply")
            _probed = tuple(name for name in LAYERS if name in found)
    return _probed


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return True
    return state in (b"Z", b"X")


class Child:
    """One worker process, its pipes, and (with a pid namespace) the pid of the environment."""

    def __init__(self, limits: SandboxLimits, tag: str, layers: tuple[str, ...] | None,
                 source: str = "", preload: list[str] | None = None):
        self.layers = layers
        self.uid = _allocate_uid()
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        seccomp_dir, libs = _seccomp_config()
        cfg = {"probe": layers is None, "layers": list(layers or ()), "uid": self.uid,
               "ppid": os.getpid(), "request_fd": req_r, "reply_fd": rep_w,
               "tooluse_path": TOOLUSE_PATH, "preload": preload or [],
               "seccomp_dir": seccomp_dir, "libs": libs,
               **{k: getattr(limits, k) for k in (
                   "cpu_s", "memory_mb", "max_open_files", "file_size_mb", "max_obs_chars",
                   "max_hint_chars", "max_action_chars", "max_reply_bytes")}}
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
               "SPADE_SANDBOX_TAG": tag}
        try:
            self.proc = subprocess.Popen(
                [sys.executable, *PYTHON_FLAGS, WORKER_PATH, json.dumps(cfg)], env=env, cwd="/",
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, pass_fds=(req_r, rep_w))
        except OSError as exc:  # out of fds or processes in the trainer: nothing was started
            for fd in (req_w, rep_r):
                os.close(fd)
            self._release()
            raise EnvLoadError(f"could not start the environment process: {exc}") from exc
        finally:
            os.close(req_r)
            os.close(rep_w)
        self.channel = Channel(req_w, rep_r, limits.max_reply_bytes)
        self.max_chars = limits.max_obs_chars
        self.env_pid = self.proc.pid
        self._pending = self.channel.send_nowait(
            (json.dumps({"id": 0, "source": source}) + "\n").encode()) if layers is not None else b""
        self.alive = True

    def ready(self, deadline: float, timeout_s: float):
        """Finish sending the source and return the start-up reply's value (load errors raise)."""
        if self._pending:
            self.channel.send(self._pending, deadline)
            self._pending = b""
        value, _ = unwrap(decode(self.channel.read_line(deadline, timeout_s)), 0, self.max_chars)
        if self.layers and "pidns" in self.layers:
            self.env_pid = self._inner_pid()
        return value

    def _inner_pid(self) -> int:
        """The environment's process: the only child of the waiter outside the pid namespace."""
        try:
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                return int(f.read().split()[0])
        except (OSError, IndexError, ValueError):  # no CONFIG_PROC_CHILDREN, or it already died
            return self.proc.pid

    def census(self) -> tuple[int, bool]:
        """(threads, has child processes) of the environment's process, read from /proc."""
        try:
            with open(f"/proc/{self.env_pid}/status") as f:
                threads = int(next(ln for ln in f if ln.startswith("Threads:")).split()[1])
            with open(f"/proc/{self.env_pid}/task/{self.env_pid}/children") as f:
                return threads, bool(f.read().split())
        except (OSError, StopIteration, ValueError):
            return 1, False  # it is gone: the next call will say how

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def kill(self) -> None:
        """SIGKILL the process group, then wait (at most KILL_WAIT_S) until every process is gone."""
        if not self.alive:
            return
        self.alive = False
        try:  # always the group too, even when the leader already exited (orphans keep the pgid)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        deadline = time.monotonic() + KILL_WAIT_S
        try:
            self.proc.wait(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:  # stuck in the kernel; Popen reaps it later
            pass
        while not _gone(self.env_pid) and time.monotonic() < deadline:
            time.sleep(0.001)
        self.channel.close()
        self._release()

    def _release(self) -> None:
        with _uid_lock:
            _live_uids.discard(self.uid)


def start_error(exc: SandboxError, code: int | None) -> EnvLoadError:
    """The EnvLoadError that a failed start-up becomes (load errors pass through unchanged)."""
    if isinstance(exc, EnvLoadError):
        return exc
    detail = "" if code is None else f" (exit code {code})"
    return EnvLoadError(f"loading the environment failed: {exc}{detail}")
