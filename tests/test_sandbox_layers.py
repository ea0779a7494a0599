"""Each row of the README's sandbox table, alone. Several layers stop most attacks (a socket is
denied by seccomp, and its connection by netns and by landlock), so a test with every layer on
cannot tell which of them works. Here each attack runs first with all of the layers that could
stop it turned off (`SandboxedEnv(layers=)`), where it must succeed, so the attack is real; then
with exactly one of them on, which must stop it. A child that cannot apply a layer it was asked
for refuses to start."""
import dataclasses
import os
import signal
import socket
import time

import pytest
from hostile import FAST, SIMPLE, active_layers, env_source, requires, strays

from spade_mini.sandbox import EnvLoadError, SandboxedEnv, available_layers
from spade_mini.sandbox import process


def landlock_abi() -> int:
    """The kernel's landlock ABI version (0: none): landlock_create_ruleset(NULL, 0, VERSION)."""
    import ctypes
    return max(0, ctypes.CDLL(None, use_errno=True).syscall(ctypes.c_long(444), None, ctypes.c_size_t(0),
                                                              ctypes.c_uint32(1)))


def play(sandbox, step: str, stoppers: set, on: str | None, top: str = "",
         limits=FAST) -> tuple[SandboxedEnv, str]:
    """One step of `step` in a child with none of `stoppers` but `on` (None: none of them)."""
    if on is not None and on not in active_layers():
        pytest.skip(f"needs one of the layers {(on,)}")
    layers = tuple(name for name in available_layers() if name not in stoppers or name == on)
    env = sandbox(env_source(step, top=top), limits=limits, layers=layers)
    env.reset(seed=0)
    return env, env.step("go")[0]


def alone(*stoppers: str):
    """Parametrize over None (every stopper off) and each stopper alone."""
    return pytest.mark.parametrize("on", [None, *stoppers], ids=["none", *stoppers])


CONNECT = '''
def connect(port):
    socket = worker()["__builtins__"].__import__("socket")
    with socket.socket() as s:
        s.settimeout(1.0)
        s.connect(("127.0.0.1", port))
    return "connected"
'''


@alone("netns", "landlock", "seccomp")
def test_a_connection_to_the_host_is_stopped_by_each_network_layer_alone(sandbox, on):
    if on == "landlock" and landlock_abi() < 4:
        pytest.skip(f"landlock blocks TCP from its ABI 4 (Linux 6.7); this kernel has ABI {landlock_abi()}")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        step = 'return attempt(connect, %d), 0.0, False, False, {}' % server.getsockname()[1]
        _, obs = play(sandbox, step, {"netns", "landlock", "seccomp"}, on, top=CONNECT)
    assert (obs == "'connected'") == (on is None), obs


@alone("mntns")
def test_stat_of_the_trainers_pid_is_stopped_by_the_mount_namespace_alone(sandbox, on):
    step = 'return attempt(lambda: worker()["os"].stat("/proc/%d").st_ino > 0), 0.0, False, False, {}' % os.getpid()
    _, obs = play(sandbox, step, {"mntns"}, on)
    assert (obs == "True") == (on is None), obs


@alone("landlock", "mntns", "uid")
def test_reading_a_host_file_is_stopped_by_each_file_layer_alone(sandbox, on, tmp_path):
    secret = tmp_path / "secret.txt"  # readable by anyone, in pytest's folders (0700, the trainer's)
    secret.write_text("hunter2")
    secret.chmod(0o644)
    step = f'return attempt(lambda: open("{secret}").read()), 0.0, False, False, {{}}'
    _, obs = play(sandbox, step, {"landlock", "mntns", "uid"}, on)
    assert (obs == "'hunter2'") == (on is None), obs


@alone("landlock", "mntns", "uid")
def test_writing_a_host_file_is_stopped_by_each_file_layer_alone(sandbox, on, tmp_path):
    target = tmp_path / "log.txt"  # writable by anyone, in pytest's folders (0700, the trainer's)
    target.write_text("")
    target.chmod(0o666)
    step = f'return attempt(lambda: open("{target}", "a").write("pwned")), 0.0, False, False, {{}}'
    _, obs = play(sandbox, step, {"landlock", "mntns", "uid"}, on)
    assert (target.read_text() == "pwned") == (on is None) == (obs == "5"), obs


@alone("pidns", "uid", "landlock", "seccomp")
def test_a_signal_to_the_trainer_is_stopped_by_each_process_layer_alone(sandbox, on):
    if on == "landlock" and landlock_abi() < 6:
        pytest.skip(f"landlock scopes signals from its ABI 6 (Linux 6.12); this kernel has ABI {landlock_abi()}")
    got = []
    old = signal.signal(signal.SIGUSR2, lambda *_: got.append(1))
    try:
        step = ('return attempt(lambda: worker()["os"].kill(%d, %d)), 0.0, False, False, {}'
                % (os.getpid(), signal.SIGUSR2))
        _, obs = play(sandbox, step, {"pidns", "uid", "landlock", "seccomp"}, on)
        within(1.0, lambda: bool(got)) if on is None else time.sleep(0.2)
    finally:
        signal.signal(signal.SIGUSR2, old)
    assert bool(got) == (on is None) == (obs == "None"), obs


