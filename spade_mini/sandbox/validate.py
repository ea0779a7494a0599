"""`validate_env`: the checks a generated environment must pass before anyone plays it.

Static checks run here on the bounded parse (source.py); everything else runs in a sandbox
child under ONE overall deadline (`time_budget_s`), which no call runs past. The result says
which check failed first, as a stage of `STAGES`, and why, as human-readable reasons:

    syntax     the source does not parse (or is too long or too deeply nested)
    structure  not exactly one top-level *Env class, or an import outside the allowlist
    load       running the module or the constructor fails or times out
    reset      reset fails, returns the wrong types (info["tools"]: protocol.tools_problem),
               or is not deterministic for a seed
    step       a probe step fails, returns the wrong types, or a reward outside [-10, 10]
    episode    an episode of probe actions crashes, times out or never ends; an invalid action
               (\\boxed{test}, an empty reply, an unknown tool) is rewarded; or hint() fails
    solution   (with require_solution) there is no solution(), it raises or returns no list of
               actions, its actions lose a fresh episode of their seed, or a blind player (another
               seed's solution, one action repeated) wins most seeds (solution.py)
    valid      every check passed
"""
import ast
import time
from dataclasses import dataclass, field

from spade_mini.envs import MAX_TURNS, STAGES  # noqa: F401  (STAGES: the contract's, re-exported)
from spade_mini.sandbox.env import SandboxedEnv
from spade_mini.sandbox.limits import EnvLoadError, SandboxError, SandboxLimits
from spade_mini.sandbox.solution import launch_solver, solution_reasons
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


def validate_env(source: str, *, limits: SandboxLimits | None = None, max_turns: int = MAX_TURNS,
                 time_budget_s: float = 30.0, require_solution: bool = True) -> Validation:
    """Load, reset, probe and play one episode of `source`, then (with `require_solution`) win
    with its solution() and lose with blind players; say why it fails, if it does. Without
    `require_solution` there is no `solution` stage, and solution() is never called."""
    result = Validation(ok=False)
    failed = static_check(source)
    if failed is not None:
        result.stage, reason = failed
        result.reasons.append(reason)
        return result
    start = time.monotonic()
    deadline = start + time_budget_s
    phase = "load"

    def fail(reason: str) -> None:
        if not result.reasons:
            result.stage = {"probe": "step", "hint": "episode"}.get(phase, phase)
        result.reasons.append(reason)

    def mark(name: str) -> None:
        nonlocal phase
        result.timings[phase] = time.monotonic() - start - sum(result.timings.values())
        phase = name

    env = solver = None
    try:
        if require_solution:  # its child loads while the stages before `solution` run
            solver = launch_solver(source, limits, deadline)
        env = SandboxedEnv(source, limits=limits, deadline=deadline)
        result.class_name, result.has_hint = env.class_name, env.has_hint
        mark("reset")
        first, _ = env.reset(seed=1)
        env.reset(seed=2)
        again, _ = env.reset(seed=1)
        if again != first:
            fail("reset(seed=1) twice gave different first observations; "
                 "use random.Random(seed) for all randomness")
        mark("probe")
        rewarded_junk = []
        for action in PROBE_ACTIONS:
            env.reset(seed=0)
            _, reward, _, _, _ = env.step(action)
            if action in JUNK_ACTIONS and reward > 0:
                rewarded_junk.append((action, reward))
            if "reward was a bool" in env.notes:
                fail(f"step({action!r}) returned a bool reward; return a float")
            if not REWARD_RANGE[0] <= reward <= REWARD_RANGE[1]:
                fail(f"step({action!r}) returned reward {reward}, outside [-10, 10]")
        mark("episode")
        env.reset(seed=3)
        for turn in range(max_turns):
            _, _, terminated, truncated, _ = env.step(PROBE_ACTIONS[turn % len(PROBE_ACTIONS)])
            if terminated or truncated:
                break
        else:
            fail(f"an episode of repeated probe actions did not end within {max_turns} turns; "
                 "set truncated=True at the turn limit")
        for action, reward in rewarded_junk:  # else any reply wins, and nothing is learned
            fail(f"step({action!r}) earned reward {reward}; an invalid action must earn nothing")
        mark("hint")
        if env.has_hint:
            env.reset(seed=0)
            env.hint()
        if require_solution and not result.reasons:
            mark("solution")
            for reason in solution_reasons(env, solver, max_turns=max_turns):
                fail(reason)
        mark("done")
    except SandboxError as exc:
        if isinstance(exc, EnvLoadError) and phase == "load":
            phase = exc.stage
        over = time.monotonic() >= deadline
        fail(f"{phase}: " + (f"validation exceeded its {time_budget_s:g} s budget" if over
                             else f"{type(exc).__name__}: {exc}"))
        tb = getattr(exc, "traceback", "")
        if tb:
            result.reasons.append("traceback (last lines): "
                                  + " | ".join(tb.strip().splitlines()[-3:]))
    finally:
        for child in (env, solver):
            if child is not None:
                child.close()
    result.ok = not result.reasons
    return result
