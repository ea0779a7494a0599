"""The warm start: a few supervised steps that teach a small model both roles before self-play.

SPADE starts from instruct models that can already write a valid environment and answer in the
expected format. A 135M model cannot (on a CPU it wrote no valid environment and cut its turns
off), so a few supervised steps on the bundled EXAMPLE environments bootstrap the loop:

- designer samples: the real designer prompt for an example's skill (a corpus document and a
  memory block drawn as in an iteration, from a memory WITHOUT that example) -> the example's
  source (its `solution()` included) in the fenced block the extractor expects, then EOS;
- agent samples: the turns of examples played by their own `solution()` in the sandbox,
  rendered through the agent's own templates, each completion one short action and EOS.

The step is `reinforce.update` with advantage 1, which is the mean NLL per role: one trainer,
not two. The held-out environments never enter (eval stays clean). The result is cached under
`<cache_dir>/warm_start/<key>/`, keyed on everything that changes it; a partial run resumes from
its last step. `python -m spade_mini.warmstart [train.py flags]` builds the cache alone.
"""
from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from spade_mini.agent import GAME_TEMPLATES, TOOL_TEMPLATE, first_message
from spade_mini.designer import SKILLS, Memory, designer_prompt
from spade_mini.envs import ALL_HELDOUT, MAX_TURNS, HandEnv, tier
from spade_mini.policy import load_trainable, save_trainable, token_logprobs
from spade_mini.reinforce import Sample, UpdateSettings, make_optimizer, update
from spade_mini.sandbox import SandboxedEnv, SandboxError

SOLUTION_SEEDS = 3  # seeds per example whose solution() plays give agent samples
CACHE_FORMAT = 1    # bump when the data or the procedure changes meaning


@dataclass
class WarmStartData:
    designer: list[Sample]   # one per example (a prompt drawn per example)
    agent: list[Sample]      # every turn of every solution play
    sources: set[str]        # the environment sources the samples were built from


def examples_for(cfg) -> list[HandEnv]:
    """The examples of the run's tier (`--examples`) in its setting."""
    return tier(cfg.examples, cfg.setting)


def reply_ids(policy, text: str) -> list[int]:
    """The tokens the policy would generate for `text` as a whole reply: the text, then EOS."""
    eos = policy.tokenizer.eos_token_id
    eos = eos if eos in policy.eos_ids else min(policy.eos_ids)
    return policy.tokenizer(text, add_special_tokens=False)["input_ids"] + [eos]


def designer_samples(policy, examples: list[HandEnv], corpus, rng: random.Random,
                     references: int) -> list[Sample]:
    """For each example: its skill's designer prompt (memory without it) -> its source."""
    skills = {s.key: s for group in SKILLS.values() for s in group}
    out = []
    for example in examples:
        memory = Memory.seeded([e for e in examples if e.name != example.name])
        doc = corpus.sample(rng) if corpus is not None else None
        block = memory.render(memory.select(example.skill, rng, references))
        chat = designer_prompt(skills[example.skill], doc, block)
        reply = f"```python\n{example.source.strip()}\n```"
        out.append(Sample(policy.prompt_ids(chat), reply_ids(policy, reply), 1.0, "designer"))
    return out


def solved_source(example: HandEnv) -> str:
    """The example with hint() answering its solution() as JSON: a way to read the winning
    actions out of the sandbox without running the environment in this process."""
    name = re.search(r"^class\s+(\w*Env)\b", example.source, re.M).group(1)
    return (example.source.rstrip() + "\n\n\n" +
            f"{name}.hint = lambda self: __import__('json').dumps(self.solution())\n")


def agent_samples(policy, examples: list[HandEnv], template: str, limits=None,
                  seeds: int = SOLUTION_SEEDS) -> list[Sample]:
    """Every turn of each example played by its solution() on `seeds` seeds, as the agent sees
    it. A play that does not end in a win is dropped (with a line on stderr)."""
    out = []
    for example in examples:
        for seed in range(seeds):
            try:
                turns = _solution_turns(policy, example, seed, template, limits)
            except (SandboxError, ValueError) as e:
                print(f"warm start: skipped {example.name} seed {seed}: {e}", file=sys.stderr)
                continue
            out += turns
    return out


