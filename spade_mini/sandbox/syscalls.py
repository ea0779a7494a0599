"""Child side: the seccomp allowlist, the last layer a sandbox child installs on itself.

Default deny: a syscall that is not listed here fails with EPERM, so a syscall nobody thought
of (a new IPC, a new way to name another process) is denied too. The list is what the worker,
the allowed standard-library modules and tooluse.py were measured to call once the filter is
on (strace over every hand-written environment, the HumanEval checks and the benign sandbox
tests: 18 distinct syscalls), plus the few their error paths need (a thread's start and end,
a failing allocation, abort), grouped by purpose. Calls that name a process are allowed only
on this process; `clone` only for threads; `ioctl` only to ask whether a file is a terminal.
Denied on purpose, among others: fork/vfork/execve, every socket (unix ones too), SysV and
POSIX IPC, memfd_create, inotify/fanotify, fcntl (F_SETOWN would signal others), ptrace and
process_vm_*, prctl (so the death signal stays set), prlimit64/setpriority/sched_set*/getpgid
on anyone, unshare/setns/mount, bpf, io_uring, userfaultfd, perf_event_open, keyctl, pidfd_*.
"""
ALLOWED = (
    # memory: the allocator and thread stacks
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise",
    # descriptors we hold (the pipes), and files landlock lets us read (imports, tracebacks)
    "read", "write", "close", "lseek", "openat", "newfstatat", "fstat", "statx", "getdents64",
    # threads (clone is filtered below) and the locks between them
    "futex", "set_robust_list", "rseq", "gettid",
    # signal handling (a thread's start masks signals; sending them is filtered below)
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "restart_syscall",
    # time and randomness (clock_gettime is usually served without a syscall, by the vDSO)
    "clock_gettime", "clock_getres", "gettimeofday", "getrandom",
    # facts about ourselves: the worker re-checks its parent before each request
    "getpid", "getppid",
    # the end of a thread, of the process
    "exit", "exit_group",
)
CLONE_THREAD = 0x10000
TCGETS = 0x5401  # isatty(), which open() asks about every file it opens
ENOSYS, EPERM = 38, 1


def install(sc, own_pid: int) -> None:
    """Load the filter into this process (pyseccomp module `sc`; `own_pid` as seen from here)."""
    f = sc.SyscallFilter(defaction=sc.ERRNO(EPERM))
    for name in ALLOWED:
        try:
            f.add_rule(sc.ALLOW, name)
        except (ValueError, RuntimeError, OSError):  # not a syscall on this architecture
            pass
    f.add_rule(sc.ALLOW, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, CLONE_THREAD))
    f.add_rule(sc.ERRNO(ENOSYS), "clone3")  # glibc then falls back to clone, which we can inspect
    f.add_rule(sc.ALLOW, "ioctl", sc.Arg(1, sc.EQ, TCGETS))
    f.add_rule(sc.ALLOW, "kill", sc.Arg(0, sc.EQ, own_pid))  # signals to ourselves only (abort)
    f.add_rule(sc.ALLOW, "tgkill", sc.Arg(0, sc.EQ, own_pid))
    f.load()
