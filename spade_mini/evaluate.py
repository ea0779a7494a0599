"""Held-out evaluation: does what the agent learned in self-designed environments transfer?

Suites: `heldout` (the hand-written HELDOUT environments, played by the same `play_episodes` as
training, without a hint and with one as an upper bound), `reasoning_gym`, `humaneval` and `bfcl`
(one-turn benchmarks from benchmarks.py, generated in batched calls). Every score is in [0, 1]
except returns. Each metric gets a 95% confidence interval: the Wilson score interval when all
its scores are 0 or 1 (solve rate, pass@1, accuracy), else the normal approximation (mean return).
Results go to `<out>/results.json`, `results.md` (a suite x model table) and `results.png`.
Omitted: pass@k for k > 1, significance tests between models, and BFCL multi-turn.
"""
from __future__ import annotations

import dataclasses
import gc
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from spade_mini import benchmarks as bm
from spade_mini.agent import Job, play_episodes
from spade_mini.sandbox import SandboxLimits

SUITES = ("heldout", "reasoning_gym", "humaneval", "bfcl")


@dataclass
class EvalSettings:
    suites: list[str] = field(default_factory=lambda: list(SUITES))
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


# Sizes per config preset; flags override them.
EVAL_PRESETS = {
    "cpu-smoke": dict(heldout_seeds=2, rg_items=12, humaneval_items=4, bfcl_items=4,
                      answer_max_new_tokens=48, code_max_new_tokens=128, batch_size=16),
    "gpu": dict(),
}


@dataclass
class ItemScore:
    suite: str
    metric: str
    model: str
    item: str
    score: float
    detail: str = ""


@dataclass
class Metric:
    suite: str
    metric: str
    model: str
    n: int
    mean: float
    low: float
    high: float
    ci: str  # "wilson" | "normal"


def interval(scores: list[float], z: float = 1.96) -> tuple[float, float, float, str]:
    """(mean, low, high, method): Wilson for 0/1 scores, else mean +- z * standard error."""
    n = len(scores)
    if n == 0:
        return float("nan"), float("nan"), float("nan"), "none"
    mean = sum(scores) / n
    if all(s in (0.0, 1.0) for s in scores):
        denom = 1 + z * z / n
        centre = (mean + z * z / (2 * n)) / denom
        half = z * math.sqrt(mean * (1 - mean) / n + z * z / (4 * n * n)) / denom
        return mean, max(0.0, centre - half), min(1.0, centre + half), "wilson"
    var = sum((s - mean) ** 2 for s in scores) / max(1, n - 1)
    half = z * math.sqrt(var / n)
    return mean, mean - half, mean + half, "normal"


def summarize(scores: list[ItemScore]) -> list[Metric]:
    groups: dict[tuple[str, str, str], list[float]] = {}
    for s in scores:
        groups.setdefault((s.suite, s.metric, s.model), []).append(s.score)
    return [Metric(suite, metric, model, len(v), *interval(v)) for (suite, metric, model), v in groups.items()]


# --- suites --------------------------------------------------------------------------------------

