"""Held-out evaluation: does what the agent learned in self-designed environments transfer?

Suites: `heldout` (the hand-written HELDOUT environments, played by the same `play_episodes` as
training), `reasoning_gym`, `humaneval` and `bfcl` (one-turn benchmarks from benchmarks.py,
generated in batched calls). Each suite has two tiers. `full` is the benchmark as published, and
held-out plays a hint arm on the same seeds as an upper bound. `easy` is what a small model can
move on: benchmarks.py's easy items, the held-out games at an easy level (EASY_SETTINGS) and the
tool-use ones allowing retries, no-hint arm only. Every tier also scores the replies' form:
`form` (in the shape the scorer reads: a box, a tool call, a function), `eos` (the turn ended by
itself rather than being cut) and, in tool use, `invalid_action` (lower is better).
With `suite_dir` (eval.py --suite-dir), the `generated` suite plays the environments of a suite
exported from a run (spade_mini/adapters/export.py) exactly as held-out ones are played, at their own
level in both tiers (full adds the hint arm).

Pairing: the items of each (suite, tier) are built once, before any model plays (`Plan`), and
every model is scored on exactly those items and seeds, so report.py can compare models
item by item. `budget_minutes` sizes n per (suite, tier) from the seconds per item the first
model takes on a short probe (its scores are discarded).
Omitted: pass@k for k > 1, BFCL multi-turn, and sampling seeds shared across models (eval
decodes greedily by default, which needs none).
"""
from __future__ import annotations

import dataclasses
import gc
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from spade_mini.evaluation import benchmarks as bm, heldout
from spade_mini.evaluation.benchmarks import GENERATED, PLAYED, SUITES, TIERS
from spade_mini.evaluation.report import print_power, write_results

SIZE_FIELDS = {"heldout": "heldout_seeds", "reasoning_gym": "rg_items", "humaneval": "humaneval_items",
               "bfcl": "bfcl_items", GENERATED: "heldout_seeds"}
MAX_BUDGET_ITEMS = 2000  # n that --budget-minutes may choose for one (suite, tier), at most
clock = time.perf_counter  # seconds; the budget's probes read this one


@dataclass
class EvalSettings:
    suites: list[str] = field(default_factory=lambda: list(SUITES))
    tiers: list[str] = field(default_factory=lambda: list(TIERS))
    seed: int = 0                      # seeds every environment and generated item
    heldout_seeds: int = 8             # K episodes per held-out environment and arm
    rg_items: int = 300
    humaneval_items: int = 164
    bfcl_items: int = 200              # per BFCL category
    answer_max_new_tokens: int = 1024  # reasoning_gym and bfcl replies
    code_max_new_tokens: int = 1024    # humaneval replies
    temperature: float = 0.0           # greedy by default
    batch_size: int = 64               # chats per generate call in one-turn suites
    humaneval_timeout_s: float = 5.0
    budget_minutes: float | None = None  # size n per (suite, tier) to fit this, all models together
    probe_items: int = 4               # items timed per one-turn (suite, tier) for the budget
    suite_dir: str | None = None       # an exported suite, played as the `generated` suite


# Sizes per config preset; flags override them.
EVAL_PRESETS = {
    "cpu-smoke": dict(tiers=["easy"], heldout_seeds=6, rg_items=96, humaneval_items=37, bfcl_items=48,
                      answer_max_new_tokens=48, code_max_new_tokens=128, batch_size=16),
    "gpu": dict(),
}
EVAL_PRESETS["cpu"] = EVAL_PRESETS["cpu-smoke"]

@dataclass
class ItemScore:
    suite: str
    tier: str
    metric: str
    model: str
    item: str
    score: float
    detail: str = ""


@dataclass
class Plan:
    suite: str
    tier: str
    items: list[bm.Item]  # the same list for every model of one evaluation


def plan(suite: str, tier: str, n: int, seed: int, envs=None) -> Plan:
    """The items of one (suite, tier): n items (held-out: n seeds of every environment)."""
    if suite in PLAYED:
        return Plan(suite, tier, heldout.heldout_items(tier, n, seed, envs))
    items = {"reasoning_gym": lambda: bm.reasoning_gym_items(n, seed, tier),
             "humaneval": lambda: bm.humaneval_items(n, tier), "bfcl": lambda: bm.bfcl_items(n, tier)}
    return Plan(suite, tier, items[suite]())


