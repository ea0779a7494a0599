"""The run directory: what one `train.py` run writes, and the checkpoints it resumes from.

    runs/<name>/config.json        the Config of the run
                metrics.jsonl      one row per iteration
                samples.jsonl      designs and episodes to read (one JSON object per line)
                warm_start.jsonl   the warm start's per-role NLL, one row per step (if any)
                eval.jsonl         the --eval-every curve, one row per distinct held-out item
                transfer.jsonl     the curve's transfer suites (--transfer-items), start and last point
                envs/<id>.py       every generated environment under a header with its stats
                memory.jsonl       the environment memory (also inside each checkpoint)
                warm_start/        the warm-started policy's trainable weights (with a warm start)
                checkpoint-<it>/   trainable weights, optimizer, RNG states, memory, iteration

A checkpoint is written to a temporary folder, flushed to disk with a manifest of its files'
sizes and checksums, and renamed into place (durable.py), so a run killed while saving never
leaves a half-written checkpoint behind; `--resume` takes the newest one whose files match its
manifest, and says which newer ones it skipped. Every other file is replaced or appended whole,
so a full disk stops the run (WriteError) without damaging what was saved. In a data-parallel
run rank 0 writes all of it, from records every rank sends (`iteration_records`,
`random_streams`).
"""
from __future__ import annotations

import dataclasses
import io
import json
import pickle
import shutil
import time
from pathlib import Path

import torch
from safetensors import SafetensorError

from spade_mini.policy import load_trainable, save_trainable
from spade_mini.reward import LearningPotential
from spade_mini.run.durable import MANIFEST, append_text, damage, publish, replace_text, writing

STATE_FILE = "state.pt"
POOL_FILE = "pool.json"  # the active pool (spade_mini/pool.py), plain JSON
ARCHIVE_FILE = "archive.json"  # the designs the novelty gate admitted: [[id, source], ...]
WARM_START_DIR = "warm_start"  # the warm-started policy's trainable weights, before iteration 0
# what torch.save and safetensors raise instead of OSError when the disk refuses their write
LIBRARY_WRITE_ERRORS = (RuntimeError, SafetensorError)


def env_file_text(source: str, stats: dict) -> str:
    """An environment's file: its stats as a comment header (one line each), then its source."""
    header = "".join(f"# {k}: {' '.join(str(v).splitlines())}\n" for k, v in stats.items())
    return header + "\n" + source


def read_env_file(path: Path) -> tuple[dict[str, str], str]:
    """The inverse of `env_file_text`: the `# key: value` header lines above an environment's
    source, and the source below them and their blank line."""
    stats = {}
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    end = len(lines)
    for i, line in enumerate(lines):
        if not line.startswith("# ") or ": " not in line:
            end = i
            break
        key, _, value = line[2:].partition(": ")
        stats[key.strip()] = value.strip()
    body = lines[end:]
    return stats, "".join(body[1:] if body and not body[0].strip() else body)


