"""Run generated environment source in a restricted child process (the sandbox of SPADE).

The designer writes Python environments; this module is the only place they run. `SandboxedEnv`
is a `gymnasium.Env` with text spaces that forwards reset/step/hint to ONE persistent child
(`sandbox_worker.py`) over a line-based JSON protocol on private pipes; `validate_env` runs the
checks a design must pass before anyone plays it.

Covered (each layer is applied by the child to itself before the environment's code is loaded,
degrades gracefully where the kernel or privileges lack it, and is listed in `.layers`):
  * hangs, including C-level loops and SIGTERM-ignoring code: a per-call wall timeout enforced
    here with poll(); on timeout the whole process group is SIGKILLed and reaped;
  * memory, CPU, open files, file size, core dumps: rlimits;
  * fork/exec/setsid escapes, ptrace, namespaces, bpf, io_uring, non-unix sockets, signals to
    other processes: seccomp (and landlock's signal scope);
  * network: an empty network namespace, seccomp's socket rule, landlock's TCP rule;
  * files: landlock (read the stdlib and the worker dir, write only a fresh temp dir);
  * the trainer's secrets and /proc: a minimal environment dict, an unprivileged uid (as root),
    landlock;
  * the trainer dying: PDEATHSIG kills the child (it tracks the spawning *thread*, so create
    sandboxes from a long-lived thread);
  * broken or hostile replies: request ids, a byte cap, strict types, finite rewards, truncation.
Lifecycle: after any error the child is killed; after a call that left extra threads running it
is replaced at the next reset(), so a spinning thread costs one episode at most. `options` in
reset() is accepted for gymnasium and ignored.
Not covered: kernel exploits (that needs a VM or gVisor), side channels, the CPU a spinning
environment steals until its timeout, and determinism across processes (string hashing is
randomised per child). The import allowlist in the worker is for readable errors only: it is
not a security boundary. Untrusted code never runs in this process and never on a thread here.
"""
import ast
import ctypes.util
import functools
import importlib.util
import json
import os
import select
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field

import gymnasium

WORKER_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_worker.py")
NOBODY_UID = 65534


@dataclass(frozen=True)
class SandboxLimits:
    call_timeout_s: float = 5.0
    """Wall-clock limit for one reset/step/hint call."""
    load_timeout_s: float = 10.0
    """Wall-clock limit for starting the child and loading the environment source."""
    cpu_s: int = 60
    """CPU seconds over the child's lifetime (SIGXCPU, then SIGKILL 2 s later)."""
    memory_mb: int = 1024
    """Address space the environment may add on top of the child interpreter."""
    max_open_files: int = 64
    """RLIMIT_NOFILE: descriptors the child may hold, the interpreter's own included."""
    file_size_mb: int = 16
    """RLIMIT_FSIZE: the largest file the environment may write in its temp dir."""
    max_obs_chars: int = 20_000
    """Observations (and info strings) are truncated to this length inside the child."""
    max_hint_chars: int = 4_000
    """hint() text is truncated to this length inside the child."""
    max_action_chars: int = 20_000
    """Actions are truncated to this length before they are sent."""
    max_reply_bytes: int = 4 * 2**20
    """A reply line longer than this is refused (the child checks first, the parent enforces)."""


class SandboxError(Exception):
    """Anything that went wrong running an environment; the environment, never the trainer."""


class EnvLoadError(SandboxError):
    """The source did not load: syntax, forbidden import, no single *Env class, constructor."""

    def __init__(self, message: str, traceback: str = ""):
        super().__init__(message)
        self.traceback = traceback


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


@functools.cache
def _seccomp_config() -> tuple[str | None, dict]:
    """Where the child can import pyseccomp from, and the libraries it loads (resolved once)."""
    spec = importlib.util.find_spec("pyseccomp")
    if spec is None or spec.origin is None:
        return None, {}
    libs = {name: ctypes.util.find_library(name) for name in ("c", "seccomp")}
    return (os.path.dirname(spec.origin) if libs["seccomp"] else None), libs


_TEXT = dict(min_length=0, charset=string.printable)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not allowed in a reply")


def _check_shape(value, types: tuple) -> bool:
    """Replies are untrusted data (the env can forge one): check them before unpacking."""
    if len(types) == 1:
        return type(value) is types[0]
    return (isinstance(value, list) and len(value) == len(types)
            and all(type(v) is t for v, t in zip(value, types)))


