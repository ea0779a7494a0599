"""What each step of an iteration needs of the flags, built once from a Config.

    Settings.of(cfg)   the shape (shape.py), and one settings object per step:
        fill      step 1   what fills the pool, how often the designer runs
        design    step 1   designer/design.py DesignSettings, with the gate's (gate/)
        hint      step 2   who writes the hint, its token budget and temperature
        play      step 3   agent.py PlaySettings (also the curve's and held-out evaluation's)
        score     step 4   reward/scores.py ScoreSettings
        samples   step 6   the advantages, the invalid designs' rewards, the designer's share
        update    step 7   reinforce.py UpdateSettings
        align     steps 7-8 alignment.py: how often, and who reads it (pool, memory)

Every field is a flag's value or a count derived from flags (docs/flags.md); nothing here reads
anything but the Config. A data-parallel rank designs its share of the regeneration's caps.
"""
from __future__ import annotations

from dataclasses import dataclass

from spade_mini.agent import PlaySettings
from spade_mini.designer.design import DesignSettings
from spade_mini.gate import GateSettings
from spade_mini.reinforce import UpdateSettings
from spade_mini.reward import ScoreSettings, lowest_valid_reward
from spade_mini.sandbox import SandboxLimits
from spade_mini.shape import Shape


@dataclass(frozen=True)
class FillSettings:
    fill: str = "designs"        # "designs", "examples" or "both" (fill.py)
    design_every: int = 1        # the designer runs every this many iterations, or when the pool is short
    keep: bool = True            # the pool keeps its environments from one iteration to the next
    budget: int = 0              # design attempts a whole run may write (0: no limit)
    budget_s: float = 0.0        # seconds of designing a whole run may spend (0: no limit)


@dataclass(frozen=True)
class HintSettings:
    source: str = "policy"       # "policy" (it reads the source and writes one) or "env" (its hint())
    max_new_tokens: int = 96
    temperature: float = 0.3
    limits: SandboxLimits | None = None
    max_turns: int = 25          # solution() is read for at most this many actions


@dataclass(frozen=True)
class SampleSettings:
    normalize_std: bool = False
    invalid_mode: str = "graded"   # "graded", "constant" or "drop"
    invalid_reward: float = -1.0
    lowest_valid: float = 0.0      # the least a valid design earns (graded rewards stay below)
    designer_baseline: str = "skill"
    invalid_fraction: float = 1.0  # the share of invalid designs the update scores
    train_designer: bool = True


@dataclass(frozen=True)
class AlignSettings:
    every: int = 0               # measure every this many iterations (0: never)
    pool: bool = False           # the pool's replay weight and retirement read it
    memory: bool = False         # the memory ranks its references by it
    designer: float = 0.0        # its weight in a new design's reward (paid in the design's own iteration)
    tier: str = "starter"        # the run's example tier: the set is the other one's
    setting: str = "games"
    model: str = ""              # whose measured start rates choose the set's items


@dataclass(frozen=True)
class Settings:
    shape: Shape
    fill: FillSettings
    design: DesignSettings
    hint: HintSettings
    play: PlaySettings
    score: ScoreSettings
    samples: SampleSettings
    update: UpdateSettings
    align: AlignSettings = AlignSettings()

    @classmethod
    def of(cls, cfg, world: int = 1) -> "Settings":
        """A rank of `world` designs its share of the regeneration's caps (rounded up)."""
        return cls(Shape.of(cfg), FillSettings(cfg.pool_fill, cfg.design_every, cfg.pool_keep, cfg.design_budget,
                                                   cfg.design_budget_s),
                   design_settings(cfg, world), HintSettings(cfg.hint_source, cfg.hint_max_new_tokens,
                                                             cfg.hint_temperature, limits(cfg), cfg.max_turns),
                   play_settings(cfg), ScoreSettings(cfg.designer_reward, cfg.regret_estimator),
                   SampleSettings(cfg.normalize_std, "drop" if cfg.drop_invalid else cfg.invalid_reward_mode,
                                  cfg.invalid_reward, lowest_valid_reward(cfg.designer_reward, cfg.regret_estimator),
                                  cfg.designer_baseline, cfg.invalid_update_fraction, not cfg.no_designer_training),
                   update_settings(cfg), AlignSettings(
                       every=cfg.alignment_every, pool=cfg.alignment_pool, memory=cfg.alignment_memory,
                       designer=cfg.designer_alignment, tier=cfg.examples, setting=cfg.setting, model=cfg.model))


def limits(cfg) -> SandboxLimits:
    return SandboxLimits(call_timeout_s=cfg.step_timeout_s)


def play_settings(cfg, temperature: float | None = None) -> PlaySettings:
    return PlaySettings(cfg.max_turns, cfg.turn_max_new_tokens, cfg.max_context_tokens, limits(cfg),
                        cfg.return_mode, cfg.crash_reward, cfg.agent_template, temperature)


def gate_settings(cfg) -> GateSettings:
    """The run's gate: its turn cap and the agent's tokens a turn (envs.MIN_INSTANCES distinct
    instances, the same for every preset)."""
    return GateSettings(limits(cfg), cfg.max_turns, cfg.turn_max_new_tokens, cfg.require_solution)


def design_settings(cfg, world: int = 1) -> DesignSettings:
    shape = Shape.of(cfg)
    share = lambda n: -(-n // world)  # noqa: E731  (a rank's part of a cap, rounded up)
    return DesignSettings(max_new_tokens=cfg.design_max_new_tokens, temperature=cfg.temperature,
                          references=cfg.memory_references, until_valid=share(shape.valid_wanted),
                          retries=cfg.design_retries, cap=share(shape.design_cap), max_seconds=cfg.design_seconds,
                          levels=cfg.design_levels,
                          gate=gate_settings(cfg), novelty=cfg.novelty)


def update_settings(cfg) -> UpdateSettings:
    return UpdateSettings(cfg.designer_weight, cfg.micro_batch, cfg.max_grad_norm, cfg.designer_only_steps)
