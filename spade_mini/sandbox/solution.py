"""Privileged answers: what an environment's `solution()` says wins, and the validation stage
that plays it.

An environment may define `solution(self) -> list[str]`, the actions that win the current
episode. They are the answer, so `SandboxedEnv` has no way to ask for them (it only says
`has_solution`); they come from here, and only validation and the leak check
(spade_mini/reward/leaks.py) ask:

    solve(source, seeds, max_actions=...)  each seed's hint() and solution(), from a child of
                                           their own
    launch_solver, solution_reasons        validate_env's `solution` stage

The stage gets solution() on SOLUTION_EPISODES seeds (drawn as play draws its seeds) from a
child of its own (launched when validation starts, so that it loads while the first stages
run), then plays every episode in a fresh child, as play does (episodes.py), where solution()
never runs (so nothing it does can help a play):

  * each seed's solution on its seed, each action played as play would receive it when the
    agent writes it (envs/actions.py `as_played`: a bare answer boxed, the last box re-wrapped):
    it must win, i.e. end the episode with terminated=True and a positive reward;
  * two blind players, whose actions do not depend on the episode: the next seed's solution,
    and that solution's first action repeated. Neither may win more than half of the seeds on
    which it is not that seed's own solution (a small answer space makes such coincidences), nor
    be every seed's solution: else the outcome ignores the episode, or the agent.

What comes back is checked, in the child and again here: a list of 1 to `max_actions` strings
of at most `limits.max_action_chars` characters each. Omitted: a proof that nothing else wins
(the episode stage tries junk actions; tests/test_envs.py tries random play on the bundled
environments), and any check that the solution is short, or play an agent could find.
"""
from collections.abc import Sequence
from dataclasses import dataclass

from spade_mini.envs.actions import as_played
from spade_mini.sandbox.env import SandboxedEnv
from spade_mini.sandbox.episodes import Fresh, play
from spade_mini.sandbox.limits import EnvProtocolError, EnvRuntimeError, SandboxLimits

SOLUTION_EPISODES = 4  # seeds whose solution() must win
NO_SOLUTION = ("the environment defines no solution(); add solution(self) -> list[str], the "
               "actions that win the current episode, so validation can prove it can be won")


@dataclass(frozen=True)
class Solved:
    """One episode's privileged answers: for validation and the leak check, never the agent."""
    seed: int
    actions: tuple[str, ...] | None
    """What solution() returned after reset(seed); None when the environment defines none."""
    hint: str | None
    """What hint() returned in the same episode; None when the environment defines none."""
    observation: str = ""
    """The episode's first observation."""
    tool_use: bool = False
    """Its reset gave tools (its actions are tool calls or answers)."""


class _Solver(SandboxedEnv):
    """A SandboxedEnv that can also ask for solution(); private, so the play API never can."""

    @classmethod
    def launch(cls, source: str, limits: SandboxLimits | None, deadline: float | None, level: int = 0):
        """A solver whose child starts loading now, resetting to `level`; call `ready()` before
        anything else."""
        solver = cls.__new__(cls)
        solver._setup(source, limits, deadline, level=level)
        solver._launch(solver._until(solver.limits.load_timeout_s))
        return solver

    def ready(self) -> None:
        """Wait for the child that `launch` started (once); its load timeout counts from now,
        since what ran in between (validation's first stages) was not its loading."""
        if self.class_name is None:
            self._start_deadline = self._until(self.limits.load_timeout_s)
            self._await_ready()

    def reset_perturbed(self, seed: int, draw: int, far: bool = True) -> tuple[str, dict]:
        """reset(seed) with the random draw number `draw` of the reset changed, far or to a
        neighbouring value (worker.Draws)."""
        return self._reset_reply(self._call("reset", self._until(self.limits.call_timeout_s), self.limits.max_obs_chars,
                                            seed=seed, level=self.level, perturb=[draw, far]))

    def draws(self) -> int:
        """How many random draws the last reset made."""
        return self._call("draws", self._until(self.limits.call_timeout_s), 0)

    def solution(self, max_actions: int) -> tuple[str, ...]:
        value = self._call("solution", self._until(self.limits.call_timeout_s),
                           self.limits.max_action_chars, max_actions=max_actions)
        if not (1 <= len(value) <= max_actions and all(type(a) is str for a in value)):
            self._stop()  # the child checks this too: it is lying, so it is done
            raise EnvProtocolError("malformed solution reply from the environment process")
        return tuple(value)