# --- held-out ------------------------------------------------------------------------------------

def heldout_scores(policy, cfg, st: EvalSettings, p: Plan, model: str) -> list[ItemScore]:
    """Solve and return per arm; the form shares of the no-hint episodes (heldout.episode_form)."""
    arms = ("no_hint", "hint") if p.tier == "full" else ("no_hint",)
    out = []
    for it, arm, ep in heldout.play_heldout(policy, cfg, p.items, arms, st.temperature, f"{p.suite} {p.tier} [{model}]"):
        row = {f"solve_{arm}": float(ep.end_reason == "won"), f"return_{arm}": ep.ret}
        row.update(heldout.episode_form(ep) if arm == "no_hint" else {})
        out += [ItemScore(p.suite, p.tier, k, model, it.id, v, ep.end_reason) for k, v in row.items()]
    return out


# --- one-turn suites -----------------------------------------------------------------------------

def generate_all(policy, items: list[bm.Item], max_new_tokens: int, st: EvalSettings, desc: str) -> list:
    """Completions of every item, `batch_size` chats per batched generate call."""
    outs = []
    for start in tqdm(range(0, len(items), st.batch_size), desc=desc, unit="batch"):
        chats = [it.chat for it in items[start:start + st.batch_size]]
        with policy.acting_as("agent"):
            outs += policy.generate(chats, max_new_tokens, temperature=st.temperature)
    return outs


def rows(p: Plan, model: str, item: bm.Item, detail: str, **metrics: float) -> list[ItemScore]:
    return [ItemScore(p.suite, p.tier, k, model, item.id, float(v), detail) for k, v in metrics.items()]


def reasoning_gym_scores(policy, cfg, st: EvalSettings, p: Plan, model: str) -> list[ItemScore]:
    outs = generate_all(policy, p.items, st.answer_max_new_tokens, st, f"reasoning_gym {p.tier} [{model}]")
    loose = p.tier == "easy"  # the easy tier reads an unboxed answer too; `form` counts the boxes
    return [s for it, o in zip(p.items, outs) for s in rows(
        p, model, it, o.text[-200:], accuracy=bm.score_reasoning_gym(it, o.text, loose=loose),
        form=bm.boxed_form(o.text), eos=o.finished)]


def humaneval_scores(policy, cfg, st: EvalSettings, p: Plan, model: str) -> list[ItemScore]:
    outs = generate_all(policy, p.items, st.code_max_new_tokens, st, f"humaneval {p.tier} [{model}]")
    out = []
    for it, o in tqdm(list(zip(p.items, outs)), desc=f"humaneval tests [{model}]", unit="problem"):
        score, why = bm.run_humaneval(it.data, o.text, st.humaneval_timeout_s)
        out += rows(p, model, it, why, **{"pass@1": score}, form=bm.code_form(it.data, o.text), eos=o.finished)
    return out


def bfcl_scores(policy, cfg, st: EvalSettings, p: Plan, model: str) -> list[ItemScore]:
    outs = generate_all(policy, p.items, st.answer_max_new_tokens, st, f"bfcl {p.tier} [{model}]")
    out = []
    for it, o in zip(p.items, outs):
        call = bm.parse_call(o.text)
        ok, why = bm.check_call(call, it.data["ground_truth"])
        extra = {}
        if p.tier == "easy":
            extra["function_named"] = bm.names_function(o.text, it.data["ground_truth"], it.data["functions"])
        out += rows(p, model, it, f"{why}: {o.text[-200:]}", **{it.data["category"]: ok}, **extra,
                    form=call is not None, eos=o.finished)
    return out


SCORERS = {"heldout": heldout_scores, "reasoning_gym": reasoning_gym_scores,
           "humaneval": humaneval_scores, "bfcl": bfcl_scores, GENERATED: heldout_scores}


# --- plans, budget and the run -------------------------------------------------------------------

def suite_envs(st: EvalSettings, suite: str):
    """The environments of `suite` when they are not the default ones (None: the defaults)."""
    if suite != GENERATED:
        return None
    if st.suite_dir is None:
        raise ValueError("the generated suite needs a suite folder; pass --suite-dir")
    from spade_mini.adapters.registration import suite_envs as read_envs
    return read_envs(st.suite_dir)


