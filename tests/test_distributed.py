"""Data parallelism (spade_mini/run/distributed.py) with 2 gloo processes on the CPU and the tiny model:
one distributed update is the single-process update of the union of the ranks' samples, ranks end
with identical weights, the metrics row of a 2-process iteration is the single-process row, and a
2-process train.py run writes one run directory that --resume continues exactly.

The two processes are started with torch.multiprocessing and join the group from the same
environment variables torchrun sets; each writes its results to a file the test reads."""
import dataclasses
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from scripted import parts
from test_loop import ROOT, _comparable, passes_without_hint

from spade_mini.config import Config
from spade_mini.designer import Memory, skills_for
from spade_mini.envs import EXAMPLES
from spade_mini.loop import State, one_iteration
from spade_mini.policy import load_policy
from spade_mini.reinforce import Sample, UpdateSettings, make_optimizer, role_token_counts, update
from spade_mini.run import distributed

WORLD = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _join(rank: int, port: int) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    distributed.init("cpu")


def _trainable(policy) -> dict:
    return {n: p.detach().clone() for n, p in policy.model.named_parameters() if p.requires_grad}


# --- one update --------------------------------------------------------------------------------

VARIANTS = {  # name: (config fields, how many of the 6 samples rank 0 takes; rank 1 the rest)
    "lora": (dict(), 4),                              # rank 1: a designer and a zero-advantage turn
    "full": (dict(full_finetune=True), 4),
    "separate": (dict(separate_adapters=True), 4),   # rank 1 touches the designer adapter only
    "idle": (dict(), 5),                              # rank 1: nothing to learn from, still joins
}


def _policy(fields: dict):
    return load_policy(Config(model="tiny", quantize="none", seed=0, **fields), verbose=False)


def _samples() -> list[Sample]:
    rng = random.Random(0)
    roles = ["agent", "designer", "agent", "agent", "designer", "agent"]
    advantages = [0.7, -0.4, -0.3, 1.1, 0.9, 0.0]
    return [Sample([rng.randrange(10, 900) for _ in range(rng.randint(4, 10))],
                   [rng.randrange(10, 900) for _ in range(rng.randint(2, 7))], adv, role)
            for role, adv in zip(roles, advantages)]


def _sgd_update(policy, samples, **kwargs):
    """One update with SGD at lr 1 and no clipping, so that the weights move by minus the gradient."""
    before = _trainable(policy)
    optimizer = torch.optim.SGD([p for p in policy.model.parameters() if p.requires_grad], lr=1.0)
    stats = update(policy, samples, optimizer, UpdateSettings(micro_batch=2, max_grad_norm=0.0), **kwargs)
    return {n: before[n] - p for n, p in _trainable(policy).items()}, stats


def _update_worker(rank: int, port: int, out: str) -> None:
    _join(rank, port)
    results = {}
    for name, (fields, split) in VARIANTS.items():
        policy = _policy(fields)
        mine = _samples()[:split] if rank == 0 else _samples()[split:]
        counts = distributed.sum_over_ranks(role_token_counts(mine))
        grad, stats = _sgd_update(policy, mine, token_counts=counts,
                                  sync_gradients=distributed.all_reduce_gradients)
        # then AdamW with clipping, as the loop runs it: the ranks must stay bit-identical
        adamw = make_optimizer(policy.model, 1e-3)
        update(policy, mine, adamw, UpdateSettings(micro_batch=2, max_grad_norm=0.5), token_counts=counts, sync_gradients=distributed.all_reduce_gradients)
        distributed.check_identical(policy.trainable_parameters(), "after the updates")
        results[name] = {"grad": grad, "stats": dataclasses.asdict(stats), "weights": _trainable(policy)}
    with torch.no_grad():  # a rank that drifts is caught
        if rank == 1:
            policy.trainable_parameters()[0].add_(1e-6)
    try:
        distributed.check_identical(policy.trainable_parameters(), "after a drift")
        results["drift"] = None
    except distributed.DistributedError as e:
        results["drift"] = str(e)
    torch.save(results, Path(out) / f"update{rank}.pt")
    distributed.close()


