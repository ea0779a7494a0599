"""Shared pieces of the hostile sandbox tests: an escape kit for environment source, fast limits,
a fixture that asserts nothing survives close(), and skips for layers this machine lacks."""
import ctypes
import functools
import os
import subprocess
import sys
import textwrap
import time

import pytest

from spade_mini.sandbox import SandboxedEnv, SandboxLimits

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = SandboxLimits(call_timeout_s=1.5, load_timeout_s=3.0, cpu_s=20, memory_mb=256)
ALL_LAYERS = {"rlimits", "userns", "netns", "ipcns", "pidns", "mntns", "uid", "pdeathsig", "no_new_privs",
              "landlock", "seccomp"}

# Bypass the import allowlist on purpose (it is not the boundary): walk from the environment's
# frame to the worker's globals, and from its sys to the real os, ctypes and builtins.
KIT = '''
def worker():
    try:
        raise RuntimeError
    except RuntimeError as e:
        f = e.__traceback__.tb_frame
    while "ALLOWED_IMPORTS" not in f.f_globals:
        f = f.f_back
    mods = f.f_globals["sys"].modules
    return {"os": mods["os"], "sys": mods["sys"], "ctypes": mods["ctypes"],
            "__builtins__": mods["builtins"]}

def attempt(fn, *args):
    try:
        return repr(fn(*args))
    except BaseException as e:
        return type(e).__name__

def frame_locals(name):
    """The locals of the nearest worker frame that has a variable `name`."""
    try:
        raise RuntimeError
    except RuntimeError as e:
        f = e.__traceback__.tb_frame
    while name not in f.f_locals:
        f = f.f_back
    return f.f_locals

def reply(line):
    """Write raw bytes to the reply pipe, as any environment can."""
    data = line.encode() if isinstance(line, str) else line
    worker()["os"].write(frame_locals("reply_fd")["reply_fd"], data)

def request_id():
    return frame_locals("req")["req"]["id"]

def libc():
    return worker()["ctypes"].CDLL(None, use_errno=True)

def errno():
    return worker()["ctypes"].get_errno()

def spin_thread():
    """Leave a thread spinning forever."""
    thread = worker()["__builtins__"].__import__("_thread")
    thread.start_new_thread(lambda: [0 for _ in iter(int, 1)], ())

def wait(seconds):
    """Block for `seconds` without using the CPU (a lock nobody releases; a futex wait)."""
    lock = worker()["__builtins__"].__import__("_thread").allocate_lock()
    lock.acquire()
    lock.acquire(timeout=seconds)

def spin(seconds):
    clock = worker()["sys"].modules["time"].monotonic
    end = clock() + seconds
    while clock() < end:
        pass
'''

SIMPLE = '''
import random
class CountEnv:
    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.target, self.turns = self.rng.randint(1, 9), 0
        return "Guess a digit 1-9 as \\\\boxed{d}.", {"turn": 0}
    def step(self, action):
        self.turns += 1
        won = action.strip() == "\\\\boxed{%d}" % self.target
        return ("Correct." if won else "Wrong."), float(won), won, self.turns >= 10, {}
    def hint(self):
        return "The digit is %d." % self.target
'''


def stalling(seconds: float) -> str:
    """SIMPLE, whose every step first waits `seconds` (just under a deadline, say)."""
    return KIT + SIMPLE.replace("        self.turns += 1\n",
                                f"        self.turns += 1\n        wait({seconds})\n")


@functools.cache
def active_layers() -> frozenset:
    with SandboxedEnv(SIMPLE, limits=FAST) as env:
        return frozenset(env.layers)


def requires(*any_of: str):
    """Skip a kernel-layer test where none of the layers that stop the attack is available."""
    return pytest.mark.skipif(not active_layers() & set(any_of),
                              reason=f"needs one of the layers {any_of}")


def expected_layers() -> set:
    """What this machine should give us; asserting it keeps a broken layer from hiding."""
    layers = {"rlimits", "pdeathsig", "no_new_privs"}
    if os.geteuid() == 0:
        layers |= {"netns", "ipcns", "pidns", "mntns", "uid"}
    elif subprocess.run([sys.executable, "-c", "import ctypes, sys; "
                         "sys.exit(ctypes.CDLL(None).unshare(0x10000000) != 0)"]).returncode == 0:
        layers |= {"userns", "netns", "ipcns", "pidns", "mntns"}  # unprivileged user namespaces work
    libc = ctypes.CDLL(None)
    libc.syscall.restype = ctypes.c_long
    if libc.syscall(ctypes.c_long(444), None, ctypes.c_size_t(0), ctypes.c_uint32(1)) >= 1:
        layers.add("landlock")  # landlock_create_ruleset(VERSION) gives the ABI
    try:
        import pyseccomp  # noqa: F401
        layers.add("seccomp")
    except (ImportError, RuntimeError, OSError):
        pass
    return layers


def env_source(step: str, reset: str = 'return "start", {}', top: str = "") -> str:
    body = (f"class ProbeEnv:\n    def reset(self, seed=None):\n{textwrap.indent(reset, ' ' * 8)}"
            f"\n    def step(self, action):\n{textwrap.indent(step, ' ' * 8)}\n")
    return KIT + "\n" + top + "\n" + body


def strays(tag: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if tag.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.fixture
def sandbox():
    made = []

    def make(source: str, limits: SandboxLimits = FAST, layers: tuple[str, ...] | None = None) -> SandboxedEnv:
        env = SandboxedEnv(source, limits=limits, layers=layers)
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()
        assert strays(env.tag) == [], "a sandbox process survived close()"


def step_once(sandbox, step: str, **kw):
    env = sandbox(env_source(step, **kw))
    env.reset(seed=0)
    return env.step("go")


def assert_bounded(start: float, limit_s: float = 4.0) -> None:
    assert time.monotonic() - start < limit_s
