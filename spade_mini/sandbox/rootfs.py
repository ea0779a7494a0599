"""Child side: a root file system that holds only what an environment may read (layer "mntns").

Landlock decides what a child may open, but not what it may stat(): without this layer a child
can list the host's pids (the trainer's too) by stat("/proc/<pid>"), read any process's thread
count from the link count of /proc/<pid>/task (a channel between two sandboxes), and learn the
size of any file (a held-out environment's). In a mount namespace of its own the child builds
a small read-only tmpfs, binds into it, read-only and at their own paths, exactly what landlock
lets it read (the standard library without site-packages, the worker's files, tooluse.py,
/dev/null and /dev/urandom), and makes it its root: the host's tree, /proc and /sys included,
is detached. Paths the environment cannot see it cannot stat.

Called by kernel.harden after the namespaces are unshared and before capabilities or the uid
are dropped (mounting needs them). Sources are bound through /proc/self/fd, so they may lie
below the directory the tmpfs covers.
"""
import ctypes
import os
import platform

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME, MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
MNT_DETACH = 2
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41}  # glibc has no wrapper
SCRATCH = ("/tmp", "/mnt", "/var/tmp", "/dev")  # the first that exists carries the new root
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = ctypes.c_long


def _ok(rc: int, what: str) -> None:
    if rc < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _ok(_LIBC.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
        f"mount {target}")


def kept_flags(path: str) -> int:
    """The flags of the mount `path` lies on that a read-only bind of it must keep (in a user
    namespace they are locked, and a remount that drops one fails)."""
    f = os.statvfs(path).f_flag
    flags = MS_RDONLY | sum(ms for st, ms in ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV),
                                             (os.ST_NOEXEC, MS_NOEXEC)) if f & st)
    if f & os.ST_NOATIME:
        flags |= MS_NOATIME
    elif not f & os.ST_RELATIME:
        flags |= MS_STRICTATIME
    return flags | (MS_NODIRATIME if f & os.ST_NODIRATIME else 0)


def bind(source_fd: int, target: str, is_dir: bool) -> None:
    """Bind what `source_fd` names at `target` (created empty first), read-only."""
    if is_dir:
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
    source = f"/proc/self/fd/{source_fd}"
    flags = kept_flags(source)
    mount(source, target, None, MS_BIND | MS_REC)
    mount(None, target, None, MS_BIND | MS_REMOUNT | flags)


def enter(paths: list[str], hidden: list[str]) -> None:
    """Make a read-only tmpfs holding `paths` (at their own paths) this mount namespace's root;
    an empty directory covers each of `hidden` (which lie inside a bound directory)."""
    number = PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(f"pivot_root: no syscall number known for {platform.machine()}")
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount reaches the host
    fds = []
    for path in paths:  # opened before the tmpfs may cover them
        try:
            fds.append((path, os.open(path, os.O_PATH | os.O_CLOEXEC)))
        except OSError:
            continue  # a missing path is simply not there
    new = next(d for d in SCRATCH if os.path.isdir(d))
    mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,nr_inodes=256,mode=0755")
    try:
        for path, fd in fds:
            bind(fd, new + path, os.path.isdir(f"/proc/self/fd/{fd}"))
    finally:
        for _, fd in fds:
            os.close(fd)
    for path in hidden:
        if os.path.isdir(new + path):
            mount("tmpfs", new + path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k")
    os.chdir(new)
    _ok(_LIBC.syscall(ctypes.c_long(number), b".", b"."), "pivot_root")
    _ok(_LIBC.umount2(b".", MNT_DETACH), "umount the host's tree")
    os.chdir("/")
    mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
