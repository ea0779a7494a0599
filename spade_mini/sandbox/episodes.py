"""Validation's episodes, played as play plays them: each in a fresh child, reset once.

Play gives every episode a child of its own, resets it once with a seed drawn from the
trainer's random stream, and pays whatever any step returns. An environment that counts its
resets, or pays only from its second step on, would pass a validation that reused one child
and probed only first steps, then pay junk in play. So validation plays every episode here:
`Fresh` hands out fresh children of one source (the next one loading while the current one
plays), `play` records an episode as a `Trace`, and two traces of one seed and the same
actions must be equal (`first_difference`): else the paired seeds of regret measure noise.
Omitted: a check that the environment behaves the same when many children run at once.
"""
from collections.abc import Sequence
from dataclasses import dataclass, field

from spade_mini.sandbox.env import SandboxedEnv
from spade_mini.sandbox.limits import SandboxLimits


class Fresh:
    """Fresh children of one source, one per episode, each resetting to `level` unless told
    otherwise; `close()` stops every one it made."""

    def __init__(self, source: str, limits: SandboxLimits | None, deadline: float | None, level: int = 0):
        self.source, self.limits, self.deadline, self.level = source, limits, deadline, level
        self.made: list[SandboxedEnv] = []
        self.spare: SandboxedEnv | None = None

    def _launch(self) -> SandboxedEnv:
        env = SandboxedEnv.__new__(SandboxedEnv)
        env._setup(self.source, self.limits, self.deadline, level=self.level)
        self.made.append(env)
        env._launch(env._until(env.limits.load_timeout_s))
        return env

    def take(self) -> SandboxedEnv:
        """A child that has loaded and has never been reset (load errors raise, as in play)."""
        env, self.spare = self.spare or self._launch(), None
        env._start_deadline = env._until(env.limits.load_timeout_s)  # loading counts from now
        env._await_ready()
        self.spare = self._launch()
        return env

    def close(self) -> None:
        for env in self.made:
            env.close()
        self.made, self.spare = [], None


@dataclass
class Trace:
    """One episode as the agent would see it: reset's reply, then every step's."""
    seed: int
    start: tuple  # reset's (observation, info)
    steps: list[tuple] = field(default_factory=list)  # (action, obs, reward, terminated, truncated)
    bool_rewards: list[int] = field(default_factory=list)  # steps (from 0) whose reward was a bool

    @classmethod
    def begin(cls, env: SandboxedEnv, seed: int) -> "Trace":
        return cls(seed, env.reset(seed=seed))

    @property
    def ended(self) -> bool:
        return bool(self.steps) and (self.steps[-1][3] or self.steps[-1][4])

    @property
    def won(self) -> bool:
        return self.ended and self.steps[-1][3] and self.steps[-1][2] > 0

    def step(self, env: SandboxedEnv, action: str) -> bool:
        """Play one action; True when the episode has ended."""
        obs, reward, terminated, truncated, _ = env.step(action)
        self.steps.append((action, obs, reward, terminated, truncated))
        if "reward was a bool" in env.notes:
            self.bool_rewards.append(len(self.steps) - 1)
        return terminated or truncated

    def run(self, env: SandboxedEnv, actions: Sequence[str]) -> "Trace":
        for action in actions:
            if self.step(env, action):
                break
        return self

    def ending(self) -> str:
        if not self.ended:
            return f"with the episode still running after its last action (turn {len(self.steps)})"
        _, obs, reward, terminated, _ = self.steps[-1]
        end = "terminated" if terminated else "truncated"
        return f"at turn {len(self.steps)} ({end}, reward {reward:g}): {obs[:160]!r}"


def play(fresh: Fresh, seed: int, actions: Sequence[str]) -> Trace:
    """One episode in a fresh child: reset to `seed`, then `actions` until the episode ends."""
    env = fresh.take()
    try:
        return Trace.begin(env, seed).run(env, actions)
    finally:
        env.close()


def first_difference(a: Trace, b: Trace) -> str | None:
    """Where two traces of one seed part ("the first observation", "step N"), or None."""
    if a.start != b.start:
        return "the first observation"
    for turn, (x, y) in enumerate(zip(a.steps, b.steps), 1):
        if x != y:
            return f"step {turn} ({x[0]!r})"
    return None if len(a.steps) == len(b.steps) else f"step {min(len(a.steps), len(b.steps)) + 1}"
