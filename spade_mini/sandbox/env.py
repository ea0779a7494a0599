"""`SandboxedEnv`: a generated environment as a `gymnasium.Env` whose code runs in a child.

reset/step/hint are forwarded to ONE persistent child process (process.py) over the checked
JSON-lines protocol (protocol.py). Each public call has one wall-clock deadline, computed when
it starts and shared by writing the request and reading the reply:

    SandboxedEnv(...)  load_timeout_s
    reset()            call_timeout_s, plus load_timeout_s when it starts a fresh child
    step(), hint()     call_timeout_s
    close()            process.KILL_WAIT_S (kill first, then wait)

and none runs past `deadline` when one is given (validate_env's overall budget). After any
error the child is killed (the next reset() starts a fresh one); a child whose environment left
a thread or a process running is replaced at the next reset(), so a spinning thread costs one
episode at most; one that starts a thread while loading does not load. `start_envs` starts many
children at once. Levels: `reset(seed=s, options={"level": n})` plays level n of an environment
with `levels` (a class attribute); `SandboxedEnv(level=n)` sets the level played without that
option (gymnasium's registration kwarg). No other option reaches the environment.

Seeding is gymnasium's: `reset(seed=s)` plays seed s (and reseeds `np_random` with it);
`reset()` plays the next seed drawn from `np_random`, so `reset(seed=s)` followed by any number
of `reset()` calls is the same sequence of episodes in every instance (never seeded, it starts
from entropy). The child is always sent an integer seed. The spaces are spaces.py's: an
observation is mapped into the observation space, an action into the action space before it is
sent, and `notes` says how many characters were replaced.
"""
import json
import os
import subprocess
import time
import uuid

import gymnasium

from spade_mini.sandbox.limits import (EnvCrashed, EnvLoadError, EnvProtocolError, SandboxError,
                                       SandboxLimits)
from spade_mini.sandbox.process import Child, available_layers, start_error
from spade_mini.sandbox.protocol import check_shape, decode, tools_problem, unwrap
from spade_mini.sandbox.source import MAX_SOURCE_CHARS, SourceError, imported_modules, parse_source
from spade_mini.sandbox.spaces import into_space, text_space
from spade_mini.sandbox.worker import ALLOWED_IMPORTS, MAX_LEVELS

START_PARALLEL = 2 * (os.cpu_count() or 1)  # children loading at once in start_envs
EXIT_WAIT_S = 0.2  # after the reply pipe closed: how long to wait for the exit code
SEED_BOUND = 2**31  # reset() without a seed plays a seed in [0, SEED_BOUND) drawn from np_random
SHAPES = {"reset": (str, dict), "step": (str, float, bool, bool, dict), "hint": (str,),
          "solution": (list,), "draws": (int,)}  # what each op's reply value must be


def preload_for(source: str) -> list[str]:
    """The allowed modules the source imports (the child imports them before hardening; the
    rest of the standard library costs neither memory nor start-up time)."""
    try:
        names = [name for _, name in imported_modules(parse_source(source))]
    except SourceError:  # the child's own compile will say what is wrong
        return []
    return sorted({n for n in names if n.partition(".")[0] in ALLOWED_IMPORTS})


def chosen_layers(layers: tuple[str, ...] | None) -> list[str]:
    """The layers a child applies: all that this machine gives, or the ones asked for of them."""
    found = available_layers()
    if layers is None:
        return list(found)
    missing = set(layers) - set(found)
    if missing:
        raise ValueError(f"layers {sorted(missing)} are not available here (only {', '.join(found)})")
    return [name for name in found if name in layers]


