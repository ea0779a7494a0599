"""Child side: the kernel layers a sandbox child applies to itself before it loads any source.

In order (the order matters; the comments in `harden` say why):

    rlimits       address space (current size + budget), CPU seconds, open files, file size, no
                  core; and first in line for the OOM killer (oom_score_adj 1000)
    userns        a user namespace (without root), so the namespaces below need no privilege;
                  every capability in it is dropped again before the environment loads
    netns         an empty network namespace: no interface, not even loopback
    ipcns         a private IPC namespace: no SysV or POSIX IPC object shared with anyone
    pidns         a private PID namespace: the environment is pid 1 of its own namespace and
                  cannot name the trainer, a sibling, or any host process (a small waiter
                  process outside it relays the exit status)
    mntns         a mount namespace whose root is a read-only tmpfs holding only what landlock
                  lets it read (rootfs.py): no host path, no /proc, no /sys, so stat() tells
                  nothing of the host's processes, of its siblings' threads or of file sizes
    uid           as root: a uid/gid of its own from a reserved range, no groups
    pdeathsig     SIGKILL when the parent dies (set after the uid change, which clears it)
    no_new_privs  required by landlock and seccomp
    landlock      read the standard library (not site-packages), the worker's own files and
                  tooluse.py; write nothing; no TCP; no signals or abstract unix sockets
                  aimed outside the sandbox
    seccomp       an allowlist of the syscalls the worker needs (syscalls.py); everything else
                  fails with EPERM

With "probe" every layer is tried and the ones that worked are reported; otherwise exactly the
layers the parent asked for are applied, and any failure stops the child before it loads code.
"""
import ctypes
import os
import resource
import signal
import sys

import rootfs  # next to this file; the worker puts this folder on sys.path to import us
import syscalls

LAYERS = ("rlimits", "userns", "netns", "ipcns", "pidns", "mntns", "uid", "pdeathsig",
          "no_new_privs", "landlock", "seccomp")
CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWIPC, CLONE_NEWPID = 0x10000000, 0x40000000, 0x08000000, \
    0x20000000
CLONE_NEWNS = 0x00020000
HIDDEN = ("site-packages", "dist-packages")  # inside the standard library, never readable
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = ctypes.c_long


class LayerError(Exception):
    """A layer the parent asked for could not be applied here."""