def heldout_suite(policy, cfg, st: EvalSettings, model: str, envs=None) -> list[ItemScore]:
    """Every HELDOUT environment (or `envs`) x K seeds, no-hint and hint arms on the same seeds."""
    from spade_mini.designer import generate_hints
    from spade_mini.envs import HELDOUT
    pool = HELDOUT if envs is None else envs
    hints: list[str | None] = [None] * len(pool)  # None: the environment's own hint()
    if cfg.hint_source == "policy":
        hints = generate_hints(policy, [e.source for e in pool], [e.setting for e in pool],
                               cfg.hint_max_new_tokens, temperature=cfg.hint_temperature)
    settings = sorted({e.setting for e in pool})
    bar = tqdm(total=cfg.max_turns * len(settings), desc=f"heldout [{model}]", unit="turn")
    episodes = []
    for setting in settings:  # one batch per setting: tool-use prompts are much longer,
        group = [(e, h) for e, h in zip(pool, hints) if e.setting == setting]  # so less padding
        jobs = [Job(env.source, st.seed * 1000 + k, arm, hint if arm == "hint" else None, env.name)
                for env, hint in group for k in range(st.heldout_seeds) for arm in ("no_hint", "hint")]
        episodes += play_episodes(policy, jobs, max_turns=cfg.max_turns, max_new_tokens=cfg.turn_max_new_tokens,
                                  max_context_tokens=cfg.max_context_tokens,
                                  limits=SandboxLimits(call_timeout_s=cfg.step_timeout_s),
                                  return_mode=cfg.return_mode, crash_reward=cfg.crash_reward,
                                  temperature=st.temperature, on_turn=lambda turn, live: bar.update(1))
        bar.update(cfg.max_turns * (settings.index(setting) + 1) - bar.n)  # episodes may end early
    bar.close()
    out = []
    for ep in episodes:
        item = f"{ep.job.design_id}/seed{ep.job.seed}"
        out.append(ItemScore("heldout", f"return_{ep.job.arm}", model, item, ep.ret, ep.end_reason))
        out.append(ItemScore("heldout", f"solve_{ep.job.arm}", model, item, float(ep.end_reason == "won"), ep.end_reason))
    return out


def generate_all(policy, items: list[bm.Item], max_new_tokens: int, st: EvalSettings, desc: str) -> list[str]:
    """Replies to every item, `batch_size` chats per batched generate call."""
    texts = []
    for start in tqdm(range(0, len(items), st.batch_size), desc=desc, unit="batch"):
        chats = [it.chat for it in items[start:start + st.batch_size]]
        texts += [c.text for c in policy.generate(chats, max_new_tokens, temperature=st.temperature)]
    return texts


def reasoning_gym_suite(policy, cfg, st: EvalSettings, model: str) -> list[ItemScore]:
    items = bm.reasoning_gym_items(st.rg_items, st.seed)
    texts = generate_all(policy, items, st.answer_max_new_tokens, st, f"reasoning_gym [{model}]")
    return [ItemScore("reasoning_gym", "accuracy", model, it.id, bm.score_reasoning_gym(it, t), t[-200:])
            for it, t in zip(items, texts)]


def humaneval_suite(policy, cfg, st: EvalSettings, model: str) -> list[ItemScore]:
    items = bm.humaneval_items(st.humaneval_items)
    texts = generate_all(policy, items, st.code_max_new_tokens, st, f"humaneval [{model}]")
    out = []
    for it, t in tqdm(list(zip(items, texts)), desc=f"humaneval tests [{model}]", unit="problem"):
        score, why = bm.run_humaneval(it.data, t, st.humaneval_timeout_s)
        out.append(ItemScore("humaneval", "pass@1", model, it.id, score, why))
    return out


def bfcl_suite(policy, cfg, st: EvalSettings, model: str) -> list[ItemScore]:
    items = bm.bfcl_items(st.bfcl_items)
    texts = generate_all(policy, items, st.answer_max_new_tokens, st, f"bfcl [{model}]")
    out = []
    for it, t in zip(items, texts):
        ok, why = bm.check_call(bm.parse_call(t), it.data["ground_truth"])
        out.append(ItemScore("bfcl", it.data["category"], model, it.id, float(ok), why))
    return out


SUITE_FNS = {"heldout": heldout_suite, "reasoning_gym": reasoning_gym_suite,
             "humaneval": humaneval_suite, "bfcl": bfcl_suite}


def evaluate(policy, cfg, st: EvalSettings, model: str, skipped: dict[str, str]) -> list[ItemScore]:
    """All requested suites for one model; a suite whose package is missing is skipped (recorded)."""
    scores = []
    for suite in st.suites:
        if suite in skipped:
            continue
        try:
            scores += SUITE_FNS[suite](policy, cfg, st, model)
        except bm.MissingBenchmark as e:
            print(f"skipping {suite}: {e}", file=sys.stderr)
            skipped[suite] = str(e)
    return scores


# --- models --------------------------------------------------------------------------------------