def solve(source: str, seeds: Sequence[int], *, max_actions: int,
          limits: SandboxLimits | None = None, deadline: float | None = None, level: int = 0) -> list[Solved]:
    """For each seed: reset (at `level`), then the episode's hint() and solution(), from one
    child of their own. A `SandboxError` when the source does not load or a call fails (`EnvRuntimeError`: the
    environment raised; `EnvProtocolError`: solution() returned something else than 1 to
    `max_actions` strings)."""
    with _Solver(source, limits=limits, deadline=deadline, level=level) as solver:
        solved = []
        for seed in seeds:
            obs, info = solver.reset(seed=seed)
            hint = solver.hint() if solver.has_hint else None
            actions = solver.solution(max_actions) if solver.has_solution else None
            solved.append(Solved(seed, actions, hint, obs, "tools" in info))
        return solved


def launch_solver(source: str, limits: SandboxLimits | None, deadline: float | None, level: int = 0):
    """The child that `solution_reasons` will ask for solution(), loading from now on (close()
    it when done)."""
    return _Solver.launch(source, limits, deadline, level)


def solution_reasons(fresh: Fresh, solver: _Solver, has_solution: bool, *, max_turns: int,
                     seeds: Sequence[int], action_fits=None) -> list[str]:
    """validate_env's `solution` stage: why the solution does not prove the environment a fair
    task (none: it does). `fresh` gives the children that play, in which solution() never runs;
    `solver` comes from `launch_solver`, with the same source. A solution longer than
    `max_turns` actions is refused (the run's turn cap), and so is one with an action that
    `action_fits` refuses (it returns a reason, or None)."""
    if not has_solution:
        return [NO_SOLUTION]
    solver.ready()
    solutions = []
    for seed in seeds:
        _, info = solver.reset(seed=seed)
        try:
            solutions.append(solver.solution(max_turns))
        except EnvRuntimeError as exc:
            tail = " | ".join(exc.traceback.strip().splitlines()[-3:])
            return ([f"solution() raised on seed {seed}: {exc}"]
                    + [f"traceback (last lines): {tail}"] * bool(tail))
        except EnvProtocolError as exc:
            return [f"solution() failed on seed {seed}: {exc} (at most {max_turns} actions, "
                    "the run's turn cap)"]
        too_long = next((why for why in map(action_fits or (lambda a: None), solutions[-1]) if why), None)
        if too_long:
            return [f"solution() on seed {seed}: {too_long}"]
        solutions[-1] = tuple(as_played(a, "tools" in info) for a in solutions[-1])  # what play sends
    solver.close()
    lost = []
    for seed, actions in zip(seeds, solutions):
        trace = play(fresh, seed, actions)
        if not trace.won:
            lost.append(f"solution() lost on seed {seed} {trace.ending()}")
    if lost:
        return lost
    others = solutions[1:] + solutions[:1]  # seed i gets the solution of seed i + 1
    # another seed's solution may win by a coincidence of small answer spaces, so it must win on
    # most seeds to refuse; a constant action refuses on ONE win (an environment that pays a
    # blind player on some seeds, a coin flip the seed decides, would look informative to the
    # pool and teach nothing)
    blind = [("the outcome ignores the episode: another seed's solution() wins", others,
              "each seed must pose a task of its own", False),
             ("the outcome ignores the agent: a constant action (another seed's first solution "
              "action, repeated) wins", [[o[0]] * max_turns for o in others],
              "a win must depend on what the agent does", True)]
    reasons = []
    for claim, plays, fix, one_win in blind:
        # a blind play that begins with the seed's own solution wins by coincidence (a small
        # answer space): only the other seeds are evidence
        told = [(seed, actions) for seed, actions, own in zip(seeds, plays, solutions)
                if tuple(actions[:len(own)]) != own]
        if not told:
            reasons.append(f"{claim} on every seed, being every seed's solution; {fix}")
            continue
        wins = 0
        for played, (seed, actions) in enumerate(told, 1):
            wins += play(fresh, seed, actions).won
            if (one_win and wins) or 2 * (wins + len(told) - played) <= len(told):
                break  # refused already, or it can no longer win most of them
        if (wins if one_win else 2 * wins > len(told)):
            reasons.append(f"{claim} on {wins}/{len(told)} seeds where it is not that seed's "
                           f"own solution; {fix}")
    return reasons