def _ok(rc: int, what: str) -> None:
    if rc < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def set_rlimits(cfg: dict) -> None:
    with open("/proc/self/status") as f:
        vm_kb = next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))
    # Budget on top of the current size: an absolute cap would break a large interpreter's mmaps.
    address_space = vm_kb * 1024 + cfg["memory_mb"] * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    # SIGKILL at the limit: SIGXCPU would be ignored by pid 1 of a pid namespace.
    resource.setrlimit(resource.RLIMIT_CPU, (cfg["cpu_s"], cfg["cpu_s"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (cfg["max_open_files"],) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (cfg["file_size_mb"] * 2**20,) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # Many children may each fill their budget at once: the OOM killer must take them first.
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")


def unshare(flag: int) -> None:
    _ok(_LIBC.unshare(flag), "unshare")


def enter_user_namespace() -> None:
    """A user namespace that maps only our own uid and gid (setgroups denied, as it must be)."""
    uid, gid = os.getuid(), os.getgid()
    unshare(CLONE_NEWUSER)
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                       ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def drop_capabilities() -> None:
    """Empty every capability set (the user namespace gave us all of them inside it)."""
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable x 2 words: all zero
    _ok(_LIBC.capset(header, data), "capset")


def drop_uid(uid: int) -> None:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def prctl(option: int, arg: int) -> None:
    _ok(_LIBC.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), "prctl")


def fork_into_pid_namespace(trainer_pid: int) -> None:
    """Fork after unshare(CLONE_NEWPID): the child is pid 1 there and returns; this process
    stays outside as the waiter, dies with the trainer, and mirrors the child's end."""
    pid = os.fork()
    if pid == 0:
        return
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != trainer_pid:
        os._exit(3)  # the trainer died before the death signal was armed
    os.closerange(3, 1 << 16)  # the pipes stay with the child alone: its end is our end
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        os.kill(os.getpid(), os.WTERMSIG(status))  # SIG_DFL everywhere here: this ends us too
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def visible_paths(cfg: dict) -> tuple[list[str], list[str]]:
    """What the environment may read: the standard library (less the HIDDEN folders in it, the
    second list), the worker's own files and tooluse.py (for tracebacks), /dev/null and
    /dev/urandom."""
    stdlib = os.path.dirname(os.__file__)
    here = os.path.dirname(os.path.abspath(__file__))
    files = [os.path.join(here, name) for name in ("worker.py", "draws.py", "kernel.py", "syscalls.py",
                                                   "rootfs.py")]
    return ([stdlib, *files, cfg["tooluse_path"], "/dev/null", "/dev/urandom"],
            [os.path.join(stdlib, name) for name in HIDDEN])


def read_paths(cfg: dict) -> list[str]:
    """`visible_paths` as landlock rules: the standard library entry by entry, less HIDDEN."""
    (stdlib, *rest), _ = visible_paths(cfg)
    return [os.path.join(stdlib, name) for name in sorted(os.listdir(stdlib))
            if name not in HIDDEN] + rest


def landlock_ruleset(paths: list[str]) -> int:
    """A ruleset fd: read (never write) `paths`, no TCP, signals and abstract sockets scoped.
    Built while we may still traverse e.g. /root; enforced later by `landlock_restrict`."""
    create, add_rule = 444, 445  # the same numbers on every architecture
    syscall = _LIBC.syscall
    abi = syscall(ctypes.c_long(create), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    _ok(abi, "landlock_create_ruleset")
    fs_all = (1 << 13) - 1 | (1 << 13 if abi >= 2 else 0) | (1 << 14 if abi >= 3 else 0)
    fs_all |= 1 << 15 if abi >= 5 else 0
    read_dir, read_file = 1 | 4 | 8, 1 | 4  # execute, read file (, read dir)
    # Handling TCP bind/connect with no port rules denies them all; scoping blocks signals and
    # abstract unix sockets aimed outside the sandbox (the trainer, a sibling).
    attr = _RulesetAttr(fs_all, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = syscall(ctypes.c_long(create), ctypes.byref(attr), ctypes.c_size_t(size), 0)
    _ok(ruleset, "landlock_create_ruleset")
    for path in paths:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue  # a missing path simply gets no rule
        try:
            rule = _PathBeneath(read_dir if os.path.isdir(path) else read_file, fd)
            _ok(syscall(ctypes.c_long(add_rule), ruleset, 1, ctypes.byref(rule), 0),
                "landlock_add_rule")
        finally:
            os.close(fd)
    return ruleset


def landlock_restrict(ruleset: int) -> None:
    try:
        _ok(_LIBC.syscall(ctypes.c_long(446), ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def import_pyseccomp(cfg: dict):
    """pyseccomp lives in site-packages, which -s -S keeps off sys.path: borrow it briefly."""
    if not cfg["seccomp_dir"]:
        raise OSError("pyseccomp or libseccomp is not installed")
    # The parent already resolved the libraries: a stand-in for ctypes.util spares the import of
    # subprocess (half of pyseccomp's import time) and the ldconfig run of find_library.
    stand_in = type(sys)("ctypes.util")
    stand_in.find_library = cfg["libs"].get
    sys.modules["ctypes.util"], ctypes.util = stand_in, stand_in
    sys.path.insert(0, cfg["seccomp_dir"])
    try:
        import pyseccomp
        return pyseccomp
    except (ImportError, RuntimeError) as exc:  # no usable libseccomp on this machine
        raise OSError(str(exc)) from None
    finally:
        sys.path.remove(cfg["seccomp_dir"])
        del sys.modules["ctypes.util"], ctypes.util


def harden(cfg: dict) -> list[str]:
    """Apply the layers (all that work, with "probe"); return the ones applied, in order."""
    wanted = set(LAYERS) if cfg["probe"] else set(cfg["layers"])
    done: list[str] = []

    def attempt(name: str, apply, record: bool = True):
        """Apply one step of a layer; `record=False` for a step that is not its last."""
        if name not in wanted:
            return None
        try:
            result = apply()
        except (OSError, ValueError, RuntimeError) as exc:
            if not cfg["probe"]:
                raise LayerError(f"{name}: {exc}") from None
            wanted.discard(name)
            if name in done:
                done.remove(name)
            return None
        if record:
            done.append(name)
        return result

    root = os.geteuid() == 0
    seccomp = attempt("seccomp", lambda: import_pyseccomp(cfg), record=False)
    ruleset = attempt("landlock", lambda: landlock_ruleset(read_paths(cfg)), record=False)
    attempt("rlimits", lambda: set_rlimits(cfg))
    if not root:  # the namespaces below need a user namespace first
        attempt("userns", enter_user_namespace)
    for name, flag in (("netns", CLONE_NEWNET), ("ipcns", CLONE_NEWIPC), ("pidns", CLONE_NEWPID)):
        attempt(name, lambda flag=flag: unshare(flag))  # each needs root or the user namespace
    attempt("mntns", lambda: unshare(CLONE_NEWNS), record=False)
    attempt("mntns", lambda: rootfs.enter(*visible_paths(cfg)))  # before capabilities go
    if "userns" in done:
        attempt("userns", drop_capabilities, record=False)
    if root and cfg["uid"] is not None:
        attempt("uid", lambda: drop_uid(cfg["uid"]))  # after the unshares, which needed root
    if "pidns" in done:
        attempt("pidns", lambda: fork_into_pid_namespace(cfg["ppid"]), record=False)
    attempt("pdeathsig", lambda: prctl(PR_SET_PDEATHSIG, signal.SIGKILL))  # after the uid change
    if "pidns" not in done and os.getppid() != cfg["ppid"]:
        os._exit(3)  # the parent died before the death signal was armed
    attempt("no_new_privs", lambda: prctl(PR_SET_NO_NEW_PRIVS, 1))  # landlock and seccomp need it
    if ruleset is not None:
        attempt("landlock", lambda: landlock_restrict(ruleset))
    if seccomp is not None:  # last: it forbids unshare, prctl and fork, which came before
        attempt("seccomp", lambda: syscalls.install(seccomp, os.getpid()))
    return done
