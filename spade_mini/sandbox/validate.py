"""`validate_env`: the checks a generated environment must pass before anyone plays it.

Static checks run here on the bounded parse (source.py); everything else runs in sandbox
children under ONE overall deadline (`time_budget_s`), which no call runs past. Validation
plays as play does (episodes.py): every episode in a fresh child reset once, with seeds drawn
as play draws them (31-bit, from `rng`), every step of every probe episode checked, and the
first probe episode replayed in another fresh child, which must reproduce it exactly. The
result says which check failed first, as a stage of `STAGES`, and why:

    syntax     the source does not parse (or is too long or too deeply nested)
    structure  not exactly one top-level *Env class, or an import outside the allowlist
    load       running the module or the constructor fails or times out
    reset      reset fails, returns the wrong types (info["tools"]: protocol.tools_problem),
               or two fresh children of one seed give different first observations
    step       the first probe step fails, returns the wrong types, or a reward outside [-10, 10]
    episode    a probe episode crashes, times out or never ends; an invalid action (\\boxed{test},
               an empty reply, an unknown tool) earns a reward at any step; the probe episode
               replayed with the same seed and actions differs; a second reset of one child
               differs from its first; or hint() fails
    solution   (with require_solution) there is no solution(), it raises or returns no list of
               actions, its actions lose a fresh episode of their seed, or a blind player (another
               seed's solution, one action repeated) wins most seeds (solution.py)
    decided    (with require_solution) two seeds show the same first observation, and the one
               action that wins one of them loses the other (instances.py)
    instances  (with require_solution) fewer than `min_instances` distinct (first observation,
               solution) over 16 seeds (instances.py)
    valid      every check passed

Every stage runs at one difficulty `level` (reset(seed, options={"level": level})): to
validation each level is an environment of its own. `Validation.levels` says how many the
environment has.

Omitted: junk that an environment recognises as the probe's (the junk actions are fixed
strings, so an environment can behave only when it sees them), and play beyond max_turns.
"""
import ast
import random
import time
from dataclasses import dataclass, field

from spade_mini.envs import MAX_TURNS, STAGES  # noqa: F401  (STAGES: the contract's, re-exported)
from spade_mini.sandbox.env import SEED_BOUND
from spade_mini.sandbox.episodes import Fresh, Trace, first_difference, play
from spade_mini.sandbox.instances import GATE_SEEDS, gate_reasons
from spade_mini.sandbox.limits import EnvLoadError, SandboxError, SandboxLimits
from spade_mini.sandbox.solution import SOLUTION_EPISODES, launch_solver, solution_reasons
from spade_mini.sandbox.source import SourceError, imported_modules, parse_source
from spade_mini.sandbox.worker import ALLOWED_IMPORTS

PROBE_ACTIONS = ("\\boxed{1}", "\\boxed{test}", "\\boxed{42}", "",
                 '<tool_call>{"name": "probe", "arguments": {}}</tool_call>')
JUNK_ACTIONS = ("\\boxed{test}", "", PROBE_ACTIONS[-1])  # replies no task should reward
REWARD_RANGE = (-10.0, 10.0)


@dataclass
class Validation:
    ok: bool
    reasons: list[str] = field(default_factory=list)
    class_name: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    has_hint: bool = False
    stage: str = "valid"
    """The first check that failed, one of STAGES ("valid" when none did)."""
    levels: int = 1
    """How many difficulty levels the environment says it has (validated: the one asked for)."""
    level: int = 0
    """The level that was validated."""
    shape: dict = field(default_factory=dict)
    """What the gate found the environment asks (spade_mini/gate: answer form, turns, example line)."""


