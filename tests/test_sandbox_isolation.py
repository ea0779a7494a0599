"""Isolation at the kernel boundary: IPC, other processes, the trainer, files, and syscalls.

Every environment here first bypasses the import allowlist (hostile.KIT reaches the worker's
real os and ctypes) and calls libc directly, as an attacker would; each attempt must fail, and
the trainer and the other sandboxes must be unchanged afterwards."""
import os
import platform
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
from hostile import FAST, ROOT, SIMPLE, env_source, requires, step_once, strays

from spade_mini.envs import ENV_DIR, HELDOUT
from spade_mini.sandbox import SandboxedEnv, process


def results(sandbox, lines: list[str], **kw) -> list[str]:
    """Run each libc expression in a sandbox; '<rc> <errno>' for each, in order."""
    body = "C = libc()\nout = []\n" + "".join(
        f"out.append('%d %d' % (({line}), errno()))\n" for line in lines)
    return step_once(sandbox, body + 'return "|".join(out), 0.0, False, False, {}', **kw)[0] \
        .split("|")


def all_failed(outcomes: list[str]) -> bool:
    return all(o.split()[0] == "-1" and o.split()[1] != "0" for o in outcomes)


# ---- IPC that landlock and the network namespace do not see ---------------------------------

@requires('seccomp')
def test_unix_sockets_are_denied(sandbox, tmp_path):
    path = str(tmp_path / "trainer.sock")
    with socket.socket(socket.AF_UNIX) as listener, \
            socket.socket(socket.AF_UNIX) as abstract:
        listener.bind(path)
        listener.listen(1)
        listener.settimeout(0.3)
        os.chmod(path, 0o777)
        abstract.bind(f"\0spade-trainer-{os.getpid()}")  # the unprivileged copy of this file may run at once
        abstract.listen(1)
        outcomes = results(sandbox, [
            "C.socket(1, 1, 0)",  # AF_UNIX, SOCK_STREAM
            "C.socket(1, 2, 0)",  # AF_UNIX, SOCK_DGRAM
            "C.socketpair(1, 1, 0, (worker()['ctypes'].c_int * 2)())",
        ])
        assert all_failed(outcomes), outcomes
        with pytest.raises(socket.timeout):
            listener.accept()


def host_segments_and_queues() -> tuple[set, set]:
    """The host's 1 MiB SysV segments (the size the attack below asks for; test_sandbox_layers.py
    makes 4 KiB ones, perhaps at the same time on another worker) and its message queues, by id."""
    shm = [line.split() for line in open("/proc/sysvipc/shm").read().splitlines()[1:]]
    msg = [line.split() for line in open("/proc/sysvipc/msg").read().splitlines()[1:]]
    return {s[1] for s in shm if s[3] == str(1 << 20)}, {q[1] for q in msg}


@requires('seccomp', 'ipcns')
def test_sysv_and_posix_ipc_and_memfd_are_denied(sandbox):
    before = host_segments_and_queues()
    outcomes = results(sandbox, [
        "C.shmget(0, 1 << 20, 0o1600)",  # IPC_PRIVATE, IPC_CREAT | 0600
        "C.msgget(0, 0o1600)",
        "C.semget(0, 1, 0o1600)",
        "C.mq_open(b'/spade-mq', 0o102, 0o600, None)",  # O_CREAT | O_RDWR
        "C.memfd_create(b'pages', 0)",
        "C.inotify_init1(0)",
    ])
    assert all_failed(outcomes), outcomes
    assert host_segments_and_queues() == before


# ---- other sandboxes and the host's processes -------------------------------------------------

PRLIMIT = "C.prlimit({pid}, 9, (worker()['ctypes'].c_ulong * 2)(8 << 20, 8 << 20), None)"
ATTACKS = [PRLIMIT, "C.setpriority(0, {pid}, 19)",
           "C.sched_setscheduler({pid}, 5, worker()['ctypes'].byref(worker()['ctypes'].c_int(0)))",
           "C.kill({pid}, 19)", "C.getpgid({pid})", "C.getsid({pid})"]


