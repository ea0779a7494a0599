"""One adversarial property per test: each ends in a typed SandboxError or a contained result,
within bounded time, with the test process alive and no sandbox process left behind."""
import os
import socket
import time

import pytest
from gymnasium.utils.env_checker import check_env
from hostile import (ALL_LAYERS, FAST, SIMPLE, assert_bounded, env_source, expected_layers,
                     requires, step_once, strays)

from spade_mini.sandbox import (EnvCrashed, EnvLoadError, EnvProtocolError, EnvRuntimeError,
                                EnvTimeout, SandboxedEnv, SandboxError, SandboxLimits,
                                validate_env)
from spade_mini.tooluse import ToolUseEnv

# ---- the happy path ------------------------------------------------------------------------

def test_every_available_layer_is_active(sandbox):
    assert expected_layers() <= set(sandbox(SIMPLE).layers) <= ALL_LAYERS


def test_round_trip_and_hint(sandbox):
    env = sandbox(SIMPLE)
    obs, info = env.reset(seed=3)
    assert obs.startswith("Guess") and info == {"turn": 0}
    digit = env.hint().split()[-1].rstrip(".")
    assert env.step("\\boxed{%s}" % digit) == ("Correct.", 1.0, True, False, {})


def test_passes_gymnasium_check_env(sandbox):
    check_env(sandbox(SIMPLE), skip_render_check=True)


def test_thousand_steps(sandbox):
    env = sandbox(SIMPLE)
    for i in range(1000):
        if i % 10 == 0:
            env.reset(seed=i)
        assert env.step("\\boxed{0}")[0] == "Wrong."


def test_context_manager_closes():
    with SandboxedEnv(SIMPLE, limits=FAST) as env:
        env.reset(seed=0)
        tag = env.tag
    assert env.pid is None and strays(tag) == []


# ---- hangs -----------------------------------------------------------------------------------

def test_hang_in_load_is_a_load_error():
    start = time.monotonic()
    with pytest.raises(EnvLoadError):
        SandboxedEnv(env_source("pass", top="while True:\n    pass"), limits=FAST)
    assert_bounded(start)


def test_hang_in_reset_times_out_and_recovers(sandbox):
    env = sandbox(env_source("pass", reset='while seed == 1:\n    pass\nreturn "ok", {}'))
    start = time.monotonic()
    with pytest.raises(EnvTimeout):
        env.reset(seed=1)
    assert_bounded(start)
    assert env.reset(seed=2) == ("ok", {}) and env.restarts == 1


def test_hang_in_step_times_out(sandbox):
    start = time.monotonic()
    with pytest.raises(EnvTimeout):
        step_once(sandbox, "while True:\n    pass")
    assert_bounded(start)


def test_sigterm_ignoring_hang_is_killed(sandbox):
    step = ('S = worker()["__builtins__"].__import__("_signal")\n'
            'S.signal(15, S.SIG_IGN)\nwhile True:\n    pass')
    with pytest.raises(EnvTimeout):
        step_once(sandbox, step)


def test_spinning_thread_gets_recycled(sandbox):
    step = ('spin_thread()\n'
            'return "spawned", 0.0, False, False, {}')
    env = sandbox(env_source(step))
    env.reset(seed=0)
    first_pid = env.pid
    assert env.step("go")[0] == "spawned"
    env.reset(seed=0)
    assert env.pid != first_pid and env.restarts == 1


# ---- resources -----------------------------------------------------------------------------

def test_memory_bomb_is_a_runtime_error(sandbox):
    with pytest.raises(EnvRuntimeError, match="MemoryError"):
        step_once(sandbox, 'x = bytearray(8 * 2**30)\nreturn "no", 0.0, False, False, {}')


def test_deep_recursion_is_a_runtime_error(sandbox):
    with pytest.raises(EnvRuntimeError, match="RecursionError") as err:
        step_once(sandbox, "def f(n):\n    return f(n + 1)\nreturn f(0)")
    assert "line" in err.value.traceback


def test_unbounded_recursion_limit_is_contained(sandbox):
    step = 'worker()["sys"].setrecursionlimit(10**7)\ndef f(n):\n    return f(n + 1)\nreturn f(0)'
    with pytest.raises((EnvTimeout, EnvCrashed, EnvRuntimeError)):
        step_once(sandbox, step)


