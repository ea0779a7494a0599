"""Train TRL's GRPOTrainer on a run's environments: the example of docs/trl.md, runnable.

    python -m spade_mini.adapters.trl_grpo runs/<name>            # a run folder: its valid environments are exported first
    python -m spade_mini.adapters.trl_grpo suite/ --steps 4       # or a suite written by python -m spade_mini.adapters.export
    python -m spade_mini.adapters.trl_grpo suite/ --model qwen-coder-1.5b --steps 20

`--model tiny` (the default) is a random two-layer model over SmolLM2's tokenizer: it runs on a
CPU in a minute or two and shows the plumbing (it never calls the tool, so every episode is
left unfinished and returns -1). A built-in model name (`python -m spade_mini.install list`), a hub id or a local
folder trains for real. Prints each step's mean return and a summary of the episodes played;
needs `pip install -r requirements-bench.txt` (trl). A real model trains a LoRA adapter (r 16 on
q/k/v/o, as bench/bench_vs_trl.py; `--lora-r 0` trains every weight): every weight of the 1.5B in
float32 with AdamW's state does not fit 24 GB (the process was killed).
Omitted: quantization and vLLM (pass them to GRPOConfig/GRPOTrainer yourself).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

from spade_mini.config import Config
from spade_mini.adapters.registration import MANIFEST, read_suite
from spade_mini.adapters.trl_env import SuiteEnv, close_environments, prepare_tokenizer, suite_rows, turn_limit


def suite_folder(path: Path) -> Path:
    """`path` if it is a suite; a run folder's suite (exported into <run>/trl-suite) otherwise."""
    if (path / MANIFEST).is_file():
        return path
    if not (path / "envs").is_dir():
        raise SystemExit(f"error: {path} is neither a suite (manifest.json) nor a run folder "
                         "(envs/); pass runs/<name> or a folder written by python -m spade_mini.adapters.export.")
    from spade_mini.adapters.export import export_run
    out = path / "trl-suite"
    manifest = export_run(path, out)
    if not manifest["environments"]:
        raise SystemExit(f"error: {path} has no valid environment to train on; pass a run that "
                         "admitted at least one.")
    print(f"exported {len(manifest['environments'])} environments of {path} to {out}")
    return out


def load(model: str, cache_dir: str):
    """(model, tokenizer) for `model`: tiny, a built-in name, a hub id or a folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from spade_mini.policy.load import tiny_model
    from spade_mini.policy.models import MODELS, checkpoint
    path = checkpoint("embedded" if model == "tiny" else model, cache_dir) if (
        model == "tiny" or model in MODELS) else model
    tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(path))
    if model == "tiny":
        return tiny_model(tokenizer), tokenizer
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), tokenizer


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m spade_mini.adapters.trl_grpo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", type=Path, help="a run folder (runs/<name>) or an exported suite folder")
    p.add_argument("--model", default="tiny", help="tiny, a built-in model, a hub id or a folder")
    p.add_argument("--steps", type=int, default=2, help="optimizer steps")
    p.add_argument("--generations", type=int, default=4, help="rollouts per row (a GRPO group)")
    p.add_argument("--rows-per-step", type=int, default=2, help="dataset rows per step")
    p.add_argument("--max-completion-length", type=int, default=256, help="tokens, tool replies included")
    p.add_argument("--out", type=Path, default=None, help="TRL's output folder (default: <suite>/trl-out)")
    p.add_argument("--lora-r", type=int, default=16, help="LoRA rank for a real model (0: every weight)")
    args = p.parse_args(argv)
    try:
        import trl  # noqa: F401
    except ImportError:
        print("error: this example needs trl; pip install -r requirements-bench.txt", file=sys.stderr)
        return 2
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    suite = suite_folder(args.path)
    rows = suite_rows(suite, rows=max(args.steps * args.rows_per_step, len(read_suite(suite)[1])))
    model, tokenizer = load(args.model, Config().cache_dir)
    episodes: list[dict] = []
    start = time.perf_counter()

    class Report(TrainerCallback):
        def on_log(self, targs, state, control, logs=None, **kw):
            if logs and "rewards/SuiteEnv/mean" in logs:
                print(f"step {state.global_step}: mean return {logs['rewards/SuiteEnv/mean']:+.3f}, "
                      f"tool calls {logs.get('tools/call_frequency', 0):.2f} per rollout, "
                      f"{time.perf_counter() - start:.0f} s so far", flush=True)

    targs = GRPOConfig(output_dir=str(args.out or suite / "trl-out"), max_steps=args.steps,
                       per_device_train_batch_size=args.rows_per_step * args.generations,
                       num_generations=args.generations, max_completion_length=args.max_completion_length,
                       max_tool_calling_iterations=turn_limit(suite), learning_rate=1e-5, beta=0.0,
                       use_cpu=not torch.cuda.is_available(), bf16=False,
                       report_to="none", save_strategy="no", logging_steps=1, seed=0)
    lora = None
    if args.model != "tiny" and args.lora_r > 0:
        from peft import LoraConfig
        lora = LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, lora_dropout=0.0, task_type="CAUSAL_LM",
                          target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=targs, peft_config=lora,
                          train_dataset=Dataset.from_list(rows), callbacks=[Report()],
                          environment_factory=lambda: SuiteEnv(suite, record=episodes))
    try:
        trainer.train()
    finally:
        close_environments()
    ends = Counter(e["end"].split(":")[0].split(",")[0] for e in episodes)
    won = sum(e["return"] > 0 for e in episodes)
    print(f"{len(episodes)} episodes over {len({e['env_id'] for e in episodes})} environments: "
          f"{won} won; ends: {dict(ends)}; {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
