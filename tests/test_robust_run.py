"""A run survives what clusters and disks do to it (train.py, spade_mini/run/durable.py): a stop
signal in the middle of an iteration saves that iteration, a damaged newest checkpoint is
reported and skipped, and a full disk (a file-size limit here) stops the run with one sentence,
damages nothing saved, and --resume continues. Each resumed run ends as the uninterrupted one."""
import json
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file
from test_loop import ROOT, _comparable, train_command

from spade_mini.run import RunDir, checkpoint_damage
from spade_mini.run.durable import MANIFEST, append_text, damage, publish, replace_text


def _file_size_limit(limit_bytes: int):
    """For preexec_fn: writes past `limit_bytes` fail with EFBIG (an OSError, as on a full
    disk) instead of killing the process with SIGXFSZ."""
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    return apply


def _run(cmd: list[str], limit_bytes: int | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          preexec_fn=limit_bytes and _file_size_limit(limit_bytes))


def _ok(tmp_path, name, *extra) -> Path:
    out = _run(train_command(tmp_path, name, *extra))
    assert out.returncode == 0, out.stderr[-2000:]
    return tmp_path / name


def _resume(tmp_path, name, *extra, limit_bytes=None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "train.py", "--run-dir", str(tmp_path), "--name", name, "--resume", *extra]
    return _run(cmd, limit_bytes)


def _weights(checkpoint: Path) -> dict:
    return load_file(checkpoint / "trainable.safetensors")


def _same_weights(a: Path, b: Path) -> bool:
    wa, wb = _weights(a), _weights(b)
    return wa.keys() == wb.keys() and all((wa[k] == wb[k]).all() for k in wa)


def _rows(run: Path, file: str = "metrics.jsonl") -> list[dict]:
    return [json.loads(line) for line in (run / file).read_text().splitlines()]


def _start_and_signal(tmp_path, name, *signals, extra=()) -> subprocess.CompletedProcess:
    """Start a run and, once iteration 0 is written (so iteration 1 is under way), send `signals`
    (one right after the other, so that iteration 1 is still under way for each)."""
    proc = subprocess.Popen(train_command(tmp_path, name, *extra), cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    metrics = tmp_path / name / "metrics.jsonl"
    deadline = time.monotonic() + 600  # iteration 0 takes seconds, or minutes on a crowded machine
    while not (metrics.is_file() and metrics.read_text().strip()) and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    for sig in signals:
        proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


# --- preemption -----------------------------------------------------------------------------

def test_sigterm_mid_iteration_saves_that_iteration_and_the_resumed_run_matches(tmp_path):
    rare = ("--iterations", "4", "--save-every", "100")  # so the only early checkpoint is the signal's
    whole = _ok(tmp_path, "whole", *rare)
    out = _start_and_signal(tmp_path, "split", signal.SIGTERM, extra=rare)
    assert out.returncode == 128 + signal.SIGTERM, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "stopped by SIGTERM" in out.stdout
    split = tmp_path / "split"
    done = _rows(split)[-1]["iteration"]
    assert done < 3 and [p.name for p in RunDir(tmp_path, "split").checkpoints()] == [f"checkpoint-{done}"]

    out = _resume(tmp_path, "split", "--iterations", "4")
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"resumed {split} after iteration {done}" in out.stdout
    assert _comparable(split) == _comparable(whole)
    assert _same_weights(split / "checkpoint-3", whole / "checkpoint-3")


def test_a_second_signal_aborts_without_saving(tmp_path):
    out = _start_and_signal(tmp_path, "twice", signal.SIGUSR1, signal.SIGTERM,
                            extra=("--iterations", "4", "--save-every", "100"))
    assert out.returncode == 128 + signal.SIGTERM, out.stderr[-2000:]
    assert "SIGUSR1: stopping after this iteration" in out.stdout
    assert "aborted without saving" in out.stdout
    assert not list((tmp_path / "twice").glob("*checkpoint-*"))


# --- damaged checkpoints --------------------------------------------------------------------

def test_a_damaged_newest_checkpoint_is_reported_and_skipped(tmp_path):
    run = _ok(tmp_path, "cut", "--iterations", "2")  # LoRA: a checkpoint every iteration
    newest = run / "checkpoint-1" / "trainable.safetensors"
    size = newest.stat().st_size
    newest.write_bytes(newest.read_bytes()[:1000])  # a copy that stopped part-way

    out = _resume(tmp_path, "cut", "--iterations", "3")
    assert out.returncode == 0, out.stderr[-2000:]
    reports = [ln for ln in out.stdout.splitlines() if "is damaged" in ln]
    assert reports == [f"{run / 'checkpoint-1'} is damaged (trainable.safetensors holds 1000 bytes, "
                       f"not {size}); resuming from an earlier checkpoint instead."]
    assert f"resumed {run} after iteration 0" in out.stdout and "Traceback" not in out.stderr
    assert [r["iteration"] for r in _rows(run)] == [0, 1, 2]
    assert [checkpoint_damage(p) for p in RunDir(tmp_path, "cut").checkpoints()] == [None] * 3


def test_a_run_without_an_intact_checkpoint_starts_again(tmp_path):
    """What a requeued job meets when it was stopped before its first save, or when its only
    checkpoint is damaged: --resume starts the run again from its own config."""
    run = _ok(tmp_path, "again", "--iterations", "1")
    first = _comparable(run)
    (run / "checkpoint-0" / "state.pt").write_bytes(b"")
    out = _resume(tmp_path, "again", "--iterations", "1")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "checkpoint-0 is damaged (state.pt holds 0 bytes" in out.stdout
    assert f"no intact checkpoint in {run}: starting it again from its first iteration." in out.stdout
    assert _comparable(run) == first and checkpoint_damage(run / "checkpoint-0") is None


def test_the_manifest_catches_what_a_disk_or_a_copy_does(tmp_path):
    folder, tmp = tmp_path / "checkpoint-0", tmp_path / ".checkpoint-0.tmp"
    (tmp / "sub").mkdir(parents=True)
    (tmp / "weights.bin").write_bytes(bytes(range(256)) * 4)
    (tmp / "sub" / "state.txt").write_text("state")
    publish(tmp, folder)
    assert not tmp.exists() and damage(folder) is None
    assert set(json.loads((folder / MANIFEST).read_text())["files"]) == {"weights.bin", "sub/state.txt"}

    data = bytearray((folder / "weights.bin").read_bytes())
    data[100] ^= 1  # one flipped bit, same size
    (folder / "weights.bin").write_bytes(bytes(data))
    assert damage(folder) == "weights.bin does not match its checksum"
    (folder / "sub" / "state.txt").unlink()
    (folder / "weights.bin").write_bytes(bytes(data[:10]))
    assert damage(folder) == "sub/state.txt is missing"
    (folder / MANIFEST).write_text("{")
    assert damage(folder) == f"its {MANIFEST} is missing or unreadable"


def test_only_the_newest_checkpoints_are_kept(tmp_path):
    run = RunDir(tmp_path, "keep")
    for i in (0, 1, 2, 10, 11):
        (run.path / f"checkpoint-{i}").mkdir()
    (run.path / ".checkpoint-12.tmp").mkdir()  # a save that was killed
    run.remove_old_checkpoints(keep=3)
    assert sorted(p.name for p in run.path.iterdir() if "checkpoint" in p.name) == [
        "checkpoint-10", "checkpoint-11", "checkpoint-2"]
    run.remove_old_checkpoints(keep=0)
    assert len(run.checkpoints()) == 3


# --- a full disk ----------------------------------------------------------------------------

WRITE_UNDER_A_LIMIT = """
import sys
from pathlib import Path
from spade_mini.run.durable import WriteError, append_text, replace_text
write, path = {"append": append_text, "replace": replace_text}[sys.argv[1]], Path(sys.argv[2])
try:
    write(path, "x" * 10_000 + "\\n")
except WriteError as e:
    print(e)
"""


@pytest.mark.parametrize("how", ["append", "replace"])
def test_a_refused_write_leaves_the_file_as_it_was(tmp_path, how):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"iteration": 0}\n')
    if how == "append":
        append_text(path, '{"iteration": 1}\n')
    else:
        replace_text(path, '{"iteration": 0}\n{"iteration": 1}\n')
    before = path.read_bytes()
    out = _run([sys.executable, "-c", WRITE_UNDER_A_LIMIT, how, str(path)], limit_bytes=4096)
    assert out.stdout.strip() == f"could not write {path} (File too large)", out.stderr
    assert path.read_bytes() == before and sorted(tmp_path.iterdir()) == [path]


