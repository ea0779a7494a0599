"""Replies are untrusted input, and every public call keeps one deadline.

The environment writes raw lines to its reply pipe (it can: the pipe is in its own process):
each forged, malformed, oversized or late reply ends in a typed SandboxError, never in a
ValueError, RecursionError or MemoryError, and within the call's deadline; validate_env turns
each into a reason."""
import time

import pytest
from hostile import FAST, KIT, SIMPLE, assert_bounded, env_source, strays

from spade_mini.sandbox import (EnvCrashed, EnvLoadError, EnvProtocolError, EnvTimeout, SandboxedEnv,
                                SandboxLimits, available_layers, validate_env)

OK = '{"id": %d, "ok": true, "value": %s, "notes": []}'
# Python expressions, evaluated in the environment with `rid` = the current request id.
FORGERIES = {
    "huge_float": repr(OK) + ' % (rid, \'["o", 1e999, false, false, {}]\')',
    "nan": repr(OK) + ' % (rid, \'["o", NaN, false, false, {}]\')',
    "infinity": repr(OK) + ' % (rid, \'["o", -Infinity, false, false, {}]\')',
    "huge_int": repr(OK) + ' % (rid, \'["o", 0.0, false, false, {"n": 1%s}]\' % ("0" * 5000))',
    "deep": repr(OK) + ' % (rid, "[" * 200000 + "]" * 200000)',
    "deep_under_json_guard": repr(OK) + ' % (rid, "[" * 500 + "]" * 500)',
    "bad_notes": '\'{"id": %d, "ok": true, "value": 1, "notes": [1, 2]}\' % rid',
    "bad_ok": '\'{"id": %d, "ok": "yes", "value": 1}\' % rid',
    "no_value": '\'{"id": %d, "ok": true, "notes": []}\' % rid',
    "unknown_kind": '\'{"id": %d, "ok": false, "kind": "bogus", "message": "x"}\' % rid',
    "not_utf8": 'b"\\xff\\xfe\\xfd"',
    "not_json": '"{\\"id\\": %d, " % rid',
    "wrong_shape": repr(OK) + ' % (rid, \'{"a": [1, 2, 3]}\')',
    "many_objects": repr(OK) + ' % (rid, "[" + ",".join(["{}"] * 300000) + "]")',
}
HANG_AFTER = "while True:\n    pass"


def forged(expr: str, newline: bool = True) -> str:
    end = ' + (b"\\n" if isinstance(line, bytes) else "\\n")' if newline else ""
    return env_source(f"rid = request_id()\nline = {expr}\nreply(line{end})\n{HANG_AFTER}")


@pytest.mark.parametrize("case", sorted(FORGERIES))
def test_forged_reply_is_a_protocol_error(sandbox, case):
    env = sandbox(forged(FORGERIES[case]))
    env.reset(seed=0)
    start = time.monotonic()
    with pytest.raises(EnvProtocolError):
        env.step("go")
    assert_bounded(start, FAST.call_timeout_s + 1.0)
    assert env.pid is None  # the child was killed, not left waiting


@pytest.mark.parametrize("case", ["deep", "huge_float", "not_utf8"])
def test_validate_turns_a_forged_reply_into_a_reason(case):
    v = validate_env(forged(FORGERIES[case]), limits=FAST)
    assert not v.ok and v.stage == "step" and "EnvProtocolError" in v.reasons[0], v.reasons


def test_reply_over_the_cap_is_refused_before_parsing(sandbox):
    limits = SandboxLimits(call_timeout_s=5.0, max_reply_bytes=2**16)
    env = sandbox(forged('"x" * (4 * 2**20)', newline=False), limits)
    env.reset(seed=0)
    start = time.monotonic()
    with pytest.raises(EnvProtocolError, match="longer than"):
        env.step("go")
    assert_bounded(start, 2.0)  # at the cap, not at the deadline


