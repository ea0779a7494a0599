"""Many environments' calls at once: a turn of play costs its slowest child, not their sum.

Play steps every live episode each turn. Called one after another, a design whose steps wait
just under their deadline holds every other episode for that long, on every turn. `reset_envs`
and `step_envs` write every request first, then read the replies as they arrive (one poll over
all reply pipes), each before its own deadline: the children work in parallel. Each slot gets
its value (as `SandboxedEnv.reset` / `step` return it) or the `SandboxError` that ended it,
and how long its reply took, so the caller can charge each design its own time (agent.py
gives every design a budget). Errors stop only their own child, as a single call does.
Omitted: loading (start_envs loads START_PARALLEL children at once, each within its own
load_timeout_s), and a child whose environment left a thread running (reset_envs restarts it
first, alone, as `reset` does).
"""
import select
import time
from collections.abc import Sequence

from spade_mini.sandbox.env import SandboxedEnv
from spade_mini.sandbox.limits import EnvTimeout, SandboxError
from spade_mini.sandbox.spaces import into_space


def _call_all(envs: Sequence[SandboxedEnv], op: str, args: list[dict],
              deadlines: Sequence[float]) -> tuple[list, list[float]]:
    start = time.monotonic()
    out: list = [None] * len(envs)
    took = [0.0] * len(envs)
    pending: dict[int, tuple[int, int]] = {}  # reply fd -> (slot, request id)
    poller = select.poll()
    for i, (env, kw) in enumerate(zip(envs, args)):
        try:
            req_id = env._request(op, deadlines[i], **kw)
        except SandboxError as exc:
            out[i] = exc
            continue
        fd = env._child.channel.reply_fd
        pending[fd] = (i, req_id)
        poller.register(fd, select.POLLIN)

    def done(fd: int, value) -> None:
        i, _ = pending.pop(fd)
        poller.unregister(fd)
        out[i], took[i] = value, time.monotonic() - start

    while pending:
        now = time.monotonic()
        for fd, (i, _) in list(pending.items()):
            if deadlines[i] <= now:
                limit = envs[i].limits.call_timeout_s
                done(fd, envs[i]._failed(EnvTimeout(f"no reply within {limit:.1f} s")))
        if not pending:
            break
        wait = min(deadlines[i] for i, _ in pending.values()) - now
        for fd, _ in poller.poll(max(1, int(wait * 1000))):
            i, req_id = pending[fd]
            env = envs[i]
            try:
                line = env._child.channel.read_ready()
            except SandboxError as exc:  # it died, or its reply is over the cap
                done(fd, env._failed(exc))
                continue
            if line is None:
                continue
            try:  # a bad reply stops its child in _reply (or _reset_reply) itself
                value = env._reply(line, req_id, op, env.limits.max_obs_chars)
                done(fd, env._reset_reply(value) if op == "reset" else env._step_reply(value))
            except SandboxError as exc:
                done(fd, exc)
    return out, took


def reset_envs(envs: Sequence[SandboxedEnv], seeds: Sequence[int | None],
               deadlines: Sequence[float], levels: Sequence[int] | None = None) -> tuple[list, list[float]]:
    """Reset every environment at once: ((obs, info) or the SandboxError, seconds) per slot,
    each at its level of `levels` (default: the level it was made with; ValueError for one
    it does not have). A child that must be replaced first (after an error, or a thread left
    running) is reset alone, as `reset` does, before the others start."""
    options = [None] * len(envs) if levels is None else [{"level": n} for n in levels]
    first: dict[int, object] = {}
    for i, env in enumerate(envs):
        if env._needs_fresh_child():
            try:
                first[i] = env.reset(seed=seeds[i], options=options[i])
            except SandboxError as exc:
                first[i] = exc
    rest = [i for i in range(len(envs)) if i not in first]
    out, took = _call_all([envs[i] for i in rest], "reset",
                          [{"seed": envs[i]._seeded(seeds[i]), "level": envs[i].level_of(options[i])}
                           for i in rest],
                          [min(deadlines[i], envs[i]._until(envs[i].limits.call_timeout_s))
                           for i in rest])
    values, seconds = [None] * len(envs), [0.0] * len(envs)
    for i, value, t in zip(rest, out, took):
        values[i], seconds[i] = value, t
    for i, value in first.items():
        values[i] = value
    return values, seconds


def step_envs(envs: Sequence[SandboxedEnv], actions: Sequence[str],
              deadlines: Sequence[float]) -> tuple[list, list[float]]:
    """Step every environment at once: (the 5-tuple or the SandboxError, seconds) per slot;
    no call runs past its own deadline or its environment's call timeout."""
    sent = [into_space(str(a), env.limits.max_action_chars)[0] for env, a in zip(envs, actions)]
    return _call_all(envs, "step", [{"action": a} for a in sent],
                     [min(d, env._until(env.limits.call_timeout_s))
                      for env, d in zip(envs, deadlines)])
