"""Child side of the sandbox: harden this process, load one environment, serve it over pipes.

Started by `sandbox.SandboxedEnv` as `python -I -S sandbox_worker.py CONFIG_JSON`. Before any
environment code runs, the process applies every isolation layer it can (each one optional, so the
worker still runs where a kernel feature is missing) and reports which ones are active:

    rlimits       address space (current size + budget), CPU seconds, open files, file size, no core
    netns         a fresh, empty network namespace (root only)
    uid           drop to an unprivileged uid/gid (root only)
    pdeathsig     SIGKILL when the parent dies (set after the uid change, which clears it)
    no_new_privs  required by landlock and seccomp
    landlock      read the stdlib and this directory, write only the temp dir, no TCP, no signals
                  or abstract unix sockets outside the sandbox
    seccomp       no fork, exec, setsid, ptrace, non-unix sockets, namespaces, bpf, io_uring, ...

Protocol: one JSON object per line. Requests {"id", "op", ...} arrive on the request fd; replies
{"id", "ok", "value" | "kind"+"message"+"traceback", "threads", "notes"} go to the reply fd.
stdout/stderr are /dev/null, so nothing the environment prints can reach the parent.

The import allowlist below only gives early, readable errors; it is NOT a security boundary
(frames, `__subclasses__` and module attributes reach everything). The kernel layers are.
"""
import ctypes
import json
import math
import os
import resource
import sys
import traceback

ALLOWED_IMPORTS = frozenset({
    "__future__", "abc", "array", "bisect", "cmath", "collections", "copy", "dataclasses", "datetime",
    "decimal", "difflib", "enum", "fractions", "functools", "hashlib", "heapq", "itertools", "json",
    "math", "numbers", "operator", "pprint", "random", "re", "statistics", "string",
    "textwrap", "typing", "unicodedata", "tooluse",
})
# Imported before the uid drop: afterwards the interpreter may not be able to read its own stdlib.
PRELOAD = sorted(ALLOWED_IMPORTS - {"tooluse"}) + ["collections.abc", "inspect", "types"]
ENV_MODULE = "sandboxed_env"
_LIBC = ctypes.CDLL(None, use_errno=True)


# ---- hardening ---------------------------------------------------------------------------------