def test_cpu_limit_kills_a_spinning_child(sandbox):
    limits = SandboxLimits(call_timeout_s=8.0, cpu_s=1)
    env = sandbox(env_source("while True:\n    pass"), limits)
    env.reset(seed=0)
    start = time.monotonic()
    with pytest.raises(EnvCrashed):
        env.step("go")  # SIGXCPU at 1 s of CPU, well before the 8 s wall timeout
    assert_bounded(start, 4.0)


def test_open_file_limit(sandbox):
    step = ('files = attempt(lambda: [open("/dev/null") for i in range(200)])\n'
            'return files, 0.0, False, False, {}')
    assert step_once(sandbox, step)[0] == "OSError"  # EMFILE


def test_output_flood_is_harmless(sandbox):
    step = ('print("x" * 20_000_000)\nworker()["os"].write(2, b"y" * 10_000_000)\n'
            'return "quiet", 0.0, False, False, {}')
    assert step_once(sandbox, step)[0] == "quiet"


# ---- exits ---------------------------------------------------------------------------------

def test_os_exit_is_a_crash(sandbox):
    with pytest.raises(EnvCrashed):
        step_once(sandbox, 'worker()["os"]._exit(0)')


def test_sys_exit_is_a_runtime_error(sandbox):
    with pytest.raises(EnvRuntimeError, match="SystemExit"):
        step_once(sandbox, 'worker()["sys"].exit(3)')


def test_close_after_error_is_clean(sandbox):
    env = sandbox(env_source('worker()["os"]._exit(0)'))
    env.reset(seed=0)
    with pytest.raises(EnvCrashed):
        env.step("go")
    env.close()
    env.close()
    with pytest.raises(SandboxError):
        env.step("go")


# ---- the protocol ------------------------------------------------------------------------

def test_fake_protocol_lines_on_stdout_are_ignored(sandbox):
    step = ('print(\'{"id": 2, "ok": true, "value": ["forged", 9.0, true, false, {}]}\')\n'
            'return "real", 0.0, False, False, {}')
    assert step_once(sandbox, step)[:2] == ("real", 0.0)


def test_forged_reply_on_the_reply_pipe_is_detected(sandbox):
    step = ('W = worker()\nfor fd in range(3, 30):\n'
            '    attempt(W["os"].write, fd, b\'{"id": 77, "ok": true, "value": 1}\\n\')\n'
            'return "real", 0.0, False, False, {}')
    with pytest.raises(EnvProtocolError):
        step_once(sandbox, step)


def test_forged_reply_with_the_current_id_is_still_checked(sandbox):
    # The env can read the request id from the worker's frame; the parent still checks shape.
    step = ('W = worker()\ntry:\n    raise RuntimeError\nexcept RuntimeError as e:\n'
            '    f = e.__traceback__.tb_frame\nwhile "req" not in f.f_locals:\n    f = f.f_back\n'
            'line = \'{"id": %d, "ok": true, "value": [NaN, 1], "threads": 1}\\n\'\n'
            'line = line % f.f_locals["req"]["id"]\n'
            'for fd in range(3, 30):\n    attempt(W["os"].write, fd, line.encode())\n'
            'return "real", 0.0, False, False, {}')
    with pytest.raises(EnvProtocolError, match="malformed"):
        step_once(sandbox, step)


def test_closing_the_reply_pipe_is_a_crash(sandbox):
    step = ('os = worker()["os"]\nfor fd in range(3, 30):\n    attempt(os.close, fd)\n'
            'while True:\n    pass')
    start = time.monotonic()
    with pytest.raises(EnvCrashed):
        step_once(sandbox, step)
    assert_bounded(start, 1.0)  # EOF is seen at once, not at the timeout


def test_huge_observation_is_truncated(sandbox):
    obs = step_once(sandbox, 'return "x" * 50_000_000, 0.0, False, False, {}')[0]
    assert len(obs) == FAST.max_obs_chars


def test_non_json_info_is_made_safe(sandbox):
    info = step_once(sandbox, 'return "o", 0.0, False, False, '
                              '{"f": object(), 1: {2, 3}, "n": 10**5000, "x": float("nan")}')[4]
    assert info["f"].startswith("<object") and isinstance(info["1"], str)
    assert info["n"] == "<int too large>" and info["x"] == "nan"


@pytest.mark.parametrize("reward", ['float("nan")', 'float("inf")', '"1.0"', "10**400"])
def test_bad_reward_is_a_protocol_error(sandbox, reward):
    with pytest.raises(EnvProtocolError):
        step_once(sandbox, f'return "o", {reward}, False, False, {{}}')