def test_a_full_disk_is_one_sentence_and_the_run_resumes(tmp_path):
    """The disk refuses first a checkpoint (its weights file), then samples.jsonl; each time the
    run stops with one sentence, what was saved stays intact, and the run ends as it would have."""
    lean = ("--no-memory",)  # no memory file, so the limits below hit what they aim at
    whole = _ok(tmp_path, "whole", "--iterations", "3", *lean)
    split = _ok(tmp_path, "split", "--iterations", "1", *lean)
    weights = (split / "checkpoint-0" / "trainable.safetensors").stat().st_size

    out = _resume(tmp_path, "split", "--iterations", "3", limit_bytes=weights - 1)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "File too large" in errors[0], out.stderr[-2000:]
    assert errors[0].startswith(f"error: could not write {split / 'checkpoint-1'} (")
    assert errors[0].endswith("); free space on that disk, then continue the run with --name split --resume.")
    assert [p.name for p in split.iterdir() if "checkpoint" in p.name] == ["checkpoint-0"]
    assert checkpoint_damage(split / "checkpoint-0") is None
    assert [r["iteration"] for r in _rows(split)] == [0, 1]  # iteration 1 ran; its checkpoint did not

    # room for iteration 0's samples (the resume keeps those), not for iteration 1's
    kept = sum(len(ln) + 1 for ln in (split / "samples.jsonl").read_bytes().splitlines()
               if json.loads(ln)["iteration"] == 0)
    out = _resume(tmp_path, "split", "--iterations", "3", limit_bytes=kept + 100)
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert out.returncode == 2 and len(errors) == 1, out.stderr[-2000:]
    assert errors[0].startswith(f"error: could not write {split / 'samples.jsonl'} (File too large)")
    assert [r["iteration"] for r in _rows(split)] == [0]  # no metrics row for an iteration cut short
    assert {r["iteration"] for r in _rows(split, "samples.jsonl")} == {0}  # whole lines only

    out = _resume(tmp_path, "split", "--iterations", "3")
    assert out.returncode == 0, out.stderr[-2000:]
    assert _comparable(split) == _comparable(whole)
    assert _same_weights(split / "checkpoint-2", whole / "checkpoint-2")
