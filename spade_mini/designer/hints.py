"""The hints of an iteration: written by the policy, or read from each environment, and checked.

SPADE measures regret as what a privileged hint adds to the agent's return on the same seed.
With `--hint-source policy` the policy reads an environment's source and writes one hint for
all its episodes (`generate_hints`, one batched call); with `--hint-source env` each episode's
hint is the environment's own `hint()`. Either way the hints are read here, in a sandbox child
of their own, together with each episode's privileged `solution()` (`sandbox.solve`), and never
inside the children that play: a played child is asked the same calls in both arms, so it
cannot tell which arm it is in. A hint that states its episode's answer (reward/leaks.py) buys
regret without teaching: such a design plays no hint arm and earns no regret.
Reading one environment's hints has HINT_BUDGET_S in all, so a design whose hint() or solution()
stalls costs the iteration that long at most (and plays no hint arm).
Omitted on purpose: rewriting a leaky hint (the design simply loses its hint arm).
"""
from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from spade_mini.config import DEFAULTS
from spade_mini.designer.prompts import hint_prompt
from spade_mini.envs import MAX_TURNS
from spade_mini.reward.leaks import leaked_answer
from spade_mini.sandbox import SandboxError, SandboxLimits, solve

HINT_BUDGET_S = 10.0  # to load one environment and read all its seeds' hints and solutions


def generate_hints(policy, sources: list[str], settings: list[str], max_new_tokens: int,
                   temperature: float = DEFAULTS.hint_temperature) -> list[str]:
    """One hint per environment source, in ONE batched call (hint tokens are never trained)."""
    if not sources:
        return []
    chats = [hint_prompt(src, setting) for src, setting in zip(sources, settings, strict=True)]
    with policy.acting_as("designer"):  # reading environment code is the designer's side
        completions = policy.generate(chats, max_new_tokens, temperature=temperature)
    return [re.sub(r"^\s*hint\s*:\s*", "", c.text.strip(), flags=re.I) for c in completions]


@dataclass(frozen=True)
class EpisodeHints:
    """The hint of each seed of one environment (None: that seed plays no hint arm), and why
    the environment plays no hint arm at all when it does not."""
    hints: list[str | None]
    leak: str | None = None     # the first answer a hint gave away
    failure: str | None = None  # the hints or solutions could not be read


def episode_hints(sources: list[str], seeds: list[list[int]], written: list[str | None], *,
                  limits: SandboxLimits | None = None, workers: int = 2,
                  max_turns: int = MAX_TURNS) -> list[EpisodeHints]:
    """For each environment, its seeds' hints: `written[i]` (the policy's hint) when given, else
    each episode's own hint(); every hint checked against the solution of its own episode, the
    other seeds' solutions telling a fixed word from an answer (solutions of at most `max_turns`
    actions, the run's turn cap). Threads only wait on children."""
    def one(source: str, env_seeds: list[int], hint: str | None) -> EpisodeHints:
        try:
            solved = solve(source, env_seeds, max_actions=max_turns, limits=limits,
                           deadline=time.monotonic() + HINT_BUDGET_S)
        except SandboxError as e:
            return EpisodeHints([None] * len(env_seeds), failure=f"hints not read: {type(e).__name__}: {e}")
        hints = [hint if hint is not None else s.hint for s in solved]
        hints = [h if h else None for h in hints]  # an empty hint is no hint
        for i, (h, s) in enumerate(zip(hints, solved)):
            if h is None or s.actions is None:
                continue
            others = [o.actions for j, o in enumerate(solved) if j != i and o.actions]
            leak = leaked_answer(h, s.actions, others, s.observation)
            if leak is not None:
                return EpisodeHints([None] * len(env_seeds), leak=f"leaky hint: it states {leak[:80]!r}")
        return EpisodeHints(hints)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(one, sources, seeds, written))