class SandboxedEnv(gymnasium.Env):
    """A generated environment running in its own hardened child process."""

    metadata = {"render_modes": []}

    def __init__(self, source: str, *, limits: SandboxLimits | None = None):
        self.source = source
        self.limits = limits or SandboxLimits()
        self.observation_space = gymnasium.spaces.Text(self.limits.max_obs_chars, **_TEXT)
        self.action_space = gymnasium.spaces.Text(self.limits.max_action_chars, **_TEXT)
        self.tag = uuid.uuid4().hex  # in the child's environ, so tests can find strays
        self.layers: list[str] = []
        self.class_name: str | None = None
        self.has_hint = False
        self.notes: list[str] = []  # non-fatal coercions in the last reply ("reward was a bool")
        self.restarts = 0
        self._proc: subprocess.Popen | None = None
        self._recycle = False
        self._spawn()

    # ---- lifecycle ----
    def _spawn(self) -> None:
        self._tempdir = tempfile.mkdtemp(prefix="spade_sandbox_")
        with open(os.path.join(self._tempdir, "env_source.py"), "w") as f:
            f.write(self.source)
        root = os.geteuid() == 0
        if root:  # the child drops to nobody and must still own its scratch dir
            os.chown(self._tempdir, NOBODY_UID, NOBODY_UID)
            os.chmod(os.path.join(self._tempdir, "env_source.py"), 0o644)
        req_r, self._req_w = os.pipe()
        self._rep_r, rep_w = os.pipe()
        os.set_blocking(self._req_w, False)
        seccomp_dir, libs = _seccomp_config()
        stdlib = os.path.dirname(os.__file__)
        cfg = {"request_fd": req_r, "reply_fd": rep_w, "tempdir": self._tempdir,
               "seccomp_dir": seccomp_dir, "libs": libs, "uid": NOBODY_UID if root else None,
               "ppid": os.getpid(), "read_paths": [stdlib, os.path.dirname(WORKER_PATH),
                                                   "/dev/null", "/dev/urandom"],
               **{k: getattr(self.limits, k) for k in (
                   "cpu_s", "memory_mb", "max_open_files", "file_size_mb", "max_obs_chars",
                   "max_hint_chars", "max_reply_bytes")}}
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "SPADE_SANDBOX_TAG": self.tag}
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", WORKER_PATH, json.dumps(cfg)], env=env,
                cwd=self._tempdir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True, pass_fds=(req_r, rep_w))
        except OSError as exc:  # out of fds or processes in the trainer: nothing was started
            os.close(self._req_w)
            os.close(self._rep_r)
            shutil.rmtree(self._tempdir, ignore_errors=True)
            raise EnvLoadError(f"could not start the environment process: {exc}") from exc
        finally:
            os.close(req_r)
            os.close(rep_w)
        self._buf = b""
        self._next_id = 1
        self._recycle = False
        self._poll = select.poll()
        self._poll.register(self._rep_r, select.POLLIN)
        self._wpoll = select.poll()
        self._wpoll.register(self._req_w, select.POLLOUT)
        try:
            ready = self._read_reply(0, self.limits.load_timeout_s)
        except SandboxError as exc:
            self._terminate()
            if isinstance(exc, EnvLoadError):
                raise
            raise EnvLoadError(f"loading the environment failed: {exc}") from exc
        if not isinstance(ready, dict):
            self._terminate()
            raise EnvLoadError("malformed start-up reply from the environment process")
        self.layers = [str(x) for x in ready.get("layers", [])]
        self.class_name = str(ready.get("class_name"))
        self.has_hint = ready.get("has_hint") is True
        self._base_threads = self._threads

    def _terminate(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:  # always the group too, even when the leader already exited (orphans keep the pgid)
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.kill()
        proc.wait()
        os.close(self._req_w)
        os.close(self._rep_r)
        shutil.rmtree(self._tempdir, ignore_errors=True)

    def close(self) -> None:
        self._terminate()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        if getattr(self, "_proc", None) is not None:
            self._terminate()

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    # ---- protocol ----
    def _read_reply(self, req_id: int, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        cap = self.limits.max_reply_bytes + 4096
        while b"\n" not in self._buf:
            if len(self._buf) > cap:
                raise EnvProtocolError(f"reply longer than {cap} bytes")
            left = deadline - time.monotonic()
            if left <= 0:
                raise EnvTimeout(f"no reply within {timeout_s:.1f} s")
            if not self._poll.poll(left * 1000):
                continue
            chunk = os.read(self._rep_r, 1 << 16)
            if not chunk:
                code = self._proc.poll() if self._proc else None
                raise EnvCrashed("the environment process exited" if code is None else
                                 f"the environment process exited (code {code})")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            msg = json.loads(line, parse_constant=_reject_constant)  # no NaN/Infinity, even forged
        except ValueError:
            raise EnvProtocolError("malformed reply from the environment process") from None
        if not isinstance(msg, dict) or msg.get("id") != req_id or "ok" not in msg:
            raise EnvProtocolError("reply out of sequence (forged or stale line)")
        if type(msg.get("threads")) is not int or not isinstance(msg.get("notes", []), list):
            raise EnvProtocolError("malformed reply from the environment process")
        self._threads = msg["threads"]
        if not msg["ok"]:
            kind, text, tb = msg.get("kind"), str(msg.get("message")), str(msg.get("traceback"))
            if kind == "load":
                raise EnvLoadError(text, tb)
            if kind == "protocol":
                raise EnvProtocolError(text)
            raise EnvRuntimeError(text, tb)
        self.notes = [str(n) for n in msg.get("notes", [])]
        return msg["value"]

    def _write(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                raise EnvTimeout("the environment process stopped reading requests")
            self._wpoll.poll(left * 1000)
            try:
                view = view[os.write(self._req_w, view):]
            except BlockingIOError:
                continue
            except BrokenPipeError:
                raise EnvCrashed("the environment process exited") from None

    def _call(self, op: str, shape: tuple, **args):
        if self._proc is None:
            raise SandboxError("the environment process is not running; call reset() first")
        req_id, self._next_id = self._next_id, self._next_id + 1
        timeout_s = self.limits.call_timeout_s
        try:
            line = json.dumps({"id": req_id, "op": op, **args}) + "\n"
            self._write(line.encode(), time.monotonic() + timeout_s)
            value = self._read_reply(req_id, timeout_s)
            if not _check_shape(value, shape):
                raise EnvProtocolError(f"malformed {op} reply from the environment process")
        except SandboxError:
            self._terminate()  # after any error the child is suspect: restart at the next reset
            raise
        if self._threads > self._base_threads:  # a thread left running would slow later steps
            self._recycle = True
        return value

    # ---- gymnasium API ----
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if self._proc is None or self._recycle:
            self._terminate()
            self.restarts += 1
            self._spawn()
        obs, info = self._call("reset", (str, dict), seed=seed)
        return obs, info

    def step(self, action: str):
        obs, reward, terminated, truncated, info = self._call(
            "step", (str, float, bool, bool, dict),
            action=str(action)[: self.limits.max_action_chars])
        return obs, reward, terminated, truncated, info

    def hint(self) -> str:
        if not self.has_hint:
            raise SandboxError("the environment defines no hint()")
        return self._call("hint", (str,))


@dataclass
class Validation:
    ok: bool
    reasons: list[str] = field(default_factory=list)
    class_name: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    has_hint: bool = False


PROBE_ACTIONS = ("\\boxed{1}", "\\boxed{test}", "\\boxed{42}", "",
                 '<tool_call>{"name": "probe", "arguments": {}}</tool_call>')
REWARD_RANGE = (-10.0, 10.0)


def _static_check(source: str) -> list[str]:
    try:
        tree = ast.parse(source)  # parsing is not executing: safe in the trainer
    except SyntaxError as exc:
        return [f"syntax error on line {exc.lineno}: {exc.msg}"]
    names = [n.name for n in tree.body if isinstance(n, ast.ClassDef)
             and n.name.endswith("Env") and n.name != "ToolUseEnv"]
    if len(names) != 1:
        return [f"expected exactly one top-level class whose name ends in 'Env', found "
                f"{len(names)}" + (f" ({', '.join(names)})" if names else "")]
    return []


def validate_env(source: str, *, limits: SandboxLimits | None = None, max_turns: int = 25,
                 time_budget_s: float = 30.0) -> Validation:
    """Load, reset, probe and play one episode of `source`; say why it fails, if it does."""
    result = Validation(ok=False, reasons=_static_check(source))
    if result.reasons:
        return result
    start = time.monotonic()
    phase = "load"
    reasons = result.reasons

    def mark(name: str) -> None:
        nonlocal phase
        result.timings[phase] = time.monotonic() - start - sum(result.timings.values())
        if time.monotonic() - start > time_budget_s:
            raise EnvTimeout(f"validation exceeded its {time_budget_s:.0f} s budget")
        phase = name

    env = None
    try:
        env = SandboxedEnv(source, limits=limits)
        result.class_name, result.has_hint = env.class_name, env.has_hint
        mark("reset")
        first, _ = env.reset(seed=1)
        env.reset(seed=2)
        again, _ = env.reset(seed=1)
        if again != first:
            reasons.append("reset(seed=1) twice gave different first observations; "
                           "use random.Random(seed) for all randomness")
        mark("probe")
        for action in PROBE_ACTIONS:
            env.reset(seed=0)
            _, reward, _, _, _ = env.step(action)
            if "reward was a bool" in env.notes:
                reasons.append(f"step({action!r}) returned a bool reward; return a float")
            if not REWARD_RANGE[0] <= reward <= REWARD_RANGE[1]:
                reasons.append(f"step({action!r}) returned reward {reward}, outside [-10, 10]")
        mark("episode")
        env.reset(seed=3)
        for turn in range(max_turns):
            _, _, terminated, truncated, _ = env.step(PROBE_ACTIONS[turn % len(PROBE_ACTIONS)])
            if terminated or truncated:
                break
        else:
            reasons.append(f"an episode of repeated probe actions did not end within "
                           f"{max_turns} turns; set truncated=True at the turn limit")
        mark("hint")
        if env.has_hint:
            env.reset(seed=0)
            env.hint()
        mark("done")
    except SandboxError as exc:
        reasons.append(f"{phase}: {type(exc).__name__}: {exc}")
        tb = getattr(exc, "traceback", "")
        if tb:
            reasons.append("traceback (last lines): " + " | ".join(tb.strip().splitlines()[-3:]))
    finally:
        if env is not None:
            env.close()
    result.ok = not reasons
    return result