@pytest.fixture(scope="module")
def update_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("update")
    mp.spawn(_update_worker, args=(_free_port(), str(out)), nprocs=WORLD, join=True)
    return [torch.load(out / f"update{r}.pt", weights_only=False) for r in range(WORLD)]


@pytest.mark.parametrize("name", VARIANTS)
def test_distributed_gradient_equals_single_process_gradient_of_the_union(update_results, name):
    fields, _ = VARIANTS[name]
    grad, stats = _sgd_update(_policy(fields), _samples())
    got = update_results[0][name]
    assert got["grad"].keys() == grad.keys()
    assert any(g.abs().sum() > 0 for g in grad.values())
    # float32 sums in another order (two ranks, the thread count) differ by ~1e-7 in gradients
    # of ~1e-3; a wrong normalisation or a missed rank is off by a factor
    for n in grad:
        torch.testing.assert_close(got["grad"][n], grad[n], rtol=1e-4, atol=1e-6)
    assert got["stats"]["tokens"] == stats.tokens and got["stats"]["skipped"] is None
    assert got["stats"]["grad_norm"] == pytest.approx(stats.grad_norm, rel=1e-4)
    # each rank's loss is its part of the whole batch's loss (divided by the global counts)
    for key in ("agent_loss", "designer_loss"):
        parts = sum(r[name]["stats"][key] for r in update_results)
        assert parts == pytest.approx(getattr(stats, key), rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("name", VARIANTS)
def test_ranks_end_with_identical_weights(update_results, name):
    a, b = (r[name] for r in update_results)
    assert all(torch.equal(a["grad"][n], b["grad"][n]) for n in a["grad"])
    assert all(torch.equal(a["weights"][n], b["weights"][n]) for n in a["weights"])


def test_a_drifting_rank_is_caught(update_results):
    assert all(r["drift"] and "no longer hold the same weights" in r["drift"] for r in update_results)


# --- one iteration -----------------------------------------------------------------------------

LUCKY = '''class LuckyEnv:
    """Answer 3 to win; on seeds divisible by DIVISOR, 4 wins as well."""
    def reset(self, seed=None):
        self.lucky = (seed or 0) % DIVISOR == 0
        return "Round " + str(seed) + ": pick a number, e.g. \\\\boxed{3}.", {}

    def step(self, action):
        won = action == "\\\\boxed{3}" or (self.lucky and action == "\\\\boxed{4}")
        return ("Won." if won else "Lost."), float(won), True, False, {}

    def hint(self):
        return "Three always wins."
'''
BROKEN = "```python\nclass BrokenEnv:\n    def reset(self, seed=None):\n        return 42\n```"
REPLIES = [f"```python\n{LUCKY.replace('DIVISOR', '2')}```", BROKEN,
           f"```python\n{LUCKY.replace('DIVISOR', '3')}```"]
# LuckyEnv: "3" always wins, which the solution stage refuses. Each process keeps a pool of its
# iteration only (--pool-keep false: the pool lives in one process), and the no-hint budget is the
# paired plays' alone, so the pools have nothing to replay and both ranks play what one process plays.
CFG = Config(model="tiny", quantize="none", designs_per_iteration=3, plays_per_design=4, max_turns=1,
             turn_max_new_tokens=10, hint_source="env", lr=1e-3, memory_references=0, micro_batch=2,
             require_solution=False, pool_keep=False, episodes_per_iteration=8)


def scripted_agent(policy, replies):
    """Prepared designer replies; the agent answers \\boxed{3} with a hint and \\boxed{4} without,
    so no-hint returns differ by seed and both roles have something to learn."""
    return passes_without_hint(policy, replies, no_hint_reply="\\boxed{4}")


def _iteration(replies: list[str], rng: random.Random) -> dict:
    policy = load_policy(CFG, verbose=False)
    state = State(scripted_agent(policy, replies), make_optimizer(policy.model, CFG.lr),
                  skills_for("games"), None, Memory.seeded(EXAMPLES), rng)
    row, designs, *_ = parts(one_iteration(state, CFG))
    return {"row": row, "ids": [d.id for d in designs], "lp": (state.potential.fast, state.potential.slow),
            "memory": [dataclasses.asdict(r) for r in state.memory.records],
            "weights": _trainable(policy)}


class Replay(random.Random):
    """A random stream whose randrange returns prepared values, in order."""

    def __init__(self, values: list[int]):
        super().__init__(0)
        self.values = list(values)

    def randrange(self, *args, **kwargs):
        return self.values.pop(0)


def _rank_streams(seed: int = 7) -> list[list[int]]:
    """What one process draws from the loop's stream, split as the ranks draw it. One process
    draws a validation stream for each of the 3 designs, then K play seeds for each of the 2
    valid ones; rank 0 designs slot 0, rank 1 slots 1 and 2 (slots 0 and 1 share a skill)."""
    rng, k = random.Random(seed), CFG.plays_per_design
    validation = [rng.randrange(2**63) for _ in REPLIES]
    play = [rng.randrange(2**31) for _ in range(2 * k)]
    return [validation[:1] + play[:k], validation[1:] + play[k:]]


def _iteration_worker(rank: int, port: int, out: str) -> None:
    _join(rank, port)
    rng = Replay(_rank_streams()[rank])  # so the ranks validate and play what one process would
    torch.save(_iteration(REPLIES[:1] if rank == 0 else REPLIES[1:], rng), Path(out) / f"it{rank}.pt")
    distributed.close()


@pytest.fixture(scope="module")
def iteration_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("iteration")
    mp.spawn(_iteration_worker, args=(_free_port(), str(out)), nprocs=WORLD, join=True)
    return [torch.load(out / f"it{r}.pt", weights_only=False) for r in range(WORLD)], \
        _iteration(REPLIES, random.Random(7))


def test_two_process_row_equals_single_process_row(iteration_results):
    (rank0, rank1), single = iteration_results
    assert rank0["ids"] == ["it0000-00"] and rank1["ids"] == ["it0000-01", "it0000-02"]
    local = ("agent_grad_norm", "designer_grad_norm")  # each rank's own, before the sum over ranks
    one, two = ({k: v for k, v in r["row"].items() if k not in local} for r in (single, rank0))
    assert {k: v for k, v in rank1["row"].items() if k not in local} == two  # every rank computes the same row
    assert one["designs"] == 3 and one["environments"] == 2 and one["episodes"] == 16
    assert one["agent_loss"] != 0 and one["designer_loss"] != 0  # both roles learned something
    timing = ("time_", "tokens_per_s", "peak_memory_mb")
    sums = ("agent_loss", "designer_loss", "grad_norm")  # sums of floats in another order
    for key in one:
        if key.startswith(timing):
            continue
        if key in sums:
            assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), key
        else:
            assert two[key] == one[key], key