def _solution_turns(policy, example: HandEnv, seed: int, template: str, limits) -> list[Sample]:
    with SandboxedEnv(solved_source(example), limits=limits) as env:
        obs, info = env.reset(seed=seed)
        actions = json.loads(env.hint())
        if not (isinstance(actions, list) and all(isinstance(a, str) for a in actions)):
            raise ValueError("solution() did not return a list of actions")
        tools = info.get("tools") or None
        messages = [{"role": "user", "content": first_message(obs, tools, None, template)}]
        turns, reward = [], 0.0
        for action in actions[:MAX_TURNS]:
            turns.append(Sample(policy.prompt_ids(messages), reply_ids(policy, action), 1.0, "agent"))
            obs, reward, terminated, truncated, _ = env.step(action)
            messages += [{"role": "assistant", "content": action}, {"role": "user", "content": obs}]
            if terminated or truncated:
                break
        if reward <= 0:
            raise ValueError("its solution did not win")
        return turns


def build_data(policy, cfg, corpus, rng: random.Random) -> WarmStartData:
    examples = examples_for(cfg)
    if not examples:
        raise ValueError(f"no example environments for setting {cfg.setting!r}")
    held_out = {e.source for e in ALL_HELDOUT}
    sources = {e.source for e in examples}
    assert not sources & held_out, "a held-out environment reached the warm start"
    corpus = None if cfg.no_corpus else corpus
    return WarmStartData(designer_samples(policy, examples, corpus, rng, cfg.memory_references),
                         agent_samples(policy, examples, cfg.agent_template), sources)


@torch.no_grad()
def role_nll(policy, samples: list[Sample]) -> dict[str, float]:
    """Mean negative log-likelihood per role of `samples` (per completion token)."""
    policy.model.eval()
    totals = {"agent": [0.0, 0], "designer": [0.0, 0]}
    for s in samples:
        with policy.compute():
            logp = token_logprobs(policy.model, [s.prompt_ids], [s.completion_ids], policy.pad_id)[0]
        totals[s.role][0] -= logp.sum().item()
        totals[s.role][1] += len(s.completion_ids)
    return {role: (t / n if n else None) for role, (t, n) in totals.items()}


def cache_key(cfg) -> str:
    """A hash of everything that changes the warm-started weights."""
    from spade_mini.designer import prompts
    fields = ["model", "quantize", "full_finetune", "separate_adapters", "lora_r", "lora_alpha",
              "lora_dropout", "lora_targets", "dtype", "warm_start_seed", "setting", "agent_template",
              "corpus", "corpus_max_words", "no_corpus", "memory_references", "warm_start_steps",
              "warm_start_lr", "warm_start_designs", "warm_start_turns", "micro_batch",
              "max_grad_norm", "designer_weight"]
    import peft
    import transformers
    data = {"format": CACHE_FORMAT, "config": {f: getattr(cfg, f) for f in fields},
            "examples": [e.source for e in examples_for(cfg)], "templates": [GAME_TEMPLATES, TOOL_TEMPLATE],
            "designer": [prompts.SYSTEM, prompts.CONTRACT, prompts.RULES, prompts.GAME_EXAMPLE,
                         prompts.TOOL_EXAMPLE],
            "versions": [torch.__version__, transformers.__version__, peft.__version__]}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def cache_folder(cfg) -> Path:
    return Path(cfg.cache_dir).expanduser() / "warm_start" / cache_key(cfg)