def static_check(source: str) -> tuple[str, str] | None:
    """(stage, reason) of the first static check that fails, or None."""
    try:
        tree = parse_source(source)
    except SourceError as exc:
        return "syntax", str(exc)
    names = [n.name for n in tree.body if isinstance(n, ast.ClassDef)
             and n.name.endswith("Env") and n.name != "ToolUseEnv"]
    if len(names) != 1:
        return "structure", (f"expected exactly one top-level class whose name ends in 'Env', "
                             f"found {len(names)}" + (f" ({', '.join(names)})" if names else ""))
    for lineno, module in imported_modules(tree):
        if module.partition(".")[0] not in ALLOWED_IMPORTS:  # relative ones start with "."
            return "structure", (f"line {lineno}: import of {module!r} is not allowed in the "
                                 f"sandbox (allowed: {', '.join(sorted(ALLOWED_IMPORTS))})")
    return None


def probe_actions(first: str, pool: tuple[str, ...], turns: int) -> list[str]:
    """`turns` actions cycling through `pool` from `first` on."""
    start = pool.index(first)
    return [pool[(start + t) % len(pool)] for t in range(turns)]


def step_reasons(trace: Trace, turns: range) -> list[str]:
    """What these steps of a probe episode show against the contract."""
    reasons = []
    for turn in turns:
        action, _, reward, _, _ = trace.steps[turn]
        if turn in trace.bool_rewards:
            reasons.append(f"step({action!r}) returned a bool reward; return a float")
        if not REWARD_RANGE[0] <= reward <= REWARD_RANGE[1]:
            reasons.append(f"step({action!r}) returned reward {reward}, outside [-10, 10]")
        if action in JUNK_ACTIONS and reward > 0:  # else any reply wins, and nothing is learned
            reasons.append(f"step({action!r}) earned reward {reward} at turn {turn + 1}; an "
                           "invalid action must earn nothing")
    return reasons


def end_reasons(trace: Trace, max_turns: int) -> list[str]:
    return [] if trace.ended else [f"an episode of repeated probe actions did not end within "
                                   f"{max_turns} turns; set truncated=True at the turn limit"]


class _Progress:
    """One validation's progress: the check it is in (`phase`), the time each took, and the
    stage of the first failure (a phase maps to the stage it belongs to)."""
    STAGE_OF = {"probe": "step", "hint": "episode", "gate": "decided"}

    def __init__(self, result: Validation):
        self.result, self.phase, self.start = result, "load", time.monotonic()

    def fail(self, *reasons: str) -> None:
        if reasons and not self.result.reasons:
            self.result.stage = self.STAGE_OF.get(self.phase, self.phase)
        self.result.reasons.extend(reasons)

    def mark(self, phase: str) -> None:
        timings = self.result.timings
        timings[self.phase] = time.monotonic() - self.start - sum(timings.values())
        self.phase = phase