def make_plans(st: EvalSettings, skipped: dict[str, str], sizes: dict | None = None) -> list[Plan]:
    """Every requested (suite, tier); a suite whose package is missing is skipped (recorded)."""
    plans = []
    for suite in st.suites:
        for tier in st.tiers:
            n = (sizes or {}).get((suite, tier), getattr(st, SIZE_FIELDS[suite]))
            try:
                plans.append(plan(suite, tier, n, st.seed, suite_envs(st, suite)))
            except bm.MissingBenchmark as e:
                print(f"skipping {suite}: {e}", file=sys.stderr)
                skipped[suite] = str(e)
                break
    return plans


def budget_sizes(policy, cfg, st: EvalSettings, plans: list[Plan], n_models: int) -> dict:
    """n per (suite, tier) so every model fits in st.budget_minutes: each (suite, tier) gets an
    equal share of what the probes left, divided by its measured seconds per item."""
    t0 = clock()
    per_item = {}
    for p in plans:
        n = 1 if p.suite in PLAYED else st.probe_items  # one seed already plays every environment
        start = clock()
        SCORERS[p.suite](policy, cfg, st, plan(p.suite, p.tier, n, st.seed, suite_envs(st, p.suite)), "probe")
        per_item[(p.suite, p.tier)] = (clock() - start) / n
    share_s = max(0.0, st.budget_minutes * 60 - (clock() - t0)) / max(1, len(plans) * n_models)
    sizes = {}
    for (suite, tier), s in per_item.items():
        sizes[(suite, tier)] = max(1, min(MAX_BUDGET_ITEMS, int(share_s / s)))
        print(f"budget: {suite}/{tier} {s:.2f}s per {'seed' if suite in PLAYED else 'item'} -> n={sizes[(suite, tier)]}")
    return sizes


def evaluate(policy, cfg, st: EvalSettings, plans: list[Plan], model: str) -> list[ItemScore]:
    return [s for p in plans for s in SCORERS[p.suite](policy, cfg, st, p, model)]


def run_all(cfg, st: EvalSettings, specs, out_dir: Path, load=None) -> dict:
    """Plan once, then score every model on the same plans; write the results."""
    load = load or load_model
    scores: list[ItemScore] = []
    skipped: dict[str, str] = {}
    plans = make_plans(st, skipped)
    for i, (name, ckpt) in enumerate(specs):
        policy = load(cfg, ckpt)
        if i == 0 and st.budget_minutes is not None:
            plans = make_plans(st, skipped, budget_sizes(policy, cfg, st, plans, len(specs)))
        scores += evaluate(policy, cfg, st, plans, name)
        if i == 0:
            print_power(scores, name)  # what the comparisons to come can detect
        del policy
        gc.collect()
    return write_results(out_dir, cfg, st, [n for n, _ in specs], scores, skipped)


# --- models --------------------------------------------------------------------------------------

def model_specs(checkpoints: list[str], include_base: bool) -> list[tuple[str, str | None]]:
    """(display name, checkpoint folder or None for the base model)."""
    specs = [("base", None)] if include_base else []
    return specs + [(f"{Path(c).parent.name}/{Path(c).name}", c) for c in checkpoints]


def load_model(cfg, checkpoint: str | None):
    """The base policy from `cfg`, or a checkpoint loaded into a policy built from its run's
    config.json (device and cache from `cfg`)."""
    from spade_mini.config import Config
    from spade_mini.policy import load_policy, load_trainable
    if checkpoint is None:
        return load_policy(cfg)
    run_cfg = Path(checkpoint).parent / "config.json"
    if not run_cfg.is_file():
        raise FileNotFoundError(f"{run_cfg} does not exist; --checkpoints takes runs/<name>/checkpoint-<i> folders.")
    names = {f.name for f in dataclasses.fields(Config)}
    values = {k: v for k, v in json.loads(run_cfg.read_text()).items() if k in names}
    policy = load_policy(Config(**{**values, "device": cfg.device, "cache_dir": cfg.cache_dir}))
    load_trainable(policy, checkpoint)
    return policy