def test_long_observation_is_cut_here_too(sandbox):
    value = '\'["%s", 0.0, false, false, {"s": "%s"}]\' % ("x" * 100000, "y" * 100000)'
    step = f"reply({repr(OK)} % (request_id(), {value}) + chr(10))\n{HANG_AFTER}"
    env = sandbox(env_source(step))
    env.reset(seed=0)
    obs, _, _, _, info = env.step("go")
    assert len(obs) == len(info["s"]) == FAST.max_obs_chars


def test_forged_start_up_reply_changes_nothing(sandbox):
    fake = OK % (0, '{"class_name": "FakeEnv", "has_hint": true, "has_solution": true, "levels": 1, '
                    '"layers": []}')
    env = sandbox(env_source('return "o", 0.0, False, False, {}', top=f"reply({fake!r} + chr(10))"))
    assert env.layers == list(available_layers())  # from the parent's probe, not from a reply
    with pytest.raises(EnvProtocolError, match="out of sequence"):
        env.reset(seed=0)  # the real start-up reply is now a stale line


# ---- deadlines -------------------------------------------------------------------------------

def test_validate_keeps_its_budget_when_every_call_is_slow():
    slow = SIMPLE.replace("self.turns += 1", "self.turns += 1\n        spin(1.2)")
    limits = SandboxLimits(call_timeout_s=1.5, load_timeout_s=3.0)
    start = time.monotonic()
    v = validate_env(KIT + slow, limits=limits, time_budget_s=3.0)
    elapsed = time.monotonic() - start
    assert not v.ok and any("budget" in r for r in v.reasons), v.reasons
    assert elapsed < 3.0 + 1.0, elapsed  # each call alone was within its own timeout


def test_write_and_read_share_one_deadline(sandbox):
    # Step 1 forges its own reply and then hangs, so the worker stops reading requests; step 2
    # sends an action larger than the pipe holds: the write blocks, then there is no reply.
    step = f"reply({repr(OK)} % (request_id(), '[\"o\", 0.0, false, false, {{}}]') + chr(10))\n" \
           + HANG_AFTER
    limits = SandboxLimits(call_timeout_s=1.0, max_action_chars=4 * 2**20)
    env = sandbox(env_source(step), limits)
    env.reset(seed=0)
    assert env.step("go")[0] == "o"
    start = time.monotonic()
    with pytest.raises(EnvTimeout):
        env.step("x" * 2**20)
    assert time.monotonic() - start < 1.0 + 0.5  # one deadline, not one for writing + one for reading


def test_reset_that_restarts_keeps_one_deadline():
    limits = SandboxLimits(call_timeout_s=1.0, load_timeout_s=1.0)
    env = SandboxedEnv(env_source('worker()["os"]._exit(0)',
                                  reset='spin(0.5) if seed == 1 else None\nreturn "ok", {}'),
                       limits=limits)
    try:
        env.reset(seed=0)
        with pytest.raises(EnvCrashed):
            env.step("go")  # the child exits: the next reset starts a fresh one
        start = time.monotonic()
        assert env.reset(seed=1) == ("ok", {})
        assert time.monotonic() - start < limits.load_timeout_s + limits.call_timeout_s + 0.5
    finally:
        env.close()


def test_close_kills_first_and_is_bounded(sandbox):
    step = ('spin_thread()\n'
            'return "spinning", 0.0, False, False, {}')
    env = sandbox(env_source(step))
    env.reset(seed=0)
    env.step("go")
    tag, start = env.tag, time.monotonic()
    env.close()
    assert time.monotonic() - start < 1.0 and strays(tag) == []


def test_a_thread_started_while_loading_is_not_a_clean_start():
    source = env_source('return "o", 0.0, True, False, {}', top="spin_thread()")
    with pytest.raises(EnvLoadError, match="thread"):
        SandboxedEnv(source, limits=FAST)
    v = validate_env(source, limits=FAST)
    assert not v.ok and v.stage == "load"


def test_budget_message_names_the_phase():
    source = env_source('spin(5)\nreturn "o", 0.0, False, False, {}')
    v = validate_env(source, limits=SandboxLimits(call_timeout_s=10.0), time_budget_s=1.0)
    assert not v.ok and v.reasons[0].startswith("probe:") and "budget" in v.reasons[0]
