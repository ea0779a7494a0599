"""Transfer suites of the curve: does what the agent learned reach beyond the starter template?

Played at the start evaluation and at a run's last point (train.py, with `--transfer-items N`),
greedily and without a hint, each distinct item once (fixed_set.distinct_items):

    heldout      the project's standard HELDOUT environments at their easy level
                 (heldout.easy_env), multi-turn games and tool use with no worked example;
                 only those whose solution() wins within the run's --max-turns on every seed
    no_example   the held-out starters with their "Example: ... \\boxed{...}" line removed
    reasoning_gym  reasoning-gym at its easy settings (benchmarks.RG_EASY), N items a family
                 (at most RG_PER_FAMILY: round four's items, kept for comparison),
                 a suite nobody here wrote (skipped, with a line, when it is not installed)

Scores: `strict` is what the environment (or reasoning-gym's scorer, from the last box) says;
`lenient`, where the format is one boxed answer, also takes an unboxed reply: a one-step
starter's reply without a box is stepped again, boxed, on a fresh reset of the same seed; a
reasoning-gym reply is read by benchmarks.loose_answer (score_reasoning_gym's loose=True).
Multi-turn episodes get no lenient score (a different action would have changed the rest of
the episode). A turn that was cut scores 0 in both.
Nothing here is trained on, put in the memory or shown to the designer: the environments are
HELDOUT and STARTER_HELDOUT (envs/__init__.py keeps them out of every tier's training side) and
reasoning-gym is never imported by training.
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, replace

from spade_mini.agent import Job, last_boxed, play_episodes
from spade_mini.settings import play_settings
from spade_mini.envs import HELDOUT, STARTER_HELDOUT, HandEnv
from spade_mini.evaluation.benchmarks import RG_FAMILIES, MissingBenchmark, reasoning_gym_items, score_reasoning_gym
from spade_mini.evaluation.fixed_set import EVAL_SEED, distinct_items
from spade_mini.evaluation.heldout import easy_env
from spade_mini.sandbox import SandboxedEnv, SandboxError
from spade_mini.warmstart import solved_source

SUITES = ("heldout", "no_example", "reasoning_gym")


@dataclass(frozen=True)
class Transfer:
    metrics: dict       # transfer_<suite>_strict / _lenient / _items
    items: list[dict]   # suite, env, seed, count, strict, lenient (transfer.jsonl)
    skipped: dict       # suite -> why


def no_example(env: HandEnv) -> HandEnv:
    """A starter whose first observation loses its "Example:" line (and the "Now: " before the question)."""
    cls = re.search(r"^class (\w+Env)\b", env.source, re.M).group(1)
    patch = (f"\n\n# no worked example\n_reset_with_example = {cls}.reset\n"
             f"def _reset_without_example(self, seed=None):\n"
             f"    obs, info = _reset_with_example(self, seed)\n"
             f"    return obs.split('\\n', 1)[-1].removeprefix('Now: '), info\n"
             f"{cls}.reset = _reset_without_example\n")
    return replace(env, name=f"{env.name}_no_example", source=env.source.rstrip() + patch)


def solution_turns(env: HandEnv, seeds: list[int]) -> int:
    """The most actions env's solution() takes over `seeds` (read out of the sandbox)."""
    most = 0
    with SandboxedEnv(solved_source(env)) as child:
        for seed in seeds:
            child.reset(seed=seed)
            most = max(most, len(json.loads(child.hint())))  # solved_source: hint() is the solution
    return most


def suite_envs(cfg, seeds: list[int]) -> dict[str, list[HandEnv]]:
    """The environments of the played suites, whatever the run's setting (games and tool use);
    heldout: those whose solution fits --max-turns."""
    fits = [e for e in map(easy_env, HELDOUT) if solution_turns(e, seeds) <= cfg.max_turns]
    return {"heldout": fits, "no_example": [no_example(e) for e in STARTER_HELDOUT]}


def transfer_items(cfg) -> dict[str, list[tuple]]:
    """Per played suite, its distinct items (name, source, seed, count); the same for every point."""
    seeds = [EVAL_SEED + k for k in range(cfg.transfer_items)]
    return {suite: distinct_items(envs, seeds) for suite, envs in suite_envs(cfg, seeds).items()}


def lenient_step(source: str, seed: int, reply: str) -> bool:
    """Whether a one-step environment accepts an unboxed reply once it is boxed."""
    try:
        with SandboxedEnv(source) as env:
            env.reset(seed=seed)
            return env.step(f"\\boxed{{{reply.strip().rstrip('.').strip()}}}")[1] > 0
    except SandboxError:
        return False


def played_rows(policy, cfg, suite: str, items: list[tuple]) -> list[dict]:
    jobs = [Job(source, seed, "no_hint", None, name) for name, source, seed, _ in items]
    rows = []
    for (name, source, seed, count), ep in zip(items, play_episodes(policy, jobs, play_settings(cfg, 0.0))):
        strict, lenient = ep.ret > 0, None
        if suite == "no_example":
            reply = next((m["content"] for m in ep.messages if m["role"] == "assistant"), "")
            lenient = strict or (ep.end_reason == "lost" and len(ep.turns) == 1 and last_boxed(reply) is None
                                 and lenient_step(source, seed, reply))
        rows.append({"suite": suite, "env": name, "seed": seed, "count": count, "strict": strict, "lenient": lenient})
    return rows


RG_PER_FAMILY = 8  # round four's items: no family is evidence at the agent's reply budget (bench/rg_select.json)


def reasoning_gym_rows(policy, cfg) -> list[dict]:
    items = reasoning_gym_items(min(cfg.transfer_items, RG_PER_FAMILY) * len(RG_FAMILIES), EVAL_SEED, "easy")
    first: dict[str, list] = {}  # a generator may repeat a question: one item, counted
    for it in items:
        first.setdefault(it.chat[0]["content"], [it, 0])[1] += 1
    distinct = list(first.values())
    with policy.acting_as("agent"):
        outs = policy.generate([it.chat for it, _ in distinct], cfg.turn_max_new_tokens, temperature=0.0)
    return [{"suite": "reasoning_gym", "env": it.id.rsplit("/", 1)[0], "seed": it.id, "count": count,
             "strict": bool(o.finished and score_reasoning_gym(it, o.text)),
             "lenient": bool(o.finished and score_reasoning_gym(it, o.text, loose=True))}
            for (it, count), o in zip(distinct, outs)]


def transfer_metrics(policy, cfg) -> Transfer:
    """Play every transfer suite once; per suite its strict and lenient rate over distinct items."""
    rows, skipped = [], {}
    for suite, items in transfer_items(cfg).items():
        rows += played_rows(policy, cfg, suite, items) if items else []
    try:
        rows += reasoning_gym_rows(policy, cfg)
    except MissingBenchmark as e:
        print(f"transfer: skipping reasoning_gym: {e}", file=sys.stderr)
        skipped["reasoning_gym"] = str(e)
    metrics = {}
    for suite in SUITES:
        got = [r for r in rows if r["suite"] == suite]
        if got:
            metrics[f"transfer_{suite}_items"] = len(got)
            metrics[f"transfer_{suite}_strict"] = sum(r["strict"] for r in got) / len(got)
            if got[0]["lenient"] is not None:
                metrics[f"transfer_{suite}_lenient"] = sum(r["lenient"] for r in got) / len(got)
    return Transfer(metrics, rows, skipped)
