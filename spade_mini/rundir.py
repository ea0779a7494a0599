"""The run directory: what one `train.py` run writes, and the checkpoints it resumes from.

    runs/<name>/config.json        the Config of the run
                metrics.jsonl      one row per iteration
                samples.jsonl      designs and episodes to read (one JSON object per line)
                warm_start.jsonl   the warm start's per-role NLL, one row per step (if any)
                envs/<id>.py       every generated environment under a header with its stats
                memory.jsonl       the environment memory (also inside each checkpoint)
                checkpoint-<it>/   trainable weights, optimizer, RNG states, memory, iteration

A checkpoint is written to a temporary folder and renamed into place, so a run killed while
saving never leaves a half-written checkpoint behind; `--resume` takes the newest complete one.
In a data-parallel run rank 0 writes all of it, from records every rank sends (`iteration_records`,
`random_streams`).
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import time
from pathlib import Path

import torch

from spade_mini.model import load_trainable, save_trainable

STATE_FILE = "state.pt"


def env_file(source: str, stats: dict) -> str:
    """An environment's file: its stats as a comment header (one line each), then its source."""
    header = "".join(f"# {k}: {' '.join(str(v).splitlines())}\n" for k, v in stats.items())
    return header + "\n" + source


def iteration_records(iteration: int, designs, episodes, scores) -> tuple[list[dict], list[tuple[str, str]]]:
    """What one iteration writes besides its metrics row: its sample rows, and one (id, file
    text) per design. Small plain records, so that ranks can gather them."""
    from spade_mini.reports import sample_rows
    envs = []
    for d in designs:
        s = scores.get(d.id)
        envs.append((d.id, env_file(d.source or f'"""no code: {d.reasons}"""\n', {
            "skill": d.skill.key, "valid": d.valid, "reasons": "; ".join(d.reasons) or "-",
            "no_hint_solve_rate": s and s.no_hint_solve_rate,
            "hint_solve_rate": s and s.hint_solve_rate, "regret": s and s.regret,
            "note": (s and (s.failure or s.note)) or "-", "designer_reward": d.reward})))
    return sample_rows(iteration, designs, episodes, scores), envs


def random_streams(rng) -> dict:
    """This process's random state: its loop `random.Random`, torch's CPU generator and, on a
    GPU, its current device's generator. A checkpoint keeps one per rank."""
    return {"python": rng.getstate(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None}


def restore_streams(rng, streams: dict) -> None:
    rng.setstate(streams["python"])
    torch.set_rng_state(streams["torch"])
    if streams["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(streams["cuda"])


class RunDir:
    def __init__(self, root: str | Path, name: str):
        self.path = Path(root) / (name or time.strftime("%Y%m%d-%H%M%S"))
        (self.path / "envs").mkdir(parents=True, exist_ok=True)

    def write_config(self, cfg) -> None:
        (self.path / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2))

    def write_rows(self, file: str, rows: list[dict]) -> None:
        """Replace `file` with these rows (a fresh run's first lines)."""
        (self.path / file).write_text("".join(json.dumps(r, default=str) + "\n" for r in rows))

    def append(self, file: str, rows: list[dict]) -> None:
        with open(self.path / file, "a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, default=str) + "\n")

    def truncate_after(self, iteration: int) -> None:
        """On resume, drop what iterations after the checkpoint wrote (they will be redone)."""
        for env in (self.path / "envs").glob("it*.py"):
            if int(env.name[2:6]) > iteration:
                env.unlink()
        for file in ("metrics.jsonl", "samples.jsonl"):
            path = self.path / file
            if path.is_file():
                keep = [line for line in path.read_text().splitlines()
                        if line.strip() and json.loads(line).get("iteration", -1) <= iteration]
                path.write_text("".join(line + "\n" for line in keep))

    def record_iteration(self, iteration: int, row: dict, designs, episodes, scores) -> None:
        """Everything one iteration writes: its metrics row, its samples, and every design."""
        self.write_iteration(row, *iteration_records(iteration, designs, episodes, scores))

    def write_iteration(self, row: dict, samples: list[dict], envs: list[tuple[str, str]]) -> None:
        """Write what `iteration_records` made (in a data-parallel run, every rank's, gathered)."""
        self.append("metrics.jsonl", [row])
        self.append("samples.jsonl", samples)
        for env_id, text in envs:
            self._write_env_file(env_id, text)

    def write_env(self, env_id: str, source: str, stats: dict) -> None:
        self._write_env_file(env_id, env_file(source, stats))

    def _write_env_file(self, env_id: str, text: str) -> None:
        (self.path / "envs" / f"{env_id}.py").write_text(text, encoding="utf-8")

    # --- checkpoints -------------------------------------------------------------------------
    def save_checkpoint(self, iteration: int, policy, optimizer, memory, extra: dict) -> Path:
        final = self.path / f"checkpoint-{iteration}"
        tmp = self.path / f".checkpoint-{iteration}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        save_trainable(policy, tmp)
        state = {"iteration": iteration, "optimizer": optimizer.state_dict(),
                 "torch_rng": torch.get_rng_state(), "extra": pickle.dumps(extra),
                 "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}
        torch.save(state, tmp / STATE_FILE)
        if memory is not None:
            memory.save(tmp / "memory.jsonl")
            memory.save(self.path / "memory.jsonl")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        return final

    def latest_checkpoint(self) -> Path | None:
        done = [p for p in self.path.glob("checkpoint-*") if (p / STATE_FILE).is_file()]
        return max(done, key=lambda p: int(p.name.split("-")[1]), default=None)

    def load_checkpoint(self, folder: Path, policy, optimizer) -> tuple[int, dict]:
        load_trainable(policy, folder)
        state = torch.load(folder / STATE_FILE, weights_only=False)
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        if state["cuda_rng"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        return state["iteration"], pickle.loads(state["extra"])

