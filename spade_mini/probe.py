"""The drift probe's prompts: the first agent message of held-out episodes on fixed seeds.

loop.py makes them once and policy/drift.py measures, each iteration, how far the agent's replies
to them have moved from the base model's. Nothing trains on them.
"""
from __future__ import annotations

from spade_mini.agent import first_message
from spade_mini.config import DEFAULTS
from spade_mini.sandbox import SandboxedEnv, SandboxError, SandboxLimits


def probe_chats(sources: list[str], count: int, template: str = DEFAULTS.agent_template,
                limits: SandboxLimits | None = None, first_seed: int = 7_000_000) -> list[list[dict]]:
    """The first agent message of `count` episodes, round robin over `sources` on fixed seeds:
    the drift probe (policy/drift.py). Environments that fail to start are skipped."""
    chats = []
    for i in range(count if sources else 0):
        try:
            with SandboxedEnv(sources[i % len(sources)], limits=limits) as env:
                obs, info = env.reset(seed=first_seed + i)
        except SandboxError:
            continue
        chats.append([{"role": "user", "content": first_message(obs, info.get("tools") or None, None, template)}])
    return chats