def warm_start(policy, cfg, corpus, log=print) -> list[dict]:
    """Warm-start `policy` in place for cfg.warm_start_steps steps, from the cache when it holds
    this exact warm start; return one row per step (the step's per-role NLL, as trained)."""
    folder = cache_folder(cfg)
    if (folder / "rows.jsonl").is_file():
        load_trainable(policy, folder)
        log(f"warm start: loaded from {folder}")
        return _read_rows(folder / "rows.jsonl")
    partial = folder.with_name(folder.name + ".partial")
    rng = random.Random(cfg.warm_start_seed)
    torch_state = torch.get_rng_state()
    torch.manual_seed(cfg.warm_start_seed)
    data = build_data(policy, cfg, corpus, rng)
    optimizer = make_optimizer(policy.model, cfg.warm_start_lr)
    rows: list[dict] = []
    order: dict[str, list[int]] = {"designer": [], "agent": []}  # what is left of each pass
    if (partial / "state.pt").is_file():  # an interrupted warm start continues where it stopped
        load_trainable(policy, partial)
        state = torch.load(partial / "state.pt", weights_only=False)
        optimizer.load_state_dict(state["optimizer"])
        rng.setstate(state["rng"])
        torch.set_rng_state(state["torch_rng"])
        rows, order = state["rows"], state["order"]
        log(f"warm start: resuming after step {len(rows)}")
    for step in range(len(rows), cfg.warm_start_steps):
        batch = (_draw(data.designer, cfg.warm_start_designs, order["designer"], rng) +
                 _draw(data.agent, cfg.warm_start_turns, order["agent"], rng))
        t = time.time()
        settings = UpdateSettings(cfg.designer_weight, cfg.micro_batch, cfg.max_grad_norm,
                                  designer_only_step=True)  # supervised: the skip guards self-play's step only
        stats = update(policy, batch, optimizer, settings)
        rows.append({"step": step, "agent_nll": stats.agent_loss, "designer_nll": stats.designer_loss,
                     "grad_norm": stats.grad_norm, "tokens": stats.tokens, "seconds": time.time() - t})
        log(f"warm start {step + 1}/{cfg.warm_start_steps}: agent NLL {stats.agent_loss:.3f}, "
            f"designer NLL {stats.designer_loss:.3f} ({rows[-1]['seconds']:.0f} s)")
        _save(policy, partial, {"optimizer": optimizer.state_dict(), "rng": rng.getstate(),
                                "torch_rng": torch.get_rng_state(), "rows": rows, "order": order})
    save_trainable(policy, partial)
    (partial / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (partial / "state.pt").unlink(missing_ok=True)
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)  # whole or not at all: a half-written cache is never loaded
    torch.set_rng_state(torch_state)
    log(f"warm start: cached in {folder}")
    return rows


def _draw(pool: list[Sample], n: int, order: list[int], rng: random.Random) -> list[Sample]:
    """n samples from pool, each pass over the pool in a fresh shuffled order."""
    out = []
    for _ in range(min(n, len(pool))):
        if not order:
            order.extend(rng.sample(range(len(pool)), len(pool)))
        out.append(pool[order.pop()])
    return out


def _save(policy, folder: Path, state: dict) -> None:
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_trainable(policy, tmp)
    torch.save(state, tmp / "state.pt")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)


def _read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main(argv=None) -> int:
    """Build (or confirm) the warm-start cache for the given train.py flags."""
    from spade_mini.cli import main_config
    from spade_mini.designer import Corpus
    from spade_mini.policy import load_policy
    from spade_mini.run.planning import fit_plan
    cfg = main_config(argv, prog="python -m spade_mini.warmstart",
                      description="Warm-start the policy on the bundled examples and cache it.")
    if cfg.warm_start_steps <= 0:
        print("nothing to do: --warm-start-steps is 0 (the cpu-smoke preset sets it)")
        return 0
    torch.manual_seed(cfg.seed)
    policy = load_policy(cfg)
    fit_plan(policy, cfg)
    corpus = None if cfg.no_corpus else Corpus.load(cfg.corpus, cfg.corpus_max_words)
    warm_start(policy, cfg, corpus)
    print(cache_folder(cfg))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
