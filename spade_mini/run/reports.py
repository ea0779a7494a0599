"""What a run tells a person: sample rows to read, and optional TensorBoard or wandb sinks.

`metrics.jsonl` (written by train.py) is always there; `--report-to tensorboard|wandb` mirrors
each row to one of those, imported only when asked for.
"""
from __future__ import annotations

TRANSCRIPT_CHARS = 4000  # keep samples.jsonl readable


def sample_rows(iteration: int, designs, episodes, scores) -> list[dict]:
    """One row per design and per episode, for samples.jsonl."""
    rows = []
    for d in designs:
        s = scores.get(d.id)
        rows.append({"iteration": iteration, "kind": "design", "id": d.id, "skill": d.skill.key,
                     "setting": d.skill.setting, "document": d.document_id, "valid": d.valid,
                     "reasons": d.reasons, "prompt_tokens": d.prompt_tokens,
                     "completion_tokens": len(d.completion.completion_ids),
                     "regret": s and s.regret, "reward": d.reward,
                     "note": s and (s.failure or s.note),
                     "no_hint_solve_rate": s and s.no_hint_solve_rate,
                     "hint_solve_rate": s and s.hint_solve_rate,
                     "completion": d.completion.text[:TRANSCRIPT_CHARS]})
    for e in episodes:
        rows.append({"iteration": iteration, "kind": "episode", "env": e.job.design_id, "level": e.job.level,
                     "arm": e.job.arm, "seed": e.job.seed, "return": e.ret, "turns": len(e.turns),
                     "hint_shown": e.hint_shown, "crashed": e.crashed,
                     "end": e.end_reason, "transcript": e.transcript()[:TRANSCRIPT_CHARS]})
    return rows


class Reporter:
    def __init__(self, report_to: str, run_path):
        self.kind, self.sink = report_to, None
        if report_to == "tensorboard":
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise SystemExit("error: --report-to tensorboard needs `pip install tensorboard`.") from None
            self.sink = SummaryWriter(str(run_path / "tensorboard"))
        elif report_to == "wandb":
            try:
                import wandb
            except ImportError:
                raise SystemExit("error: --report-to wandb needs `pip install wandb`.") from None
            self.sink = wandb.init(project="spade_mini", name=run_path.name, dir=str(run_path))

    def log(self, row: dict) -> None:
        numbers = {k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if self.kind == "tensorboard":
            for k, v in numbers.items():
                self.sink.add_scalar(k, v, row["iteration"])
        elif self.kind == "wandb":
            self.sink.log(numbers, step=row["iteration"])

    def close(self) -> None:
        if self.sink is not None:
            (self.sink.close if self.kind == "tensorboard" else self.sink.finish)()