def test_no_environment_can_change_the_trainers_limits_priority_or_scheduling(sandbox):
    mine = os.getpid()
    before = (resource.getrlimit(resource.RLIMIT_AS), os.getpriority(os.PRIO_PROCESS, 0),
              os.sched_getscheduler(0))
    outcomes = results(sandbox, [a.format(pid=mine) for a in ATTACKS])
    assert all_failed(outcomes), outcomes
    assert (resource.getrlimit(resource.RLIMIT_AS), os.getpriority(os.PRIO_PROCESS, 0),
            os.sched_getscheduler(0)) == before
    with SandboxedEnv(SIMPLE, limits=FAST) as env:  # and the next sandbox still starts
        assert env.reset(seed=1)[0].startswith("Guess")


def test_a_sandbox_cannot_reach_its_sibling(sandbox):
    sibling = sandbox(SIMPLE)
    sibling.reset(seed=1)
    target = sibling._child.env_pid  # its pid on the host: the attacker is even told it
    outcomes = results(sandbox, [a.format(pid=target) for a in ATTACKS])
    assert all_failed(outcomes), outcomes
    assert sibling.step("\\boxed{0}")[0] in ("Wrong.", "Correct.")  # alive and unchanged
    # the niceness it inherited from us (not 0: the tests may run under `nice`), not the 19 asked for
    assert os.getpriority(os.PRIO_PROCESS, target) == os.getpriority(os.PRIO_PROCESS, 0)


@requires('pidns')
def test_the_environment_sees_no_host_pid(sandbox):
    step = ('os = worker()["os"]\n'
            'r = "%d %d %s" % (os.getpid(), os.getppid(), attempt(os.listdir, "/proc"))\n'
            'return r, 0.0, False, False, {}')
    pid, ppid, proc = step_once(sandbox, step)[0].split()
    assert (pid, ppid) == ("1", "0") and proc in ("PermissionError", "FileNotFoundError", "[]")


@requires('uid')
def test_each_sandbox_has_a_uid_of_its_own(sandbox):
    uids = []
    for _ in range(2):
        env = sandbox(SIMPLE)
        with open(f"/proc/{env._child.env_pid}/status") as f:
            uids.append(next(int(ln.split()[1]) for ln in f if ln.startswith("Uid:")))
    assert uids[0] != uids[1] and 0 not in uids and os.getuid() not in uids


def test_the_oom_killer_takes_a_sandbox_before_the_trainer(sandbox):
    lower = 'attempt(lambda: open("/proc/self/oom_score_adj", "w").write("-1000"))'
    env = sandbox(env_source(f'return {lower}, 0.0, False, False, {{}}'))
    env.reset(seed=0)
    assert env.step("go")[0] in ("PermissionError", "FileNotFoundError")  # landlock, no /proc, or no CAP_SYS_RESOURCE
    with open(f"/proc/{env._child.env_pid}/oom_score_adj") as f:
        assert int(f.read()) == 1000


# ---- surviving the trainer -----------------------------------------------------------------

@requires('seccomp')
def test_the_death_signal_cannot_be_cleared(sandbox):
    assert all_failed(results(sandbox, ["C.prctl(1, 0, 0, 0, 0)"]))  # PR_SET_PDEATHSIG, 0


CLEAR_AT_LOAD = "C = libc()\nC.prctl(1, 0, 0, 0, 0)\nclass AEnv:\n    pass\n"


# Asleep inside step(), the child reads no request: it cannot notice that its pipe closed, so
# only the parent-death signal ends it when the trainer is killed.
BUSY_IN_STEP = ("class AEnv:\n    def reset(self, seed=None):\n        return 'start', {}\n"
                "    def step(self, action):\n        wait(30)\n        return 'late', 0.0, True, False, {}\n")
ASK_A_STEP = "env.reset(seed=0); env._request('step', time.monotonic() + 60, action='go')\n"


