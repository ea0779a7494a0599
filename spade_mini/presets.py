"""The presets: what each of `cpu`, `cpu-smoke` and `gpu` changes from `Config`'s defaults
(spade_mini/config.py, where every flag has its docstring). Plain data; `Config.from_preset`
applies one, then a config file and flags override it.
"""

# Every preset keeps its environments at the agent's edge (docs/the-active-pool.md): designs
# are admitted to a pool when the agent's no-hint plays were informative and replayed while they
# stay at its edge (an unjudged one leaves after 4 iterations, Config's pool_max_age: the reference
# keeps each game 4 steps), the designer runs every 4 iterations or when the pool is short, and
# its reward pays regret only inside the band, against the mean of its whole cohort.
ACTIVE_POOL = dict(design_every=4, designer_reward="gated_blend", designer_baseline="cohort")

# Presets only list what differs from the defaults above.
PRESETS: dict[str, dict] = {
    # The tests' preset and a smoke run: a few iterations of the whole loop on a 2-core CPU in
    # minutes, sized so that the 135M embedded model really plays (float32 whatever the CPU, so
    # that tests compare the same numbers on every machine): the starter tier (one- and two-step games it wins
    # sometimes) as its examples, a warm start on them, the short "answer" agent prompt (turns
    # end with EOS), one memory reference per prompt, 8 paired seeds per design (the agent needs
    # returns that differ within a design to learn anything) and a learning rate that moves a
    # LoRA adapter in a few iterations. Quantization is off: 4-bit decoding is slower on CPU and
    # saves little memory on a 135M model.
    "cpu-smoke": dict(
        model="embedded", quantize="none", dtype="float32", iterations=3, designs_per_iteration=4,
        plays_per_design=8, design_max_new_tokens=400, hint_max_new_tokens=48,
        turn_max_new_tokens=24, max_turns=6, max_context_tokens=2048, corpus_max_words=60,
        lora_r=16, lora_alpha=32, lr=5e-4, hint_source="env", micro_batch=4,
        examples="starter", eval_seeds=16,
        agent_template="answer", memory_references=1, warm_start_steps=12, warm_start_lr=1e-3,
        warm_start_designs=2, warm_start_turns=8, **{**ACTIVE_POOL, "design_every": 1},  # the designer in every iteration
        pool_fill="both",  # the 135M designer rarely writes a valid game: the agent plays the examples meanwhile
    ),
    # A CPU run that learns, on the built-in model that measures best for it
    # (docs/choosing-a-model.md): Qwen2.5-Coder-1.5B-Instruct writes valid environments and plays the starter tier
    # at its edge without any warm start (so nothing it trains on leaks into what the curve
    # measures). Unquantized, dtype measured (bf16 where this CPU computes it faster); the
    # environments' own hints (writing one costs a generation call a design); a design budget
    # its sources fit; agent turns short ("answer"); 40 seeds per held-out starter for --eval-every
    # (419 distinct items a point, enough to see a change of about 0.10), and 64 seeds per
    # environment of the transfer suites at the start and the last point (278 distinct standard
    # held-out items, 628 starters without their example; reasoning-gym keeps 8 a family). The pool
    # starts with the starter examples and the designer adds to them ("both"), so the agent
    # trains from the first iteration on any CPU and a design earns its place beside them.
    "cpu": dict(
        model="qwen-coder-1.5b", quantize="none", iterations=3, designs_per_iteration=8,
        plays_per_design=8, design_max_new_tokens=512, hint_max_new_tokens=48,
        turn_max_new_tokens=24, max_turns=6, max_context_tokens=1024, corpus_max_words=60,
        lora_r=16, lora_alpha=32, lr=2e-4, hint_source="env", micro_batch=4,
        examples="starter", eval_seeds=40, transfer_items=64, agent_template="answer", memory_references=1,
        **{**ACTIVE_POOL, "design_every": 1}, pool_fill="both", valid_designs=4, design_seconds=600,
        # Design throughput (bench/RESULTS.md, "Rows a design call"): one call of 48 rows a
        # regeneration (12.5 s a design on a Xeon with AMX, 22 s at 8 rows), every iteration, at
        # most 12 calls a run. Round five's gate admits about 1.3% of designs as non-re-skins, so a
        # 12-iteration run expects about 7.5 (the issue-54 budget), at about 13x a fixed pool's time.
        # Every design scored costs the update about 11 s (547 s for 48): the invalid ones are
        # thinned to a quarter, each counted 4 times (the same gradient in expectation).
        design_batch=48, design_attempts=48, design_budget=576, invalid_update_fraction=0.25,
    ),
    # The paper's smallest model, in 4-bit with LoRA, on one GPU of 24 GB or more (the memory
    # plan chunks every phase to the device: docs/gpu.md); the paper's agent prompt
    # ("reasoning"), no warm start (an instruct model of this size needs none).
    "gpu": dict(
        model="Qwen/Qwen3-4B-Instruct-2507", quantize="4bit", iterations=400,
        designs_per_iteration=24, plays_per_design=8, design_max_new_tokens=4096,
        hint_max_new_tokens=256, turn_max_new_tokens=1024, max_context_tokens=16384,
        corpus_max_words=2000, gradient_checkpointing=True, lr=1e-5, micro_batch=64,
        **ACTIVE_POOL, valid_designs=12, design_attempts=72,
    ),
}