def set_rlimits(cfg: dict) -> None:
    with open("/proc/self/status") as f:
        vm_kb = next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))
    # Budget on top of the current size: an absolute cap would break a large interpreter's mmaps.
    address_space = vm_kb * 1024 + cfg["memory_mb"] * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    # soft < hard: SIGXCPU first (default action kills), SIGKILL if the env ignores it.
    resource.setrlimit(resource.RLIMIT_CPU, (cfg["cpu_s"], cfg["cpu_s"] + 2))
    resource.setrlimit(resource.RLIMIT_NOFILE, (cfg["max_open_files"],) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (cfg["file_size_mb"] * 2**20,) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def unshare_network() -> bool:
    return _LIBC.unshare(0x40000000) == 0  # CLONE_NEWNET; refused without CAP_SYS_ADMIN


def drop_privileges(uid: int) -> None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def prctl(option: int, arg: int) -> bool:
    return _LIBC.prctl(option, ctypes.c_ulong(arg), 0, 0, 0) == 0


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def open_paths(paths: list[str]) -> list[tuple[int, bool]]:
    """O_PATH fds for landlock rules, opened while we may still traverse e.g. /root."""
    fds = []
    for path in paths:
        try:
            fds.append((os.open(path, os.O_PATH | os.O_CLOEXEC), os.path.isdir(path)))
        except OSError:
            pass  # a missing path simply gets no rule
    return fds


def landlock(read_fds: list[tuple[int, bool]], write_fds: list[tuple[int, bool]]) -> bool:
    create, add_rule, restrict = 444, 445, 446  # same numbers on every architecture
    syscall = _LIBC.syscall
    syscall.restype = ctypes.c_long
    abi = syscall(ctypes.c_long(create), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        return False
    fs_all = (1 << 13) - 1 | (1 << 13 if abi >= 2 else 0) | (1 << 14 if abi >= 3 else 0)
    fs_all |= 1 << 15 if abi >= 5 else 0
    file_only = 1 | 2 | 4 | (1 << 14) | (1 << 15)  # execute, write, read, truncate, ioctl
    read = 1 | 4 | 8  # execute, read file, read dir
    # Handling TCP bind/connect with no port rules denies them all; scoping blocks signals and
    # abstract unix sockets aimed outside the sandbox (the trainer).
    attr = _RulesetAttr(fs_all, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = syscall(ctypes.c_long(create), ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if ruleset < 0:
        return False
    try:
        for fds, access in ((read_fds, read), (write_fds, fs_all)):
            for fd, is_dir in fds:
                rule = _PathBeneath(access if is_dir else access & file_only, fd)
                if syscall(ctypes.c_long(add_rule), ruleset, 1, ctypes.byref(rule), 0) != 0:
                    return False
        return syscall(ctypes.c_long(restrict), ruleset, 0) == 0
    finally:
        os.close(ruleset)


def seccomp(sc) -> None:
    eperm = sc.ERRNO(1)
    f = sc.SyscallFilter(defaction=sc.ALLOW)
    denied = ["fork", "vfork", "execve", "execveat", "setsid", "setpgid", "ptrace",
              "process_vm_readv", "process_vm_writev", "unshare", "setns", "mount", "umount2",
              "pivot_root", "chroot", "bpf", "io_uring_setup", "io_uring_enter",
              "io_uring_register", "userfaultfd", "keyctl", "add_key", "request_key",
              "perf_event_open", "pidfd_open", "pidfd_send_signal", "pidfd_getfd"]
    for name in denied:
        try:
            f.add_rule(eperm, name)
        except (ValueError, RuntimeError, OSError):  # syscall unknown on this architecture
            pass
    f.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, 0x10000, 0))  # no CLONE_THREAD: a process
    f.add_rule(sc.ERRNO(38), "clone3")  # ENOSYS: glibc falls back to clone, which we can inspect
    f.add_rule(eperm, "socket", sc.Arg(0, sc.NE, 1))  # only AF_UNIX
    pid = os.getpid()
    for name in ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
        f.add_rule(eperm, name, sc.Arg(0, sc.NE, pid))  # signals only to ourselves
    f.load()


def import_pyseccomp(cfg: dict):
    """pyseccomp lives in site-packages, which -I -S keeps off sys.path: borrow it briefly."""
    if not cfg["seccomp_dir"]:
        return None
    import ctypes.util
    find = ctypes.util.find_library
    # The parent already resolved the libraries; skip the ldconfig subprocess find_library runs.
    ctypes.util.find_library = lambda name: cfg["libs"].get(name) or find(name)
    sys.path.insert(0, cfg["seccomp_dir"])
    try:
        import pyseccomp
        return pyseccomp
    except (ImportError, OSError, RuntimeError):  # no libseccomp on this machine
        return None
    finally:
        sys.path.remove(cfg["seccomp_dir"])
        ctypes.util.find_library = find


def harden(cfg: dict) -> list[str]:
    """Apply every layer this kernel and these privileges allow; the order matters (comments)."""
    layers = []

    def layer(name: str, apply) -> None:
        try:
            if apply() is not False:
                layers.append(name)
        except (OSError, ValueError, RuntimeError):  # unavailable here: degrade, keep going
            pass

    sc = import_pyseccomp(cfg)
    read_fds, write_fds = open_paths(cfg["read_paths"]), open_paths([cfg["tempdir"]])
    layer("rlimits", lambda: set_rlimits(cfg))
    layer("netns", unshare_network)  # needs root: before the uid drop
    if cfg["uid"] is not None and os.geteuid() == 0:
        layer("uid", lambda: drop_privileges(cfg["uid"]))
    layer("pdeathsig", lambda: prctl(1, 9))  # PR_SET_PDEATHSIG: after the uid drop clears it
    if os.getppid() != cfg["ppid"]:
        os._exit(3)  # the parent died before pdeathsig was armed
    layer("no_new_privs", lambda: prctl(38, 1))  # PR_SET_NO_NEW_PRIVS: landlock needs it
    layer("landlock", lambda: landlock(read_fds, write_fds))
    for fd, _ in read_fds + write_fds:
        os.close(fd)
    if sc is not None:  # last: it forbids unshare, which netns needed
        layer("seccomp", lambda: seccomp(sc))
    return layers


# ---- serving -----------------------------------------------------------------------------------

class ProtocolViolation(Exception):
    """The environment returned something outside the contract (wrong shape or type)."""


def json_safe(x, limit: int, depth: int = 0):
    if x is None or type(x) is bool:
        return x
    if type(x) is int:  # huge ints would hit int->str limits while serialising
        return x if -2**63 <= x < 2**63 else "<int too large>"
    if type(x) is float:
        return x if math.isfinite(x) else repr(x)
    if isinstance(x, str):
        return str.__str__(x)[:limit]
    if depth > 20:
        return "<too deep>"
    if type(x) in (list, tuple):
        return [json_safe(v, limit, depth + 1) for v in list(x)[:1000]]
    if type(x) is dict:
        items = list(dict.items(x))[:1000]
        return {(k if type(k) is str else repr(k))[:200]: json_safe(v, limit, depth + 1)
                for k, v in items}
    return repr(x)[:200]


def check_reward(r, notes: list[str]) -> float:
    if type(r) is bool:
        notes.append("reward was a bool")
        return float(r)
    if type(r) not in (int, float):
        raise ProtocolViolation(f"reward must be a float, got {type(r).__name__}")
    try:
        value = float(r)
    except OverflowError:
        raise ProtocolViolation("reward is too large for a float") from None
    if not math.isfinite(value):
        raise ProtocolViolation(f"reward must be finite, got {value!r}")
    return value


def check_obs(obs, limit: int, what: str = "observation") -> str:
    if not isinstance(obs, str):
        raise ProtocolViolation(f"{what} must be a str, got {type(obs).__name__}")
    return str.__str__(obs)[:limit]


def run_op(env, req: dict, cfg: dict, notes: list[str]):
    limit = cfg["max_obs_chars"]
    if req["op"] == "reset":
        out = env.reset(seed=req["seed"])
        if type(out) is not tuple or len(out) != 2:
            raise ProtocolViolation("reset must return a tuple (observation, info)")
        if type(out[1]) is not dict:
            raise ProtocolViolation(f"reset info must be a dict, got {type(out[1]).__name__}")
        return [check_obs(out[0], limit), json_safe(out[1], limit)]
    if req["op"] == "step":
        out = env.step(req["action"])
        if type(out) is not tuple or len(out) != 5:
            raise ProtocolViolation(
                "step must return a 5-tuple (observation, reward, terminated, truncated, info)")
        obs, reward, terminated, truncated, info = out
        for name, flag in (("terminated", terminated), ("truncated", truncated)):
            if type(flag) is not bool:
                raise ProtocolViolation(f"{name} must be a bool, got {type(flag).__name__}")
        if type(info) is not dict:
            raise ProtocolViolation(f"step info must be a dict, got {type(info).__name__}")
        return [check_obs(obs, limit), check_reward(reward, notes), terminated, truncated,
                json_safe(info, limit)]
    if req["op"] == "hint":
        return check_obs(env.hint(), cfg["max_hint_chars"], "hint")
    raise ProtocolViolation(f"unknown op {req['op']!r}")


def thread_count(status_fd: int) -> int:
    try:
        text = os.pread(status_fd, 8192, 0).decode()
        return int(text.split("Threads:")[1].split()[0])
    except (OSError, IndexError, ValueError):
        return 1 << 30  # the environment tampered with the fd: force a recycle


def load_env(path: str):
    import builtins
    import linecache
    real_import = builtins.__import__

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level != 0 or name.partition(".")[0] not in ALLOWED_IMPORTS:
            raise ImportError(f"import of {name!r} is not allowed in the sandbox "
                              f"(allowed: {', '.join(sorted(ALLOWED_IMPORTS))})")
        return real_import(name, globals, locals, fromlist, level)

    with open(path) as f:
        source = f.read()
    linecache.cache["<env>"] = (len(source), None, source.splitlines(True), "<env>")
    env_builtins = dict(builtins.__dict__, __import__=guarded_import)
    namespace = {"__name__": ENV_MODULE, "__builtins__": env_builtins}
    exec(compile(source, "<env>", "exec"), namespace)
    classes = [v for k, v in namespace.items() if isinstance(v, type) and k.endswith("Env")
               and v.__module__ == ENV_MODULE]
    if len(classes) != 1:
        names = ", ".join(c.__name__ for c in classes) or "none"
        raise ProtocolViolation(f"expected exactly one class whose name ends in 'Env', "
                                f"found {len(classes)} ({names})")
    return classes[0]()


def send(fd: int, msg: dict, cap: int) -> None:
    try:
        data = json.dumps(msg, allow_nan=False).encode()
        problem = f"reply of {len(data)} bytes exceeds the {cap}-byte cap" * (len(data) > cap)
    except (ValueError, TypeError) as exc:
        problem = f"reply is not serialisable: {exc}"
    if problem:
        data = json.dumps({"id": msg["id"], "ok": False, "kind": "protocol", "traceback": "",
                           "message": problem, "threads": msg["threads"]}).encode()
    view = memoryview(data + b"\n")
    while view:
        view = view[os.write(fd, view):]


def error_reply(req_id: int, kind: str, exc: BaseException, threads: int) -> dict:
    try:
        message = f"{type(exc).__name__}: {exc}"[:2000]
        tb = "" if kind == "protocol" else traceback.format_exc(limit=20)[-8000:]
    except Exception:  # an exception whose __str__ itself raises
        message, tb = type(exc).__name__, ""
    return {"id": req_id, "ok": False, "kind": kind, "message": message, "traceback": tb,
            "threads": threads}


def main() -> None:
    cfg = json.loads(sys.argv[1])
    for name in PRELOAD:
        __import__(name)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import tooluse  # noqa: F401  (stays in sys.modules for the environment's `import tooluse`)
    del sys.path[0]
    status_fd = os.open("/proc/self/status", os.O_RDONLY)  # /proc is closed off by landlock
    layers = harden(cfg)
    requests = os.fdopen(cfg["request_fd"], "rb")
    reply_fd, cap = cfg["reply_fd"], cfg["max_reply_bytes"]
    try:
        env = load_env(os.path.join(cfg["tempdir"], "env_source.py"))
        value = {"class_name": type(env).__name__, "layers": layers,
                 "has_hint": callable(getattr(env, "hint", None))}
        send(reply_fd, {"id": 0, "ok": True, "value": value, "threads": thread_count(status_fd)},
             cap)
    except BaseException as exc:  # anything the environment source does is reported, not fatal
        send(reply_fd, error_reply(0, "load", exc, thread_count(status_fd)), cap)
        return
    for line in requests:
        req = json.loads(line)
        notes: list[str] = []
        try:
            value = run_op(env, req, cfg, notes)
            msg = {"id": req["id"], "ok": True, "value": value, "notes": notes}
        except ProtocolViolation as exc:
            msg = error_reply(req["id"], "protocol", exc, 0)
        except BaseException as exc:  # SystemExit, MemoryError, RecursionError: all the env's
            msg = error_reply(req["id"], "runtime", exc, 0)
        msg["threads"] = thread_count(status_fd)
        send(reply_fd, msg, cap)


if __name__ == "__main__":
    main()
