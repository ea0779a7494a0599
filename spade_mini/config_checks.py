"""The checks that a Config's values fit together (config.py calls `check` as a Config is made),
and the choices of its string flags. Each refusal is one sentence that names the fix.
"""
from __future__ import annotations

from spade_mini.envs import TIERS
from spade_mini.reward import DESIGNER_REWARD_KINDS, REGRET_ESTIMATORS, lowest_valid_reward


class ConfigError(ValueError):
    """A bad flag or config file; its message is one sentence naming the fix."""


CHOICES: dict[str, tuple[str, ...]] = {
    "quantize": ("4bit", "none"),
    "device": ("auto", "cpu", "cuda"),
    "dtype": ("auto", "float32", "bfloat16", "float16"),
    "setting": ("games", "tool_use", "mix"),
    "hint_source": ("policy", "env"),
    "designer_reward": DESIGNER_REWARD_KINDS,
    "regret_estimator": REGRET_ESTIMATORS,
    "invalid_reward_mode": ("graded", "constant"),
    "designer_baseline": ("skill", "cohort"),
    "pool_fill": ("designs", "examples", "both"),
    "agent_template": ("reasoning", "answer"),
    "return_mode": ("last", "sum"),
    "report_to": ("none", "tensorboard", "wandb"),
    "examples": tuple(TIERS),
}


def check(cfg) -> None:
    for name, allowed in CHOICES.items():
        if getattr(cfg, name) not in allowed:
            raise ConfigError(f"--{name.replace('_', '-')} must be one of {', '.join(allowed)}, "
                              f"not {getattr(cfg, name)!r}.")
    if cfg.full_finetune and cfg.quantize != "none":
        raise ConfigError("--full-finetune trains every weight, which 4-bit weights cannot hold; "
                          "add --quantize none.")
    if cfg.invalid_reward_mode == "graded" and not cfg.drop_invalid:
        floor = lowest_valid_reward(cfg.designer_reward, cfg.regret_estimator)
        if cfg.invalid_reward >= floor:
            raise ConfigError(f"graded invalid rewards must stay below {floor}, the least a valid "
                              f"design can earn; lower --invalid-reward (now {cfg.invalid_reward}) "
                              "or use --invalid-reward-mode constant.")
    if not 0.0 <= cfg.pool_low <= cfg.pool_high <= 1.0:
        raise ConfigError(f"--pool-low {cfg.pool_low} and --pool-high {cfg.pool_high} are solve "
                          "rates with low <= high in [0, 1]; give e.g. --pool-low 0.1 --pool-high 0.9.")
    if min(cfg.design_every, cfg.pool_window, cfg.pool_max) < 1 or min(
            cfg.pool_max_age, cfg.pool_min, cfg.valid_designs, cfg.design_attempts, cfg.design_budget,
            cfg.episodes_per_iteration, cfg.design_batch, cfg.save_every, cfg.keep_checkpoints,
            cfg.design_seconds, cfg.design_budget_s, cfg.alignment_every) < 0:
        raise ConfigError("--design-every, --pool-window and --pool-max count iterations and environments (1 or "
                          "more); the other counts, caps and budgets take 0 or more (0: every one, or no limit).")
    if cfg.valid_designs > (cfg.design_batch or cfg.designs_per_iteration):
        raise ConfigError(f"--valid-designs {cfg.valid_designs} asks for more valid designs than a regeneration's "
                          f"{cfg.design_batch or cfg.designs_per_iteration} slots (--design-batch); give at most that many.")
    if not 0.0 < cfg.invalid_update_fraction <= 1.0:
        raise ConfigError(f"--invalid-update-fraction {cfg.invalid_update_fraction} is the share of invalid "
                          "designs the update scores; give a number in (0, 1], e.g. 0.25.")
    if cfg.full_finetune and cfg.separate_adapters:
        raise ConfigError("--separate-adapters gives each role a LoRA adapter, which full "
                          "fine-tuning has none of; drop one of the two flags.")
    if (cfg.alignment_pool or cfg.alignment_memory or cfg.designer_alignment) and not cfg.alignment_every:
        raise ConfigError("--alignment-pool, --alignment-memory and --designer-alignment read alignment, which "
                          "--alignment-every 0 never measures; add --alignment-every 4 (or another count).")
    if not 0.0 <= cfg.designer_alignment <= 1.0:
        raise ConfigError(f"--designer-alignment {cfg.designer_alignment} is a weight in [0, 1]; give e.g. 0.3.")
