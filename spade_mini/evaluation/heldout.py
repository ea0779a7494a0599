"""The held-out suite of eval: the HELDOUT environments played by the agent, full and easy.

Items are (environment, seed) pairs; `play_heldout` plays them with the same `play_episodes` as
training, the hint arm (when asked) on the same seeds as the no-hint arm, the hint being the
policy's or the environment's own as `cfg.hint_source` says. The easy level runs the same
source with smaller numbers: class attributes assigned below the class (EASY_SETTINGS), and
tool-use environments that let a wrong answer be retried. `episode_form` reads an episode's
turns for the format metrics that move first in a small model.
Omitted: held-out environments written by the designer (those would not be held out).
"""
from __future__ import annotations

import dataclasses
import json
import re

from tqdm import tqdm

from spade_mini.agent import Job, last_boxed, play_episodes
from spade_mini.settings import play_settings
from spade_mini.evaluation.benchmarks import Item

# The held-out games at an easy setting: class attributes set below the class (same code, smaller
# numbers). Tool-use environments get TOOL_USE_EASY: a wrong answer does not end the episode. An
# evaluation setting, not a difficulty level of the contract (reset's options={"level": n}):
# held-out environments have one level, and nothing here reaches training.
EASY_SETTINGS = {
    "memory_pairs": {"PAIRS": 2, "QUESTIONS": 1},
    "unscramble": {"MAX_TRIES": 6},
    "heavy_coin": {"COINS": 3, "MAX_WEIGHINGS": 1},
    "compass_walk": {"LEGS": 1},
}
TOOL_USE_EASY = {"end_on_wrong_answer": False}


def easy_env(env):
    """A held-out environment at its easy level (EASY_SETTINGS), as a new HandEnv."""
    overrides = EASY_SETTINGS.get(env.name, TOOL_USE_EASY if env.setting == "tool_use" else {})
    cls = re.search(r"^class (\w+Env)\b", env.source, re.M).group(1)
    lines = "".join(f"{cls}.{key} = {value!r}\n" for key, value in overrides.items())
    return dataclasses.replace(env, source=f"{env.source}\n\n# easy level\n{lines}")


def heldout_items(tier: str, n: int, seed: int, envs=None) -> list[Item]:
    """n seeds of every environment (`envs`, else HELDOUT at the tier's level)."""
    from spade_mini.envs import HELDOUT
    pool = envs if envs is not None else HELDOUT if tier == "full" else [easy_env(e) for e in HELDOUT]
    return [Item(f"{e.name}/seed{s}", [], {"env": e, "seed": s})
            for e in pool for s in range(seed * 1000, seed * 1000 + n)]


def play_heldout(policy, cfg, items: list[Item], arms, temperature: float, desc: str) -> list[tuple]:
    """(item, arm, Episode) for every item and arm, one lockstep batch per setting. Hints are
    read as in training (designer/hints.py: outside the children that play, leak-checked)."""
    from spade_mini.designer import episode_hints, generate_hints
    envs = list({it.data["env"].name: it.data["env"] for it in items}.values())
    hints = {}  # (environment, seed) -> the hint its hint arm shows
    if "hint" in arms:
        written = (generate_hints(policy, [e.source for e in envs], [e.setting for e in envs],
                                  cfg.hint_max_new_tokens, temperature=cfg.hint_temperature)
                   if cfg.hint_source == "policy" else [None] * len(envs))  # None: its hint()
        seeds = [[it.data["seed"] for it in items if it.data["env"].name == e.name] for e in envs]
        read = episode_hints([e.source for e in envs], seeds, written,
                             limits=play_settings(cfg).limits)
        hints = {(e.name, seed): hint for e, env_seeds, r in zip(envs, seeds, read)
                 for seed, hint in zip(env_seeds, r.hints)}
    out = []
    for setting in sorted({e.setting for e in envs}):  # tool-use prompts are longer: less padding
        group = [(it, arm) for it in items for arm in arms if it.data["env"].setting == setting]
        jobs = [Job(it.data["env"].source, it.data["seed"], arm,
                    hints.get((it.data["env"].name, it.data["seed"])) if arm == "hint" else None,
                    it.id) for it, arm in group]
        bar = tqdm(total=cfg.max_turns, desc=f"{desc} {setting}", unit="turn")
        episodes = play_episodes(policy, jobs, play_settings(cfg, temperature),
                                 on_turn=lambda turn, live: bar.update(1))
        bar.close()
        out += [(it, arm, ep) for (it, arm), ep in zip(group, episodes)]
    return out


TOOL_FORM = re.compile(r"<(tool_call|answer)>.*?</\1>", re.S)


def usable_call(action: str, tools: list[dict]) -> bool:
    """An answer, or a tool call naming one of `tools` with its required arguments and no others."""
    if action.startswith("<answer>"):
        return True
    m = re.fullmatch(r"<tool_call>(.*)</tool_call>", action, re.S)
    try:
        call = json.loads(m.group(1)) if m else None
    except json.JSONDecodeError:
        return False
    if not isinstance(call, dict) or not isinstance(call.get("arguments", {}), dict):
        return False
    specs = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    if call.get("name") not in specs:
        return False
    args, params = set(call.get("arguments", {})), specs[call["name"]]
    return set(params.get("required", [])) <= args <= set(params.get("properties", {}))


def episode_form(ep) -> dict[str, float]:
    """Shares of an episode's turns: in the expected form, ended by EOS, invalid (tool use)."""
    texts = [m["content"] for m in ep.messages if m["role"] == "assistant"]
    if not texts:
        return {}
    n = len(texts)
    out = {"form": sum(bool(TOOL_FORM.search(t)) if ep.tools else last_boxed(t) is not None for t in texts) / n,
           "eos": (n - (ep.end_reason == "no_eos")) / n}  # only a turn that was cut ends an episode so
    if ep.tools:  # in games an unusable action is an unboxed one, which `form` counts already
        out["invalid_action"] = sum(not usable_call(t.action, ep.tools) for t in ep.turns) / n
    return out