def test_wrong_tuple_shape_is_a_protocol_error(sandbox):
    with pytest.raises(EnvProtocolError, match="5-tuple"):
        step_once(sandbox, 'return "o", 0.0, False, {}')


def test_bool_reward_is_coerced_and_noted(sandbox):
    env = sandbox(env_source('return "o", True, True, False, {}'))
    env.reset(seed=0)
    assert env.step("go")[1] == 1.0 and env.notes == ["reward was a bool"]


# ---- processes -----------------------------------------------------------------------------

@requires('seccomp')
def test_fork_and_posix_spawn_are_denied(sandbox):
    step = ('W = worker()\nos = W["os"]\n'
            'r = [attempt(os.fork), attempt(os.posix_spawn, "/bin/true", ["true"], {})]\n'
            'return " ".join(r), 0.0, False, False, {}')
    assert step_once(sandbox, step)[0] == "PermissionError PermissionError"


@requires('seccomp')
def test_popen_via_subclasses_cannot_run_id(sandbox, tmp_path):
    step = ('popen = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == "Popen"]'
            '\nout = attempt(lambda: popen[0](["/usr/bin/id"]).wait()) if popen else "absent"\n'
            'return out, 0.0, False, False, {}')
    assert step_once(sandbox, step)[0] in ("PermissionError", "absent")


@requires('seccomp')
def test_setsid_escape_is_denied(sandbox):
    step = ('os = worker()["os"]\n'
            'r = [attempt(os.setsid), attempt(os.execv, "/bin/sleep", ["sleep", "60"])]\n'
            'return " ".join(r), 0.0, False, False, {}')
    assert step_once(sandbox, step)[0] == "PermissionError PermissionError"


@requires('seccomp', 'landlock', 'uid', 'pidns')
def test_signal_to_the_parent_is_denied(sandbox):
    step = ('os = worker()["os"]\nr = [attempt(os.kill, pid, 9) for pid in (os.getppid(), %d)]\n'
            'return " ".join(r), 0.0, False, False, {}') % os.getpid()
    assert step_once(sandbox, step)[0] in ("PermissionError PermissionError",  # still alive
                                          "PermissionError ProcessLookupError")  # no such pid here


# ---- files and secrets ---------------------------------------------------------------------

@requires('landlock')
def test_reading_a_file_outside_is_denied(sandbox, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2")
    secret.chmod(0o644)
    step = f'return attempt(lambda: open("{secret}").read()), 0.0, False, False, {{}}'
    obs = step_once(sandbox, step)[0]
    assert "hunter2" not in obs and obs in ("PermissionError", "FileNotFoundError")


@requires('landlock')
def test_no_directory_is_writable(sandbox, tmp_path):
    tmp_path.chmod(0o777)  # even a world-writable directory
    paths = [tmp_path / "planted.txt", "scratch.txt", "/tmp/planted.txt", "/dev/shm/planted"]
    step = (f'r = [attempt(lambda: open(p, "w").write("x")) for p in {[str(p) for p in paths]!r}]'
            '\nreturn " ".join(r), 0.0, False, False, {}')
    denied = {"PermissionError", "FileNotFoundError", "OSError"}  # OSError: a read-only root
    assert set(step_once(sandbox, step)[0].split()) <= denied
    assert not (tmp_path / "planted.txt").exists()


@requires('uid', 'landlock')
def test_parent_environ_is_unreadable(sandbox):
    step = ('r = attempt(lambda: open("/proc/%d/environ", "rb").read())\n'
            'return r, 0.0, False, False, {}') % os.getpid()
    assert step_once(sandbox, step)[0] in ("PermissionError", "FileNotFoundError")


# ---- network -------------------------------------------------------------------------------

NET_STEP = '''W = worker()
libc = W["ctypes"].CDLL(None, use_errno=True)
addr = bytes([2, 0]) + ({port}).to_bytes(2, "big") + bytes([127, 0, 0, 1]) + bytes(8)
fd = libc.socket(2, {kind}, 0)
rc = libc.connect(fd, addr, 16) if {kind} == 1 else libc.sendto(fd, b"leak", 4, 0, addr, 16)
return "%d %d %d" % (fd, rc, W["ctypes"].get_errno()), 0.0, False, False, {{}}'''


@requires('seccomp', 'netns')
def test_tcp_connection_is_refused(sandbox):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.3)
        obs = step_once(sandbox, NET_STEP.format(port=listener.getsockname()[1], kind=1))[0]
        assert obs.split()[:2] == ["-1", "-1"]
        with pytest.raises(socket.timeout):
            listener.accept()