def validate_env(source: str, *, limits: SandboxLimits | None = None, max_turns: int = MAX_TURNS,
                 time_budget_s: float = 30.0, require_solution: bool = True,
                 rng: random.Random | None = None, play_turns: int | None = None,
                 action_fits=None, level: int = 0, min_instances: int = 0) -> Validation:
    """Load, reset, probe and play episodes of `source` as play would, then (with
    `require_solution`) win with its solution() and lose with blind players; say why it fails,
    if it does. Seeds come from `rng` (default: a stream seeded by the source itself). Without
    `require_solution` there is no `solution` stage, and solution() is never called.
    Episodes must end within `max_turns` (the contract's cap); the solution must win within
    `play_turns` (the run's cap, default max_turns), and `action_fits(action)`, run here in the
    parent on each solution action (a bounded string), returns why an action cannot be played
    in one turn of the run (its token budget), or None. `level`: the difficulty level every
    episode plays; `min_instances`: the `instances` stage's least number of distinct instances
    (0, the default: not counted; a run passes its K, spade_mini/gate)."""
    result = Validation(ok=False, level=level)
    failed = static_check(source)
    if failed is not None:
        result.stage, reason = failed
        result.reasons.append(reason)
        return result
    rng = rng or random.Random(source)  # one source, one answer; training passes its own
    deadline = time.monotonic() + time_budget_s
    run = _Progress(result)
    fresh, solver = Fresh(source, limits, deadline, level), None
    try:
        if require_solution:  # its child loads while the stages before `solution` run
            solver = launch_solver(source, limits, deadline, level)
        env = fresh.take()
        result.class_name, result.has_hint, result.levels = env.class_name, env.has_hint, env.levels
        run.mark("reset")
        if not 0 <= level < env.levels:
            run.fail(f"level {level} was asked for, but the environment has {env.levels} "
                     f"(levels 0 to {env.levels - 1}; set the class attribute `levels`)")
            return result
        _play_checks(run, env, fresh, rng, max_turns)
        run.mark("hint")
        if env.has_hint:  # where play reads hints: the solver's child (or a child of its own)
            reader = solver or fresh.take()
            if solver is not None:
                solver.ready()
            reader.reset(seed=rng.randrange(SEED_BOUND))
            reader.hint()
        if require_solution and not result.reasons:
            run.mark("solution")
            seeds = [rng.randrange(SEED_BOUND) for _ in range(SOLUTION_EPISODES)]
            run.fail(*solution_reasons(fresh, solver, env.has_solution, max_turns=play_turns or max_turns,
                                       seeds=seeds, action_fits=action_fits))
        if require_solution and not result.reasons:
            run.mark("gate")
            stage, reasons = gate_reasons(source, fresh, seeds=[rng.randrange(SEED_BOUND) for _ in range(GATE_SEEDS)],
                                          max_turns=play_turns or max_turns, min_instances=min_instances,
                                          limits=limits, deadline=deadline, level=level)
            if reasons:
                run.phase = stage
                run.fail(*reasons)
        run.mark("done")
    except SandboxError as exc:
        if isinstance(exc, EnvLoadError) and run.phase == "load":
            run.phase = exc.stage
        over = time.monotonic() >= deadline
        run.fail(f"{run.phase}: " + (f"validation exceeded its {time_budget_s:g} s budget" if over
                                     else f"{type(exc).__name__}: {exc}"))
        tb = getattr(exc, "traceback", "")
        if tb:
            result.reasons.append("traceback (last lines): " + " | ".join(tb.strip().splitlines()[-3:]))
    finally:
        fresh.close()
        if solver is not None:
            solver.close()
    result.ok = not result.reasons
    return result


def _play_checks(run: _Progress, env, fresh: Fresh, rng: random.Random, max_turns: int) -> None:
    """The `reset`, `step` and `episode` stages: one seed reset in two fresh children, its probe
    episode played and replayed, a second reset, and junk at every step of three episodes."""
    seed = rng.randrange(SEED_BOUND)
    probe = Trace.begin(env, seed)
    twin = fresh.take()
    replay = Trace.begin(twin, seed)
    if replay.start != probe.start:
        run.fail(f"reset(seed={seed}) in two fresh children gave different first observations; "
                 "use random.Random(seed) for all randomness")
    run.mark("probe")
    probe.step(env, PROBE_ACTIONS[0])
    run.fail(*step_reasons(probe, range(1)))
    run.mark("episode")
    if not probe.ended:
        probe.run(env, probe_actions(PROBE_ACTIONS[1], PROBE_ACTIONS, max_turns - 1))
    replay.run(twin, [action for action, *_ in probe.steps])
    run.fail(*step_reasons(probe, range(1, len(probe.steps))), *end_reasons(probe, max_turns))
    where = first_difference(probe, replay)
    if where is not None:
        run.fail(f"the probe episode replayed in a fresh child with seed {seed} and the same "
                 f"actions differed at {where}; a seed and the actions must decide everything "
                 "(use random.Random(seed), never the clock or the system's entropy)")
    again, _ = env.reset(seed=seed)
    if again != probe.start[0]:
        run.fail(f"reset(seed={seed}) after an episode gave different first observations than "
                 "the first reset; reset must start a new episode from the seed alone")
    for junk in JUNK_ACTIONS:  # junk at every step, from the first on
        trace = play(fresh, rng.randrange(SEED_BOUND), probe_actions(junk, JUNK_ACTIONS, max_turns))
        run.fail(*step_reasons(trace, range(len(trace.steps))), *end_reasons(trace, max_turns))
