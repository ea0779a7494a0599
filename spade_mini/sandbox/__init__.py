"""Run generated environment source in a restricted child process (the sandbox of SPADE).

The designer writes Python environments; this package is the only place they run, and never
in the training process or on one of its threads. `SandboxedEnv` is a `gymnasium.Env` with text
spaces (every character of U+0000-U+FFFF but the surrogates; spaces.py) backed by ONE
persistent child, seeded as gymnasium seeds (`reset()` continues the stream of the last seed);
`validate_env` runs the checks a design must pass, and says at which of `STAGES` it failed;
`solve` returns the privileged answers of episodes (each seed's hint() and solution()) for
validation and the leak check, never for play; `parse_source` is the one bounded way to parse
untrusted source in the trainer; `start_envs` starts many children at once, and `reset_envs`
and `step_envs` call many at once (a turn of play waits for its slowest child, not the sum);
`available_layers()` lists the kernel layers this machine gives every child (train.py prints
them).

    limits.py    SandboxLimits and the typed errors        (trainer side)
    source.py    parse_source, SourceError                  (trainer side)
    protocol.py  requests, and the checks on every reply   (trainer side)
    process.py   a child's life cycle; the layer probe     (trainer side)
    spaces.py    the text spaces, into_space                (trainer side)
    env.py       SandboxedEnv, start_envs                   (trainer side)
    validate.py  validate_env, Validation, STAGES           (trainer side)
    solution.py  solve, Solved; the solution stage          (trainer side)
    episodes.py  Fresh, Trace: episodes in fresh children   (trainer side)
    batch.py     reset_envs, step_envs: many calls at once  (trainer side)
    worker.py    load the environment and serve it          (child side)
    draws.py     a reset's random draws, counted and changed (child side)
    kernel.py    the kernel layers, applied in order        (child side)
    rootfs.py    the root file system of layer mntns        (child side)
    syscalls.py  the seccomp allowlist                      (child side)

Covered, at the kernel boundary (the import allowlist is for readable errors only):
  * hangs (C-level loops, SIGTERM-ignoring code): one wall-clock deadline per public call,
    enforced here with poll(); on expiry the child's process group is SIGKILLed and reaped;
  * memory, CPU, open files, file size, core dumps: rlimits; no writable directory at all,
    no memfd, no SysV/POSIX shared memory, so no pages outside the address-space cap;
  * fork/exec/setsid escapes, ptrace, namespaces, bpf, io_uring, every socket (unix ones
    too), SysV and POSIX IPC, inotify, prctl, and any call that names another process
    (kill, prlimit64, setpriority, sched_*): the seccomp allowlist;
  * other processes, the trainer's included: a pid namespace (it sees no host pid), a uid of
    its own (as root) or a user namespace (without root), landlock's signal scope, seccomp;
    so no environment can change the trainer's limits, priority or scheduling;
  * what stat() tells without opening anything: a mount namespace whose root is a read-only
    tmpfs holding only what landlock lets the child read (rootfs.py), so it finds no host
    pid (the trainer's), no sibling's thread count (a channel between sandboxes), no size of
    a file it may not open (a held-out environment's), no /proc and no /sys;
  * network: an empty network namespace, no sockets (seccomp), landlock's TCP rule;
  * files: landlock lets it read the standard library (not site-packages), the worker and
    tooluse.py, and write nothing: not the package (held-out environments), tests, runs or
    the user's files;
  * the trainer dying: PDEATHSIG (which seccomp keeps set), and the worker exits when its
    request pipe closes;
  * broken or hostile replies: request ids, a byte cap before parsing, bounded nesting,
    finite numbers, strict shapes, strings cut to the limits, no lone surrogates (protocol.py);
    observations mapped into the observation space (spaces.py).
Without root, "uid" is replaced by a user namespace; without unprivileged user namespaces
too, there is no netns/ipcns/pidns and the child keeps the trainer's uid: seccomp and landlock
then carry those guarantees alone, and stat() of host paths works (mntns). Without landlock
(kernel < 5.13) the child can read what its uid can read; without pyseccomp, the syscalls above
are open. docs/sandbox.md has the table.
Not covered: kernel exploits (that needs a VM or gVisor), timing side channels (the clock, the
CPU load that siblings cause), and the CPU a spinning environment steals until its deadline.
`options` in reset() is ignored.
"""
from spade_mini.sandbox.batch import reset_envs, step_envs
from spade_mini.sandbox.env import SandboxedEnv, start_envs
from spade_mini.sandbox.limits import (EnvCrashed, EnvLoadError, EnvProtocolError,
                                       EnvRuntimeError, EnvTimeout, SandboxError, SandboxLimits)
from spade_mini.sandbox.process import available_layers
from spade_mini.sandbox.solution import SOLUTION_EPISODES, Solved, solve
from spade_mini.sandbox.source import MAX_AST_DEPTH, MAX_SOURCE_CHARS, SourceError, parse_source
from spade_mini.sandbox.validate import STAGES, Validation, validate_env

__all__ = ["SandboxedEnv", "SandboxLimits", "SandboxError", "EnvLoadError", "EnvTimeout",
           "EnvCrashed", "EnvRuntimeError", "EnvProtocolError", "validate_env", "Validation",
           "STAGES", "SourceError", "parse_source", "MAX_SOURCE_CHARS", "MAX_AST_DEPTH",
           "start_envs", "reset_envs", "step_envs", "available_layers", "solve", "Solved", "SOLUTION_EPISODES"]
