"""The metrics row of one iteration (a line of metrics.jsonl): every rank's share gathered in slot
order, then counted (the README, "What a run writes", says what the columns mean)."""
from __future__ import annotations

import time

from spade_mini.reward import informative_episodes, sum_squared_deviations
from spade_mini.reward.bands import within
from spade_mini.run import distributed


def mean(xs: list) -> float | None:
    return sum(xs) / len(xs) if xs else None


def iteration_row(state, record, tokens_before: int, started: float) -> dict:
    """The row of one iteration's record (loop.Iteration), every rank's share gathered."""
    from spade_mini.policy.drift import drift_kl
    policy, r = state.policy, record
    b = distributed.gather_by_key({
        "valid": [d.valid for d in r.designs],
        "environments": sorted({p.id for p in r.playables}),
        "crashed": [e.crashed is not None for e in r.episodes],
        "eos": [float(t.finished) for e in r.episodes for t in e.turns],
        "no_hint": [e.ret for e in r.trained], "groups": sorted({e.job.group for e in r.trained}),
        "hint": [e.ret for e in r.episodes if e.job.arm == "hint" and e.crashed is None],
        "regret": [r.scores[p.id].regret for p in r.fresh],  # None: not measured
        "leaky": [h.leak is not None for h in r.hints],
        "designer_reward": [x for x in r.design_rewards if x is not None],
        "designer_samples": [sum(s.role == "designer" for s in r.samples)], "left_out": [len(r.left_out)],
        "informative": [informative_episodes(r.trained)], "unspent": [r.pool.unspent],
        "firsts": sorted({e.messages[0]["content"] for e in r.trained if e.messages}),
        "spread": [sum_squared_deviations(r.trained)],
        "losses": [(r.stats.agent_loss, r.stats.designer_loss)],  # each rank's part of the whole loss
        "tokens": [policy.tokens_generated - tokens_before],
        "times": [{**r.times, "total": time.time() - started}], "peak_memory_mb": [peak_memory_mb()],
        "oom_retries": [policy.plan.oom_retries if policy.plan is not None else 0],  # so far, by halving
        **pool_parts(state.pool, r),
    })
    slowest = {k: max(t.get(k, 0.0) for t in b["times"]) for k in b["times"][0]}  # the batch waits for it
    tokens, stats = sum(b["tokens"]), r.stats
    gen_s = max(sum(t.get(k, 0.0) for k in ("design", "hint", "play", "align")) for t in b["times"])
    return {
        "iteration": r.number, "designs": len(b["valid"]), "environments": len(b["environments"]),
        "valid_fraction": mean(b["valid"]), "valid_designs": sum(b["valid"]),
        "episodes": len(b["crashed"]), "eos_fraction": mean(b["eos"]),
        "no_hint_episodes": len(b["no_hint"]), "informative_episodes": sum(b["informative"]),
        "trained_environments": len(set(b["groups"])), "trained_first_observations": len(set(b["firsts"])),
        "no_hint_squared_deviation": sum(b["spread"]), "unspent_episodes": sum(b["unspent"]),
        "no_hint_return": mean(b["no_hint"]), "hint_return": mean(b["hint"]),
        "regret": mean([x for x in b["regret"] if x is not None]), "crashed_episodes": sum(b["crashed"]),
        "unhinted_environments": sum(x is None for x in b["regret"]), "leaky_hints": sum(b["leaky"]),
        "designer_reward": mean(b["designer_reward"]),
        "designer_samples": sum(b["designer_samples"]), "designer_samples_left_out": sum(b["left_out"]),
        "agent_loss": sum(a for a, _ in b["losses"]), "designer_loss": sum(d for _, d in b["losses"]),
        "grad_norm": stats.grad_norm, "agent_grad_norm": stats.agent_grad_norm,
        "designer_grad_norm": stats.designer_grad_norm, "trained_tokens": stats.tokens,
        "update_skipped": stats.skipped, "drift_kl": drift_kl(policy, state.probe),
        **pool_columns(b), **alignment_columns(r),
        "tokens_generated": tokens, "tokens_per_s": tokens / gen_s if gen_s > 0 else None,
        **{f"time_{k}_s": v for k, v in slowest.items()}, "peak_memory_mb": max(b["peak_memory_mb"]),
        "oom_retries": sum(b["oom_retries"]), **memory_counts(state.memory),
    }


def alignment_columns(record) -> dict:
    """The alignment set's floor and solve rate, and the readings (cosine over the floor) of the
    environments measured (alignment.py); None where nothing was measured."""
    s, readings = record.alignment_set, list(record.alignment.values())
    return {"alignment_floor": s and s.floor, "alignment_set_rate": s and s.rate, "alignment_envs": len(readings),
            "alignment_mean": mean(readings), "alignment_min": min(readings, default=None),
            "alignment_credited": len(record.credited)}


def pool_parts(pool, record) -> dict:
    """This rank's pool, as lists that gather over ranks (each rank keeps a pool of its own
    iteration under torchrun; in one process there is one)."""
    report = record.pool
    return {"pool_levels": [e.level for e in pool.envs], "pool_skill_keys": sorted({e.skill for e in pool.envs}),
            "pool_in_band": [pool.in_band()], "pool_admitted": list(report.admitted),
            "pool_changes": list(report.changes), "pool_origins": [e.origin for e in pool.envs],
            "pool_filled": [e.origin for e in record.filled], "pool_replayed": list(report.replayed),
            "replay_episodes": [report.episodes], "pool_from_store": list(report.from_store),
            "pool_back": list(report.back), "designs_waiting": list(record.waiting),
            "spent": [(pool.spent["attempts"], pool.spent["seconds"])]}


def pool_columns(b: dict) -> dict:
    """The pool_* columns of the row (README, "What a run writes"): its size and what joined,
    moved and left, with examples and designs apart."""
    levels, changes, moves = b["pool_levels"], b["pool_changes"], ("raised", "lowered")
    return {"pool_size": len(levels), "pool_examples": b["pool_origins"].count("example"),
            "pool_designs": len(levels) - b["pool_origins"].count("example"),
            "pool_in_band": sum(b["pool_in_band"]), "pool_admitted": len(b["pool_admitted"]),
            "pool_from_examples": b["pool_filled"].count("example"), "pool_from_store": len(b["pool_from_store"]),
            "pool_readmitted": len(b["pool_back"]), "designs_waiting": len(b["designs_waiting"]),
            "pool_retired": sum(c not in moves for c in changes),
            "pool_retired_why": sorted(c for c in changes if c not in moves),
            "pool_raised": changes.count("raised"), "pool_lowered": changes.count("lowered"),
            "pool_level_mean": mean(levels), "pool_level_max": max(levels, default=None),
            "pool_skills": len(set(b["pool_skill_keys"])), "pool_replayed": len(b["pool_replayed"]),
            "replay_episodes": sum(b["replay_episodes"]),
            "design_spent_attempts": sum(a for a, _ in b["spent"]), "time_design_spent_s": sum(s for _, s in b["spent"])}


def memory_counts(memory) -> dict:
    """What the memory holds after an iteration: the designer's own valid environments, and how
    many of them were played inside the band its prompts draw references from."""
    if memory is None:
        return {}
    own = [r for r in memory.records if r.iteration >= 0 and r.valid]
    return {"memory_designs": len(own), "memory_in_band": sum(within(r.no_hint_solve_rate, memory.band) for r in own)}


def peak_memory_mb() -> float:
    import resource

    import torch
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