def iteration_records(iteration: int, designs, episodes, scores) -> tuple[list[dict], list[tuple[str, str]]]:
    """What one iteration writes besides its metrics row: its sample rows, and one (id, file
    text) per design. Small plain records, so that ranks can gather them."""
    from spade_mini.run.reports import sample_rows
    envs = []
    for d in designs:
        s = scores.get(d.id)
        envs.append((d.id, env_file_text(d.source or f'"""no code: {d.reasons}"""\n', {
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
        self.write_text("config.json", json.dumps(cfg.to_dict(), indent=2))

    def write_text(self, file: str, text: str) -> None:
        """Replace `file` with `text` at once (a reader sees the old file or the new one)."""
        replace_text(self.path / file, text)

    def write_rows(self, file: str, rows: list[dict]) -> None:
        """Replace `file` with these rows (a fresh run's first lines)."""
        self.write_text(file, "".join(json.dumps(r, default=str) + "\n" for r in rows))

    def append(self, file: str, rows: list[dict]) -> None:
        append_text(self.path / file, "".join(json.dumps(row, default=str) + "\n" for row in rows))

    def truncate_after(self, iteration: int) -> None:
        """On resume, drop what iterations after the checkpoint wrote (they will be redone), a
        last line that a kill cut short, and the later checkpoints (damaged, or --resume would
        have taken them)."""
        for env in (self.path / "envs").glob("it*.py"):
            if int(env.name[2:6]) > iteration:
                env.unlink()
        for folder in self.checkpoints():
            if int(folder.name.split("-")[1]) > iteration:
                shutil.rmtree(folder)
        for file in ("metrics.jsonl", "samples.jsonl", "eval.jsonl", "transfer.jsonl"):
            path = self.path / file
            if path.is_file():
                keep = [line for line in path.read_text().splitlines()
                        if (it := _iteration_of(line)) is not None and it <= iteration]
                self.write_text(file, "".join(line + "\n" for line in keep))

    def record_iteration(self, iteration: int, row: dict, designs, episodes, scores) -> None:
        """Everything one iteration writes: its metrics row, its samples, and every design."""
        self.write_iteration(row, *iteration_records(iteration, designs, episodes, scores))

    def write_iteration(self, row: dict, samples: list[dict], envs: list[tuple[str, str]]) -> None:
        """Write what `iteration_records` made (in a data-parallel run, every rank's, gathered).
        The metrics row goes last: a run stopped part-way has no row for the iteration."""
        for env_id, text in envs:
            self._write_env_file(env_id, text)
        self.append("samples.jsonl", samples)
        self.append("metrics.jsonl", [row])

    def write_env(self, env_id: str, source: str, stats: dict) -> None:
        self._write_env_file(env_id, env_file_text(source, stats))

    def _write_env_file(self, env_id: str, text: str) -> None:
        replace_text(self.path / "envs" / f"{env_id}.py", text)

    # --- checkpoints -------------------------------------------------------------------------
    def save_warm_start(self, policy) -> Path:
        """The warm-started policy before self-play, as a folder eval.py can load (weights only)."""
        folder = self.path / WARM_START_DIR
        save_trainable(policy, folder)
        return folder

    def save_checkpoint(self, iteration: int, policy, optimizer, memory, potential: LearningPotential,
                        streams: list[dict], pool=None, archive=None) -> Path:
        """Write checkpoint-<iteration>: the trainable weights, and in state.pt plain data only
        (the optimizer, the learning potential's averages, every rank's random streams), the
        memory, the active pool (pool.json) and the designs the novelty gate's archive admitted
        (archive.json). Raises WriteError, and leaves the checkpoints already saved as they
        were, if the disk refuses."""
        final = self.path / f"checkpoint-{iteration}"
        tmp = self.path / f".checkpoint-{iteration}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            with writing(final, also=LIBRARY_WRITE_ERRORS):
                save_trainable(policy, tmp)
                state = {"iteration": iteration, "optimizer": optimizer.state_dict(),
                         "potential": dataclasses.asdict(potential), "streams": streams}
                torch.save(state, tmp / STATE_FILE)
                if memory is not None:
                    memory.save(tmp / "memory.jsonl")
                if pool is not None:
                    (tmp / POOL_FILE).write_text(json.dumps(pool.to_dict()), encoding="utf-8")
                if archive is not None:
                    (tmp / ARCHIVE_FILE).write_text(json.dumps(archive.admitted()), encoding="utf-8")
                shutil.rmtree(final, ignore_errors=True)  # this iteration saved again after a resume
                publish(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if memory is not None:
            self.write_text("memory.jsonl", (final / "memory.jsonl").read_text(encoding="utf-8"))
        return final

    def checkpoints(self) -> list[Path]:
        """Every published checkpoint, the newest first."""
        found = [p for p in self.path.glob("checkpoint-*") if p.name.split("-")[1].isdigit()]
        return sorted(found, key=lambda p: int(p.name.split("-")[1]), reverse=True)

    def latest_checkpoint(self, report=None) -> Path | None:
        """The newest intact checkpoint; `report` (e.g. print) gets one sentence for each newer
        checkpoint that is damaged, which is skipped."""
        for folder in self.checkpoints():
            problem = checkpoint_damage(folder)
            if problem is None:
                return folder
            if report is not None:
                report(f"{folder} is damaged ({problem}); resuming from an earlier checkpoint instead.")
        return None

    def remove_old_checkpoints(self, keep: int) -> None:
        """Delete all but the newest `keep` checkpoints (0 keeps all), and the temporary folders
        of saves that were killed."""
        for folder in self.checkpoints()[keep:] if keep > 0 else []:
            shutil.rmtree(folder)
        for tmp in self.path.glob(".checkpoint-*.tmp"):
            shutil.rmtree(tmp, ignore_errors=True)

    def load_checkpoint(self, folder: Path, policy, optimizer) -> tuple[int, LearningPotential, list[dict]]:
        """Load the weights and optimizer; return the iteration, the learning potential and the
        random streams (one per rank) for the caller to restore."""
        load_trainable(policy, folder)
        state = torch.load(folder / STATE_FILE, weights_only=False)
        optimizer.load_state_dict(state["optimizer"])
        if "extra" in state:  # written before the package had folders
            return state["iteration"], *_old_layout_state(state)
        return state["iteration"], LearningPotential(**state["potential"]), state["streams"]


def load_pool(folder: Path):
    """The active pool a checkpoint holds (None: it was saved without one)."""
    from spade_mini.pool import Pool
    path = folder / POOL_FILE
    return Pool.from_dict(json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else None


def load_archive(folder: Path):
    """The novelty gate's archive a checkpoint holds: the bundled one and the designs it admitted."""
    from spade_mini.gate import Archive
    archive = Archive.bundled()
    path = folder / ARCHIVE_FILE
    for name, source in json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []:
        archive.add(name, source)
    return archive


def checkpoint_damage(folder: Path) -> str | None:
    """None for an intact checkpoint, else what is wrong with it. One written before checkpoints
    had a manifest counts as intact when it has its state file."""
    if (folder / MANIFEST).is_file() or not (folder / STATE_FILE).is_file():
        return damage(folder)
    return None


def _iteration_of(line: str) -> int | None:
    """The iteration of a metrics or samples line; None for a line a kill cut short."""
    try:
        return json.loads(line).get("iteration", -1)
    except ValueError:
        return None


class _OldLayoutUnpickler(pickle.Unpickler):
    """Reads objects pickled by module path when learning_potential.py sat at the package's top."""

    def find_class(self, module: str, name: str):
        moved = {"spade_mini.learning_potential": "spade_mini.reward.learning_potential"}
        return super().find_class(moved.get(module, module), name)


def _old_layout_state(state: dict) -> tuple[LearningPotential, list[dict]]:
    """The learning potential and random streams of a checkpoint written before the package had
    folders: a pickled {"lp", "streams"} (or, older, {"lp", "rng"} of one process), whose torch
    stream was stored beside it."""
    extra = _OldLayoutUnpickler(io.BytesIO(state["extra"])).load()
    streams = extra.get("streams") or [{"python": extra["rng"], "torch": state["torch_rng"], "cuda": None}]
    return extra["lp"], streams
