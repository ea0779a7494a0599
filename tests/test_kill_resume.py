"""What a stopped train.py leaves, and that --resume makes of it the uninterrupted run: Ctrl-C
(SIGINT) in the middle of an iteration, a hard kill (SIGKILL: no handler runs), and what a kill
while writing leaves behind (a last line cut short, a temporary checkpoint folder). Each resumed
run ends with the metrics and weights of one uninterrupted run of the same flags."""
import json
import shutil
import signal
import subprocess
import time

import pytest
from test_loop import ROOT, _comparable, train_command
from test_robust_run import _ok, _resume, _rows, _same_weights, _start_and_signal

from spade_mini.run import RunDir

ITERATIONS = ("--iterations", "3")  # a checkpoint after every iteration (LoRA's default)


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    return _ok(tmp_path_factory.mktemp("whole"), "whole", *ITERATIONS)


def episodes(run) -> list[tuple]:
    return [(r["env"], r["seed"], r["transcript"]) for r in _rows(run, "samples.jsonl") if r["kind"] == "episode"]


def assert_resumes_to(tmp_path, name, whole, after: int):
    """--resume continues after iteration `after` and ends as the uninterrupted run, with no
    temporary checkpoint folder left."""
    out = _resume(tmp_path, name, *ITERATIONS)
    assert out.returncode == 0, out.stderr[-2000:]
    run = tmp_path / name
    assert f"resumed {run} after iteration {after}" in out.stdout, out.stdout[-2000:]
    assert _comparable(run) == _comparable(whole)
    assert episodes(run) == episodes(whole)  # the same seeds and transcripts: the random streams came back
    assert _same_weights(run / "checkpoint-2", whole / "checkpoint-2")
    assert not list(run.glob(".checkpoint-*.tmp"))


def test_ctrl_c_mid_iteration_saves_that_iteration_and_the_resumed_run_matches(tmp_path, whole):
    out = _start_and_signal(tmp_path, "int", signal.SIGINT, extra=ITERATIONS)
    assert out.returncode == 128 + signal.SIGINT, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "stopped by SIGINT" in out.stdout
    done = _rows(tmp_path / "int")[-1]["iteration"]
    assert done < 2 and RunDir(tmp_path, "int").latest_checkpoint().name == f"checkpoint-{done}"
    assert_resumes_to(tmp_path, "int", whole, done)


def test_a_hard_kill_mid_iteration_resumes_to_the_uninterrupted_run(tmp_path, whole):
    """SIGKILL once checkpoint-0 is published: no handler runs, iteration 1 is under way."""
    proc = subprocess.Popen(train_command(tmp_path, "killed", *ITERATIONS), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while not (tmp_path / "killed" / "checkpoint-0").is_dir() and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    proc.kill()
    assert proc.wait(timeout=60) == -signal.SIGKILL
    after = int(RunDir(tmp_path, "killed").latest_checkpoint().name.split("-")[1])
    assert after < 2  # it stopped part-way
    assert_resumes_to(tmp_path, "killed", whole, after)


def test_what_a_kill_while_writing_leaves_is_dropped_on_resume(tmp_path, whole):
    """Iteration 2 was being written when the kill came: the halves of its metrics row and of a
    sample row, and its checkpoint's temporary folder, complete but not yet renamed (with the
    iteration-2 state, so a resume that took it would skip iteration 2). An older save's
    temporary folder lies there too."""
    run = _ok(tmp_path, "cut", "--iterations", "2")
    for file in ("metrics.jsonl", "samples.jsonl"):
        last = (whole / file).read_text().splitlines()[-1]
        with open(run / file, "a") as f:
            f.write(last[:len(last) // 2])
    shutil.copytree(whole / "checkpoint-2", run / ".checkpoint-2.tmp")
    shutil.copytree(run / "checkpoint-0", run / ".checkpoint-0.tmp")
    assert_resumes_to(tmp_path, "cut", whole, 1)
    for file in ("metrics.jsonl", "samples.jsonl"):
        assert all(json.loads(line) for line in (run / file).read_text().splitlines())