def model_specs(checkpoints: list[str], include_base: bool) -> list[tuple[str, str | None]]:
    """(display name, checkpoint folder or None for the base model)."""
    specs = [("base", None)] if include_base else []
    return specs + [(f"{Path(c).parent.name}/{Path(c).name}", c) for c in checkpoints]


def load_model(cfg, checkpoint: str | None):
    """The base policy from `cfg`, or a checkpoint loaded into a policy built from its run's
    config.json (device and cache from `cfg`)."""
    from spade_mini.config import Config
    from spade_mini.model import load_policy, load_trainable
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


def run_all(cfg, st: EvalSettings, specs, out_dir: Path, load=load_model) -> dict:
    scores: list[ItemScore] = []
    skipped: dict[str, str] = {}
    for name, ckpt in specs:
        policy = load(cfg, ckpt)
        scores += evaluate(policy, cfg, st, name, skipped)
        del policy
        gc.collect()
    return write_results(out_dir, cfg, st, [n for n, _ in specs], scores, skipped)


# --- outputs -------------------------------------------------------------------------------------

def write_results(out_dir: Path, cfg, st: EvalSettings, models: list[str], scores: list[ItemScore],
                  skipped: dict[str, str]) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics = summarize(scores)
    result = {"models": models, "settings": dataclasses.asdict(st),
              "config": cfg.to_dict() if hasattr(cfg, "to_dict") else {}, "skipped": skipped,
              "metrics": [dataclasses.asdict(m) for m in metrics],
              "items": [dataclasses.asdict(s) for s in scores]}
    (out_dir / "results.json").write_text(json.dumps(result, indent=1))
    (out_dir / "results.md").write_text(markdown_table(metrics, models, skipped))
    bar_plot(metrics, models, out_dir / "results.png")
    return result


def markdown_table(metrics: list[Metric], models: list[str], skipped: dict[str, str] | None = None) -> str:
    cells = {(m.suite, m.metric, m.model): m for m in metrics}
    rows = _rows(metrics)
    lines = ["| suite / metric | " + " | ".join(models) + " |", "|---|" + "---|" * len(models)]
    for suite, metric in rows:
        row = []
        for model in models:
            m = cells.get((suite, metric, model))
            row.append("-" if m is None else f"{m.mean:.3f} [{m.low:.2f}, {m.high:.2f}] n={m.n}")
        lines.append(f"| {suite} / {metric} | " + " | ".join(row) + " |")
    lines += ["", "Mean [95% CI]: Wilson score interval when every score in the cell is 0 or 1 (solve, "
              "pass@1, accuracy, BFCL; returns that are all 0/1), else the normal approximation."]
    lines += [f"Skipped {s}: {why}" for s, why in (skipped or {}).items()]
    return "\n".join(lines) + "\n"


def _rows(metrics: list[Metric]) -> list[tuple[str, str]]:
    """(suite, metric) pairs in suite order, then by metric name."""
    return sorted({(m.suite, m.metric) for m in metrics},
                  key=lambda r: (SUITES.index(r[0]) if r[0] in SUITES else len(SUITES), r[1]))


def bar_plot(metrics: list[Metric], models: list[str], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = _rows(metrics)
    cells = {(m.suite, m.metric, m.model): m for m in metrics}
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(rows) * max(1, len(models))), 4))
    width = 0.8 / max(1, len(models))
    for j, model in enumerate(models):
        xs, ys, errs = [], [], [[], []]
        for i, row in enumerate(rows):
            m = cells.get((*row, model))
            if m is not None:
                xs.append(i + j * width)
                ys.append(m.mean)
                errs[0].append(max(0.0, m.mean - m.low))
                errs[1].append(max(0.0, m.high - m.mean))
        ax.bar(xs, ys, width, yerr=errs, capsize=3, label=model)
    ax.set_xticks([i + width * (len(models) - 1) / 2 for i in range(len(rows))])
    ax.set_xticklabels([f"{s}\n{m}" for s, m in rows], fontsize=7, rotation=30, ha="right")
    ax.set_ylabel("score (95% CI)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
