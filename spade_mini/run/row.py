"""The metrics row of one iteration (a line of metrics.jsonl): every rank's share gathered in slot
order, then counted (the README, "What a run writes", says what the columns mean)."""
from __future__ import annotations

import time

from spade_mini.reward import informative_episodes, sum_squared_deviations
from spade_mini.run import distributed


def mean(xs: list) -> float | None:
    return sum(xs) / len(xs) if xs else None


def iteration_row(state, cfg, it: int, *, designs, fresh, playables, episodes, trained, hints, scores,
                  design_rewards, samples, left_out, stats, pool_stats, readmitted, times, t_start,
                  tokens_before) -> dict:
    from spade_mini.policy.drift import drift_kl
    policy = state.policy
    b = distributed.gather_by_key({
        "valid": [d.valid for d in designs], "written_as": [d.written_as for d in designs],
        "environments": sorted({p.id for p in playables}),
        "crashed": [e.crashed is not None for e in episodes],
        "eos": [float(t.finished) for e in episodes for t in e.turns],
        "no_hint": [e.ret for e in trained], "groups": sorted({e.job.group for e in trained}),
        "hint": [e.ret for e in episodes if e.job.arm == "hint" and e.crashed is None],
        "regret": [scores[p.id].regret for p in fresh],  # None: not measured
        "leaky": [h.leak is not None for h in hints],
        "designer_reward": [r for r in design_rewards if r is not None],
        "designer_samples": [sum(s.role == "designer" for s in samples)], "left_out": [len(left_out)],
        "informative": [informative_episodes(trained)], "unspent": [pool_stats.pop("unspent")],
        "firsts": sorted({e.messages[0]["content"] for e in trained if e.messages}),
        "spread": [sum_squared_deviations(trained)],
        "losses": [(stats.agent_loss, stats.designer_loss)],  # each rank's part of the whole loss
        "tokens": [policy.tokens_generated - tokens_before],
        "times": [{**times, "total": time.time() - t_start}], "peak_memory_mb": [peak_memory_mb()],
        "oom_retries": [policy.plan.oom_retries if policy.plan is not None else 0],  # so far, by halving
    })
    slowest = {k: max(t[k] for t in b["times"]) for k in b["times"][0]}  # the batch waits for it
    tokens = sum(b["tokens"])
    gen_s = max(t["design"] + t["hint"] + t["play"] for t in b["times"])
    return {
        "iteration": it, "designs": len(b["valid"]), "environments": len(b["environments"]),
        "valid_fraction": mean(b["valid"]) if b["valid"] else (1.0 if cfg.fixed_pool else None),
        "valid_designs": sum(b["valid"]),
        "repair_designs": b["written_as"].count("repair"),
        "repair_valid": sum(v for v, w in zip(b["valid"], b["written_as"]) if w == "repair"),
        "episodes": len(b["crashed"]), "eos_fraction": mean(b["eos"]),
        "no_hint_episodes": len(b["no_hint"]), "informative_episodes": sum(b["informative"]),
        "trained_environments": len(set(b["groups"])), "trained_first_observations": len(set(b["firsts"])),
        "no_hint_squared_deviation": sum(b["spread"]),
        "unspent_episodes": sum(b["unspent"]),
        "no_hint_return": mean(b["no_hint"]), "hint_return": mean(b["hint"]),
        "regret": mean([r for r in b["regret"] if r is not None]),
        "crashed_episodes": sum(b["crashed"]),
        "unhinted_environments": sum(r is None for r in b["regret"]),
        "leaky_hints": sum(b["leaky"]),
        "designer_reward": mean(b["designer_reward"]),
        "designer_samples": sum(b["designer_samples"]), "designer_samples_left_out": sum(b["left_out"]),
        "agent_loss": sum(a for a, _ in b["losses"]), "designer_loss": sum(d for _, d in b["losses"]),
        "grad_norm": stats.grad_norm, "agent_grad_norm": stats.agent_grad_norm,
        "designer_grad_norm": stats.designer_grad_norm,
        "trained_tokens": stats.tokens, "update_skipped": stats.skipped,
        "drift_kl": drift_kl(policy, state.probe),
        **({**pool_stats, "pool_readmitted": len(readmitted)} if state.active_pool is not None else {}),
        "tokens_generated": tokens, "tokens_per_s": tokens / gen_s if gen_s > 0 else None,
        **{f"time_{k}_s": v for k, v in slowest.items()}, "peak_memory_mb": max(b["peak_memory_mb"]),
        "oom_retries": sum(b["oom_retries"]),
        **memory_counts(state.memory),
    }


def memory_counts(memory) -> dict:
    """What the memory holds after an iteration: the designer's own valid environments, and how
    many of them were played inside the band its prompts draw references from."""
    if memory is None:
        return {}
    own = [r for r in memory.records if r.iteration >= 0 and r.valid]
    low, high = memory.band
    return {"memory_designs": len(own),
            "memory_in_band": sum(r.no_hint_solve_rate is not None and low <= r.no_hint_solve_rate <= high
                                  for r in own)}


def peak_memory_mb() -> float:
    import resource

    import torch
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