@requires('seccomp', 'netns')
def test_udp_datagram_does_not_arrive(sandbox):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver:
        receiver.bind(("127.0.0.1", 0))
        receiver.settimeout(0.3)
        obs = step_once(sandbox, NET_STEP.format(port=receiver.getsockname()[1], kind=2))[0]
        assert obs.split()[:2] == ["-1", "-1"]
        with pytest.raises(socket.timeout):
            receiver.recv(16)


# ---- the import allowlist (early errors, not the boundary) ----------------------------------

@pytest.mark.parametrize("line", ["import os", "import subprocess", "import importlib",
                                  "import gc", "import builtins", "__import__('socket')",
                                  "from os import path", "import sys",
                                  "__builtins__['__import__']('os')"])
def test_forbidden_imports_fail_at_load(line):
    with pytest.raises(EnvLoadError, match="not allowed"):
        SandboxedEnv(line + "\n" + SIMPLE, limits=FAST)


def test_allowed_imports_and_tooluse_load(sandbox):
    top = ("from __future__ import annotations\n"
           "import collections.abc, dataclasses, decimal, statistics, typing\n"
           "from tooluse import ToolUseEnv\n")
    assert sandbox(top + SIMPLE).class_name == "CountEnv"


def test_constructor_error_is_a_load_error_with_traceback():
    src = "class BadEnv:\n    def __init__(self):\n        raise ValueError('boom')\n"
    with pytest.raises(EnvLoadError, match="boom") as err:
        SandboxedEnv(src, limits=FAST)
    assert "<env>" in err.value.traceback


# ---- tooluse -------------------------------------------------------------------------------

TOOL_ENV = '''
from tooluse import ToolUseEnv
class LedgerEnv(ToolUseEnv):
    def _reset(self, rng):
        self.balances = {"alice": rng.randint(1, 99), "bob": 5}
        return "What is alice's balance? Use the tools, then <answer>N</answer>."
    def _check_answer(self, answer):
        return answer == str(self.balances["alice"])
    def tool_balance(self, account: str) -> int:
        """Look up the balance of an account.

        Longer text that is not part of the description."""
        return self.balances[account]
    def tool_transfer(self, src: str, dst: str, amount: int = 1) -> str:
        """Move money between accounts."""
        self.balances[src] -= amount
        self.balances[dst] += amount
        return "ok"
    def solution(self):
        return ["<answer>%d</answer>" % self.balances["alice"]]
'''


def call(name: str, **arguments) -> str:
    import json
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_tool_specs_from_methods(sandbox):
    env = sandbox(TOOL_ENV)
    _, info = env.reset(seed=0)
    specs = {t["function"]["name"]: t["function"] for t in info["tools"]}
    assert specs["balance"]["description"] == "Look up the balance of an account."
    assert specs["balance"]["parameters"]["properties"] == {"account": {"type": "string"}}
    assert specs["transfer"]["parameters"]["required"] == ["src", "dst"]
    assert specs["transfer"]["parameters"]["properties"]["amount"] == {"type": "integer"}


def test_tool_dispatch_errors_and_answer(sandbox):
    env = sandbox(TOOL_ENV)
    env.reset(seed=0)
    balance = env.step(call("balance", account="alice"))[0]
    assert env.step(call("balance", account="carol"))[0].startswith("Error: KeyError")
    assert env.step(call("nope"))[0].startswith("Error: unknown tool 'nope'")
    assert env.step(call("balance", who="x"))[0].startswith("Error: bad arguments")
    assert env.step("<tool_call>{not json}</tool_call>")[0].startswith("Format error")
    assert env.step("just words")[0].startswith("Format error")
    assert env.step(f"<answer>{balance}</answer>")[:3] == ("Correct.", 1.0, True)


def test_tool_env_passes_validation():
    assert validate_env(TOOL_ENV, limits=FAST).ok


def test_tooluse_in_process_truncates_at_max_turns():
    class TinyEnv(ToolUseEnv):
        max_turns = 2

        def _reset(self, rng):
            return "task"

        def _check_answer(self, answer):
            return False

    env = TinyEnv()
    assert env.reset(seed=0) == ("task", {"tools": []})
    assert env.step("x")[3] is False and env.step("x")[3] is True