SHM = """
def shm(key):
    lib = libc()
    found = lib.shmget(key, 0, 0)
    return found if found >= 0 else -errno()
"""


@alone("ipcns", "seccomp")
def test_a_sysv_segment_of_the_trainer_is_stopped_by_each_ipc_layer_alone(sandbox, on):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    key = 0x5BADE000 + os.getpid() % 4096
    made = libc.shmget(key, 4096, 0o1000 | 0o666)  # IPC_CREAT, readable and writable by anyone
    assert made >= 0, ctypes.get_errno()
    try:
        _, obs = play(sandbox, "return attempt(shm, %d), 0.0, False, False, {}" % key, {"ipcns", "seccomp"},
                      on, top=SHM)
    finally:
        libc.shmctl(made, 0, None)  # IPC_RMID
    assert (obs == repr(made)) == (on is None), obs


ABSTRACT = """
def reach(name):
    socket = worker()["__builtins__"].__import__("socket")
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(1.0)
        s.connect("\\0" + name)
    return "connected"
"""


@alone("netns", "landlock", "seccomp")
def test_an_abstract_unix_socket_of_the_trainer_is_stopped_by_each_layer_alone(sandbox, on):
    if on == "landlock" and landlock_abi() < 6:
        pytest.skip(f"landlock scopes abstract sockets from its ABI 6 (Linux 6.12); this kernel has ABI {landlock_abi()}")
    name = f"spade-test-{os.getpid()}-{on}"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("\0" + name)
        server.listen()
        _, obs = play(sandbox, "return attempt(reach, %r), 0.0, False, False, {}" % name,
                      {"netns", "landlock", "seccomp"}, on, top=ABSTRACT)
    assert (obs == "'connected'") == (on is None), obs


ORPHAN = '''
def orphan():
    """A child that starts a sleeper in a session of its own (out of the process group that
    close() kills) and exits, so the sleeper is nobody's child."""
    os = worker()["os"]
    if os.fork() == 0:
        try:
            if os.fork() == 0:
                os.setsid()
                os.execv("/bin/sleep", ["sleep", "60"])
        finally:
            os._exit(0)
    os.wait()
    return "forked"
'''


def sleepers(tag: str) -> list[int]:
    """The processes of a sandbox (found by its tag) that run /bin/sleep."""
    found = []
    for pid in strays(tag):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().startswith(b"sleep"):
                    found.append(pid)
        except OSError:
            pass
    return found


def within(seconds: float, check) -> bool:
    end = time.monotonic() + seconds
    while not check():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


@alone("pidns", "seccomp", "mntns", "landlock")
def test_double_fork_orphan_leaves_nothing(sandbox, on):
    """pidns lets the orphan be made and takes it with the environment; seccomp denies the fork,
    mntns and landlock the exec (no /bin/sleep in the child's root; no right to execute it)."""
    env, obs = play(sandbox, "return attempt(orphan), 0.0, False, False, {}", {"pidns", "seccomp", "mntns", "landlock"},
                    on, top=ORPHAN)
    try:
        made = within(3.0 if on in (None, "pidns") else 1.0, lambda: sleepers(env.tag))
        assert made == (on in (None, "pidns")), (obs, made)
        env.close()
        survived = not within(2.0 if on is None else 1.0, lambda: not sleepers(env.tag))
        assert survived == (on is None), "the orphan outlived close()" if survived else "no escape without a layer"
    finally:
        for pid in sleepers(env.tag):  # what escaped (without any of the layers, as it must)
            os.kill(pid, 9)
        assert within(2.0, lambda: not sleepers(env.tag))


@alone("rlimits")
def test_memory_beyond_the_budget_is_stopped_by_the_rlimits_alone(sandbox, on):
    step = 'return attempt(lambda: len(bytearray(256 * 2**20))), 0.0, False, False, {}'
    _, obs = play(sandbox, step, {"rlimits"}, on, limits=dataclasses.replace(FAST, memory_mb=64))
    assert (obs == str(256 * 2**20)) == (on is None), obs


@requires("seccomp")
def test_a_child_that_cannot_apply_a_layer_refuses_to_start(monkeypatch):
    assert "seccomp" in available_layers()  # probed while pyseccomp was there
    monkeypatch.setattr(process, "_seccomp_config", lambda: (None, {}))  # now it is gone
    with pytest.raises(EnvLoadError, match="could not start: seccomp: pyseccomp or libseccomp is not installed"):
        SandboxedEnv(SIMPLE, limits=FAST)


def test_only_layers_this_machine_gives_can_be_asked_for():
    with pytest.raises(ValueError, match="not available here"):
        SandboxedEnv(SIMPLE, limits=FAST, layers=("rlimits", "no_such_layer"))
