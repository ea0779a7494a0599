"""The strict gate: what the agent sees must decide the answer, and there must be many of it.

Two validation stages after `solution`, both on the solution() of GATE_SEEDS seeds (drawn as
play draws them) at the level being validated, read from a solver child of their own:

    decided    in a one-shot task (a seed's solution wins in ONE action, and any first action
               ends the episode), the observation must decide the answer. Else it hangs on a
               hidden choice the text never shows ("Tom is taller than Ann. Who is older?", the
               answer drawn at random): a coin flip looks informative to the pool and teaches
               nothing. Two ways of asking: (1) seeds that show the same first observation must
               share a winning action (one seed's is played on the other, in a fresh child);
               (2) for a few seeds, each random draw of the reset is changed in turn, far, or to
               its neighbour where the far move shows (draws.Draws): a changed draw that leaves
               the observation as it was but makes solution() answer otherwise, where the first
               answer now loses, is a hidden choice. (2) needs no repeated observation, so it sees coin flips whose texts
               always differ (a round number, a name); it sees only draws of `random`, not a
               choice made from the clock or the environment's own state across resets. A task
               that goes on after a wrong or an exploring action (feedback, another try, a tool
               call) is a search, not a coin flip.
    instances  over the first INSTANCE_SEEDS seeds, at least `min_instances` distinct
               instances, an instance being (first observation, solution). A design with four
               instances replayed fifty times teaches memorisation, and "learned" then rewards
               it. The solution counts too: a guessing game opens with the same words on every
               seed and is still a new game each time.

Multi-step solutions are not checked for `decided`: later observations may carry what the
first one does not. Omitted: a proof over all seeds (a sample finds a shared observation only
when the design has few of them, which is what the gate is for).
"""
from collections.abc import Sequence

from spade_mini.envs.actions import as_played
from spade_mini.sandbox.episodes import Fresh, play
from spade_mini.sandbox.solution import launch_solver

GATE_SEEDS = 32       # seeds whose first observation and solution the gate reads
INSTANCE_SEEDS = 16   # of those, the ones whose distinct instances are counted
MAX_CROSS_PLAYS = 4   # plays of one seed's answer on another seed with the same observation
CHANGED_SEEDS = 4     # one-shot seeds whose reset draws are changed one at a time
MAX_CHANGED_DRAWS = 16  # the first draws of such a reset that are changed
EXPLORE = "\\boxed{test}"  # a first action no task takes as its answer (validate.JUNK_ACTIONS)


def gate_reasons(source: str, fresh: Fresh, *, seeds: Sequence[int], max_turns: int,
                 min_instances: int, limits=None, deadline=None, level: int = 0) -> tuple[str, list[str]]:
    """(stage, reasons) of the first gate that fails, or ("valid", []). `fresh` makes the
    children that play (at `level`); solution() is read in a child of its own."""
    solver = launch_solver(source, limits, deadline, level)
    try:
        solver.ready()
        seen = []  # (seed, first observation, solution actions)
        for seed in seeds:
            obs, info = solver.reset(seed=seed)
            seen.append((seed, obs, tuple(as_played(a, "tools" in info) for a in solver.solution(max_turns))))
        hidden = hidden_draw(solver, seen, max_turns)
    finally:
        solver.close()
    if hidden:
        return "decided", hidden
    by_obs: dict[str, list[tuple[int, tuple]]] = {}
    for seed, obs, actions in seen:
        if len(actions) == 1:
            by_obs.setdefault(obs, []).append((seed, actions))
    plays = 0
    for obs, group in by_obs.items():
        for (seed_a, act_a), (seed_b, act_b) in zip(group, group[1:]):
            if act_a == act_b or plays >= MAX_CROSS_PLAYS:
                continue
            plays += 1
            trace = play(fresh, seed_b, act_a)
            if trace.ended and not trace.won and play(fresh, seed_b, [EXPLORE]).ended:
                return "decided", [
                    f"seeds {seed_a} and {seed_b} show the same first observation ({obs[:120]!r}) but the "
                    f"answer that wins seed {seed_a}, {act_a[0][:60]!r}, loses on seed {seed_b}: the "
                    "observation must decide the answer (put every fact the answer needs in the text)"]
    counted = seen[:INSTANCE_SEEDS]
    distinct = len({(obs, actions) for _, obs, actions in counted})
    if distinct < min_instances:
        return "instances", [
            f"only {distinct} distinct instances (first observation and solution) on {len(counted)} "
            f"seeds at level {level}; at least {min_instances} are needed: draw the task's content "
            "(names, numbers, sizes) from the seed, so the agent cannot learn answers by heart"]
    return "valid", []


def hidden_draw(solver, seen: list[tuple], max_turns: int) -> list[str]:
    """Way (2) of `decided`: why a random draw the observation never shows decides the answer
    (none: no changed draw of the first CHANGED_SEEDS one-shot seeds does)."""
    for seed, obs, actions in [s for s in seen if len(s[2]) == 1][:CHANGED_SEEDS]:
        solver.reset(seed=seed)
        for draw in range(min(solver.draws(), MAX_CHANGED_DRAWS)):
            far = True
            shown, info = solver.reset_perturbed(seed, draw, far)
            if shown != obs:  # the draw shows when moved far: moved to its neighbour, it may not
                far = False
                shown, info = solver.reset_perturbed(seed, draw, far)
                if shown != obs:
                    continue
            other = tuple(as_played(a, "tools" in info) for a in solver.solution(max_turns))
            if other == actions:
                continue
            _, reward, terminated, _, _ = solver.step(actions[0])
            if terminated and reward > 0:  # both answers win: not a choice
                continue
            solver.reset_perturbed(seed, draw, far)
            if not any(solver.step(EXPLORE)[2:4]):  # a wrong answer gets feedback: a search
                continue
            return [f"on seed {seed}, changing random draw {draw} of reset() leaves the observation "
                    f"({obs[:120]!r}) as it was but makes the answer {other[0][:60]!r} instead of "
                    f"{actions[0][:60]!r}, which then loses: the observation must decide the answer "
                    "(put every fact the answer needs in the text)"]
    return []