class SandboxedEnv(gymnasium.Env):
    """A generated environment running in its own hardened child process."""

    metadata = {"render_modes": []}

    def __init__(self, source: str, *, limits: SandboxLimits | None = None,
                 deadline: float | None = None, layers: tuple[str, ...] | None = None, level: int = 0):
        """`deadline`: a time.monotonic() instant that no call of this environment runs past.
        `layers`: the kernel layers its child applies, some of `available_layers()` (default:
        all of them); fewer only in tests, to show what one layer stops alone. `level`: the
        difficulty level a reset plays unless its options name another."""
        self._setup(source, limits, deadline, layers, level)
        self._launch(self._until(self.limits.load_timeout_s))
        self._await_ready()

    def _setup(self, source: str, limits: SandboxLimits | None, deadline: float | None,
               layers: tuple[str, ...] | None = None, level: int = 0) -> None:
        self.source = source
        self.level = level  # what reset() plays without options={"level": n}
        self.levels = 1  # how many the environment has (from its start-up reply)
        self.limits = limits or SandboxLimits()
        self.deadline = deadline
        self.observation_space = text_space(self.limits.max_obs_chars)
        self.action_space = text_space(self.limits.max_action_chars)
        self.tag = uuid.uuid4().hex  # in the child's environ, so tests can find strays
        self.layers: list[str] = chosen_layers(layers)
        self.class_name: str | None = None
        self.has_hint = False
        self.has_solution = False  # it defines solution(); only solution.py ever asks for it
        self.notes: list[str] = []  # non-fatal coercions in the last reply ("reward was a bool")
        self.restarts = 0
        self._child: Child | None = None
        self._recycle = False
        self._next_id = 1

    def _until(self, timeout_s: float, end: float | None = None) -> float:
        ends = [time.monotonic() + timeout_s] + [t for t in (end, self.deadline) if t is not None]
        return min(ends)

    # ---- life cycle ----
    def _launch(self, deadline: float) -> None:
        if not isinstance(self.source, str) or len(self.source) > MAX_SOURCE_CHARS:
            raise EnvLoadError(f"the source must be a str of at most {MAX_SOURCE_CHARS} "
                               "characters", stage="syntax")
        self._child = Child(self.limits, self.tag, tuple(self.layers), self.source,
                            preload_for(self.source))
        self._start_deadline = deadline
        self._recycle = False

    def _await_ready(self) -> None:
        child = self._child
        try:
            ready = child.ready(self._start_deadline, self.limits.load_timeout_s)
            if not (isinstance(ready, dict) and type(ready.get("class_name")) is str
                    and type(ready.get("has_hint")) is bool
                    and type(ready.get("has_solution")) is bool and type(ready.get("levels")) is int
                    and 1 <= ready["levels"] <= MAX_LEVELS):
                raise EnvProtocolError("malformed start-up reply from the environment process")
            threads, subprocesses = child.census()
            if threads > 1 or subprocesses:
                raise EnvLoadError("the environment left a thread or a process running while "
                                   "loading; environments must not start threads")
        except SandboxError as exc:
            code = child.exit_code()
            self._stop()
            raise start_error(exc, code) from None
        self.class_name, self.has_hint = ready["class_name"], ready["has_hint"]
        self.has_solution, self.levels = ready["has_solution"], ready["levels"]

    def _stop(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.kill()

    def close(self) -> None:
        self._stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        if getattr(self, "_child", None) is not None:
            self._stop()

    @property
    def pid(self) -> int | None:
        return None if self._child is None else self._child.proc.pid

    # ---- one call: a request, then its reply (batch.py writes many requests before reading) ----
    def _request(self, op: str, deadline: float, **args) -> int:
        if self._child is None:
            raise SandboxError("the environment process is not running; call reset() first")
        req_id, self._next_id = self._next_id, self._next_id + 1
        try:
            self._child.channel.send((json.dumps({"id": req_id, "op": op, **args}) + "\n").encode(),
                                     deadline)
        except SandboxError as exc:
            raise self._failed(exc) from None
        return req_id

    def _reply(self, line: bytes, req_id: int, op: str, max_chars: int):
        try:
            value, self.notes = unwrap(decode(line), req_id, max_chars)
            if not check_shape(value, SHAPES[op]):
                raise EnvProtocolError(f"malformed {op} reply from the environment process")
        except SandboxError as exc:
            raise self._failed(exc) from None
        return value

    def _failed(self, exc: SandboxError) -> SandboxError:
        """After any error the child is suspect: stop it (the next reset starts a fresh one)."""
        if isinstance(exc, EnvCrashed):
            return self._crashed(exc)
        self._stop()
        return exc

    def _call(self, op: str, deadline: float, max_chars: int, **args):
        req_id = self._request(op, deadline, **args)
        try:
            line = self._child.channel.read_line(deadline, self.limits.call_timeout_s)
        except SandboxError as exc:
            raise self._failed(exc) from None
        return self._reply(line, req_id, op, max_chars)

    def _crashed(self, exc: EnvCrashed) -> EnvCrashed:
        try:
            code = self._child.proc.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:  # it closed its pipe but still runs: kill() will do
            code = None
        self._stop()
        return exc if code is None else EnvCrashed(f"{exc} (code {code})")

    def _needs_fresh_child(self) -> bool:
        if self._child is None or self._recycle:
            return True
        threads, subprocesses = self._child.census()  # a thread left running slows every step
        return threads > 1 or subprocesses

    # ---- gymnasium API ----
    def _observation(self, text: str) -> str:
        obs, replaced = into_space(text, self.limits.max_obs_chars)
        if replaced:
            self.notes.append(f"{replaced} characters outside the observation space replaced")
        return obs

    def _seeded(self, seed: int | None) -> int:
        """Reseed `np_random` as gymnasium does; the seed the child gets."""
        gymnasium.Env.reset(self, seed=seed)
        if seed is None:  # the next seed of the stream that the last reset(seed=s) started
            seed = int(self.np_random.integers(SEED_BOUND))
        return seed

    def _reset_reply(self, value) -> tuple[str, dict]:
        obs, info = value
        problem = tools_problem(info["tools"]) if "tools" in info else None
        if problem is not None:  # consumers read the specs' fields: refuse what they cannot
            self._stop()
            raise EnvProtocolError(problem)
        return self._observation(obs), info

    def _step_reply(self, value) -> tuple:
        obs, reward, terminated, truncated, info = value
        return self._observation(obs), reward, terminated, truncated, info

    def level_of(self, options: dict | None) -> int:
        """The level a reset with these options plays; ValueError for one it does not have."""
        level = (options or {}).get("level", self.level)
        if type(level) is not int or level < 0 or (self.class_name is not None and level >= self.levels):
            raise ValueError(f"level {level!r} is not one of this environment's levels 0 to {self.levels - 1}")
        return level

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.level_of(options)
        seed = self._seeded(seed)
        limits = self.limits
        end = None
        if self._needs_fresh_child():
            end = self._until(limits.load_timeout_s + limits.call_timeout_s)
            self._stop()
            self.restarts += 1
            self._launch(self._until(limits.load_timeout_s, end))
            self._await_ready()
        level = self.level_of(options)  # now that the environment has said how many it has
        return self._reset_reply(self._call("reset", self._until(limits.call_timeout_s, end),
                                            limits.max_obs_chars, seed=seed, level=level))

    def step(self, action: str):
        sent, _ = into_space(str(action), self.limits.max_action_chars)
        return self._step_reply(self._call("step", self._until(self.limits.call_timeout_s),
                                           self.limits.max_obs_chars, action=sent))

    def hint(self) -> str:
        if not self.has_hint:
            raise SandboxError("the environment defines no hint()")
        return self._call("hint", self._until(self.limits.call_timeout_s),
                          self.limits.max_hint_chars)


def start_envs(sources: list[str], *, limits: SandboxLimits | None = None,
               parallel: int = START_PARALLEL) -> list:
    """One `SandboxedEnv` per source, `parallel` of them loading at once; a source that does
    not start gets its `SandboxError` in its slot instead (the others are unaffected)."""
    out: list = [None] * len(sources)
    loading: list[tuple[int, SandboxedEnv]] = []

    def launch(i: int) -> None:
        env = SandboxedEnv.__new__(SandboxedEnv)
        env._setup(sources[i], limits, None)
        try:
            env._launch(env._until(env.limits.load_timeout_s))
            loading.append((i, env))
        except SandboxError as exc:
            out[i] = exc

    for i in range(min(parallel, len(sources))):
        launch(i)
    for nxt in range(min(parallel, len(sources)), len(sources) + parallel):
        if loading:
            i, env = loading.pop(0)
            try:
                env._await_ready()
                out[i] = env
            except SandboxError as exc:
                out[i] = exc
        if nxt < len(sources):
            launch(nxt)
    return out