def test_every_rank_holds_the_single_process_memory_learning_potential_and_weights(iteration_results):
    (rank0, rank1), single = iteration_results
    for rank in (rank0, rank1):
        assert rank["memory"] == single["memory"] and len(single["memory"]) == len(EXAMPLES) + 3
        assert rank["lp"] == single["lp"] and single["lp"][0]
        for n, w in single["weights"].items():
            torch.testing.assert_close(rank["weights"][n], w, rtol=1e-4, atol=1e-6)
    assert all(torch.equal(rank0["weights"][n], rank1["weights"][n]) for n in rank0["weights"])


def test_helpers_are_no_ops_in_one_process():
    assert distributed.world_size() == 1 and distributed.is_main() and distributed.rank_seed(5) == 5
    assert distributed.share(3) == range(0, 3)
    assert distributed.gather_concat([1, 2]) == ([1, 2], slice(0, 2))
    assert distributed.gather_by_key({"a": [1]}) == {"a": [1]}
    assert distributed.sum_over_ranks((3, 4)) == (3, 4) and distributed.from_main("x") == "x"


# --- train.py under torchrun -------------------------------------------------------------------

def _command(tmp_path, *args, processes=WORLD) -> list[str]:
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone",
              "--nproc-per-node", str(processes)] if processes > 1 else [sys.executable]
    return [*launch, "train.py", "--model", "tiny", "--pool-fill", "examples", "--pool-keep", "false", "--designs-per-iteration", "2",
            "--plays-per-design", "2", "--max-turns", "2", "--turn-max-new-tokens", "6",
            "--temperature", "1.0", "--run-dir", str(tmp_path), "--save-every", "1",
            "--preset", "cpu-smoke", *args]