@pytest.mark.parametrize("top", ["", CLEAR_AT_LOAD, BUSY_IN_STEP], ids=["plain", "clears_pdeathsig", "busy_in_step"])
def test_no_child_outlives_a_killed_trainer(top):
    from hostile import KIT
    source = KIT + "\n" + (top or "class AEnv:\n    pass\n")
    script = ("import sys, time; sys.path.insert(0, %r)\n"
              "from spade_mini.sandbox import SandboxedEnv\n"
              "env = SandboxedEnv(%r)\n" + (ASK_A_STEP if top == BUSY_IN_STEP else "") +
              "print(env.tag, flush=True); time.sleep(60)\n") % (ROOT, source)
    trainer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    tag = trainer.stdout.readline().strip()
    assert strays(tag)
    trainer.send_signal(signal.SIGKILL)
    trainer.wait()
    trainer.stdout.close()
    deadline = time.monotonic() + 3
    while strays(tag) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert strays(tag) == []


# ---- least read access ---------------------------------------------------------------------

@pytest.fixture
def world_readable_tooluse(monkeypatch):
    """A copy of tooluse.py in a folder every uid can traverse, made the file that landlock lets
    the child read: the checkout (and, as root, a Python under /root) may be readable by nobody
    else, and the child reads as a uid of its own."""
    folder = tempfile.mkdtemp(prefix="spade_tooluse_", dir="/tmp")
    os.chmod(folder, 0o755)
    copy = os.path.join(folder, "tooluse.py")
    shutil.copyfile(process.TOOLUSE_PATH, copy)
    os.chmod(copy, 0o644)
    monkeypatch.setattr(process, "TOOLUSE_PATH", copy)
    yield copy
    shutil.rmtree(folder)


@requires('landlock')
def test_the_child_reads_only_what_an_environment_needs(sandbox, tmp_path, world_readable_tooluse):
    user_file = tmp_path / "notes.txt"
    user_file.write_text("private")
    user_file.chmod(0o644)
    held_out = next(p for p in ENV_DIR.glob("*.py") if p.stem == HELDOUT[0].name)
    denied = [held_out, ENV_DIR, os.path.join(ROOT, "tests", "test_sandbox.py"),
              os.path.join(ROOT, "spade_mini", "sandbox", "env.py"), user_file, "/etc/passwd",
              os.path.dirname(pytest.__file__), os.path.join(ROOT, "spade_mini", "tooluse.py"),
              os.path.dirname(world_readable_tooluse)]
    # the standard library only where another uid may read it (not a Python under /root)
    stdlib = [p for p in [os.path.join(os.path.dirname(os.__file__), "random.py")] if anyone_can_read(p)]
    allowed = [world_readable_tooluse, *stdlib]
    assert anyone_can_read(world_readable_tooluse)
    read = 'lambda p: len(open(p).read()) if W["os"].path.isfile(p) else W["os"].listdir(p)'
    step = (f'W = worker()\nread = {read}\n'
            f'r = [attempt(read, p) for p in {[str(p) for p in denied + allowed]!r}]\n'
            'return "|".join(r), 0.0, False, False, {}')
    outcomes = step_once(sandbox, step)[0].split("|")
    assert set(outcomes[:len(denied)]) <= {"PermissionError", "FileNotFoundError"}, outcomes
    assert all(o.isdigit() and int(o) > 0 for o in outcomes[len(denied):]), outcomes


def anyone_can_read(path: str) -> bool:
    """Readable by any uid (as root the child has a uid of its own: /root/... is not)."""
    parents = [os.path.dirname(path)]
    while parents[-1] != "/":
        parents.append(os.path.dirname(parents[-1]))
    return (os.stat(path).st_mode & 0o004 and all(os.stat(d).st_mode & 0o001 for d in parents))


# ---- seccomp is an allowlist ---------------------------------------------------------------

@requires('seccomp')
@pytest.mark.skipif(platform.machine() != "x86_64", reason="the syscall numbers are x86_64's")
def test_a_syscall_nobody_listed_is_denied(sandbox):
    # uname, getuid, sched_yield, sysinfo, personality, getcwd, getpgid, acct, syslog
    numbers = [63, 102, 24, 99, 135, 79, 121, 163, 103]
    outcomes = results(sandbox, [f"C.syscall({n}, 0, 0, 0)" for n in numbers])
    assert all(o == "-1 1" for o in outcomes), outcomes  # EPERM
    assert results(sandbox, ["C.syscall(435, 0, 0)"]) == ["-1 38"]  # clone3: ENOSYS
