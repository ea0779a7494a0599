"""How far the policy has moved from where it started: KL on a fixed probe of prompts.

The probe is a few agent prompts that nothing trains on, each with the reply the BASE model gives
greedily (the adapter switched off: the starting policy of self-play, unless a warm start moved
it). Each iteration measures, at every token of those replies, KL(current || base) over the
whole vocabulary at temperature 1, and reports the mean: 0 before the first step, growing as
updates move the agent. An update that moves the agent far without a
signal from its environments shows here before it shows in any held-out score.
Full fine-tuning has no adapter to switch off, so it has no drift measured (None).

Shapes (legend: spade_mini/__init__.py): T tokens of one probe sequence, V vocabulary.
"""
from __future__ import annotations

import torch


def base_model(policy):
    """A context in which the policy computes as it started (peft's adapters off), or None."""
    disable = getattr(policy.model, "disable_adapter", None)
    return disable() if disable is not None and hasattr(policy.model, "peft_config") else None


def make_probe(policy, chats: list[list[dict]], max_new_tokens: int) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, the starting policy's greedy reply ids) per chat; [] without an adapter."""
    off = base_model(policy)
    if off is None or not chats:
        return []
    with off:
        replies = policy.generate(chats, max_new_tokens, temperature=0)
    policy.forget_chats()
    return [(c.prompt_ids, c.completion_ids) for c in replies if c.completion_ids]


@torch.no_grad()
def drift_kl(policy, probe: list[tuple[list[int], list[int]]]) -> float | None:
    """Mean per-token KL(current || start) over the probe's replies (None: nothing to measure)."""
    if not probe or base_model(policy) is None:
        return None
    total, tokens = 0.0, 0
    for prompt, reply in probe:
        ids = torch.tensor([prompt + reply], device=policy.device)  # (1, T)
        at = slice(len(prompt) - 1, len(prompt) - 1 + len(reply))  # the positions that predict the reply
        with policy.compute(), policy.acting_as("agent"):  # with separate adapters: the agent's
            now = policy.model(ids).logits[0, at].float().log_softmax(-1)  # (len(reply), V)
            with base_model(policy):
                start = policy.model(ids).logits[0, at].float().log_softmax(-1)  # (len(reply), V)
        total += float((now.exp() * (now - start)).sum())
        tokens += len(reply)
    return total / tokens