def _run(tmp_path, *args, processes=WORLD):
    out = subprocess.run(_command(tmp_path, *args, processes=processes), cwd=ROOT, capture_output=True,
                         text=True, timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_torchrun_writes_one_run_directory_and_resume_continues_it(tmp_path):
    stdout = _run(tmp_path, "--iterations", "2", "--check-weights-every", "1")  # no --name
    assert sum(ln.startswith("sandbox: ") for ln in stdout.splitlines()) == 1  # rank 0 speaks
    runs = list(tmp_path.iterdir())
    assert len(runs) == 1, runs  # one time-stamped run directory for both processes
    run = runs[0]
    rows = _comparable(run)
    assert [r["iteration"] for r in rows] == [0, 1]
    assert all(r["environments"] == 2 and r["episodes"] == 4 for r in rows)  # one example a rank, 2 plays each
    samples = [json.loads(ln) for ln in (run / "samples.jsonl").read_text().splitlines()]
    first = [s for s in samples if s["iteration"] == 0]
    assert len(first) == 4 and all(s["env"].startswith("example-") and s["arm"] == "no_hint" for s in first)
    state = torch.load(run / "checkpoint-1" / "state.pt", weights_only=False)
    assert len(state["streams"]) == WORLD

    # resume from checkpoint-0 with the same world size: iteration 1 comes out the same again
    shutil.rmtree(run / "checkpoint-1")
    _run(tmp_path, "--name", run.name, "--iterations", "2", "--resume")
    assert _comparable(run) == rows
    assert [json.loads(ln) for ln in (run / "samples.jsonl").read_text().splitlines()] == samples

    # one process continues a two-process run, and says what carries over
    stdout = _run(tmp_path, "--name", run.name, "--iterations", "3", "--resume", processes=1)
    assert "saved by 2 processes" in stdout
    assert [r["iteration"] for r in _comparable(run)] == [0, 1, 2]


def _worker(parent: int, rank: int) -> int | None:
    """The pid of torchrun's worker process of `rank`."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and f"RANK={rank}".encode() in environ:
            return int(pid)
    return None


def test_a_signal_to_one_rank_stops_every_rank_after_the_same_iteration(tmp_path):
    """SIGUSR1 reaches rank 1 alone once iteration 0 is written: the ranks gather their stop
    flags, so both finish the same iteration, rank 0 writes its one checkpoint, and both exit."""
    cmd = _command(tmp_path, "--name", "stop", "--iterations", "8", "--save-every", "100")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    metrics = tmp_path / "stop" / "metrics.jsonl"
    rank1 = None
    while not (rank1 and metrics.is_file() and metrics.read_text().strip()) and proc.poll() is None:
        rank1 = rank1 or _worker(proc.pid, 1)
        time.sleep(0.02)
    assert rank1 is not None, proc.communicate()[1][-3000:]
    os.kill(rank1, signal.SIGUSR1)
    stdout, stderr = proc.communicate(timeout=600)
    done = _comparable(tmp_path / "stop")[-1]["iteration"]
    assert f"stopped by SIGUSR1 after saving iteration {done}" in stdout and done < 7, stderr[-3000:]
    assert [r["iteration"] for r in _comparable(tmp_path / "stop")] == list(range(done + 1))
    assert sorted(p.name for p in (tmp_path / "stop").glob("checkpoint-*")) == [f"checkpoint-{done}"]
    state = torch.load(tmp_path / "stop" / f"checkpoint-{done}" / "state.pt", weights_only=False)
    assert len(state["streams"]) == WORLD
