"""Play with a stalling design: benign play costs what it did, and a design whose every step
waits just under its deadline holds the batch for its budget at most.

    python bench/bench_play_budget.py [--designs 4] [--seeds 4] [--rounds 3]

1. Benign turns: the same live environments (SIMPLE, the hostile tests' digit game) stepped
   one after another, as play stepped before, and all at once with `step_envs`, as it steps
   now; the median seconds per turn of each and their ratio.
2. Play: `play_episodes` with a policy that answers at once, on a batch of benign designs
   (each `--seeds` seeds in both arms, 10 turns), then on the same batch plus one design whose
   steps wait 0.1 s less than the step timeout; the extra wait against its budget, and what
   the stalling steps would have cost one after another.
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), os.path.join(os.path.dirname(HERE), "tests")]
from hostile import SIMPLE, stalling  # noqa: E402  (the hostile tests' sources)
from scripted import ScriptedPlayer  # noqa: E402  (the tests' scripted player: it answers at once)

from spade_mini.agent import DESIGN_BUDGET_S, Job, PlaySettings, play_episodes  # noqa: E402
from spade_mini.policy import tiny_model  # noqa: E402
from spade_mini.sandbox import SandboxLimits, start_envs, step_envs  # noqa: E402

ACTION = "\\boxed{0}"  # never the digit: every episode plays all 10 turns
TURNS = 9  # steps per round that leave SIMPLE's episodes running


def turn_seconds(envs, together: bool) -> float:
    for seed, env in enumerate(envs):
        env.reset(seed=seed)
    start = time.perf_counter()
    for _ in range(TURNS):
        if together:
            step_envs(envs, [ACTION] * len(envs), [time.monotonic() + 5.0] * len(envs))
        else:
            for env in envs:
                env.step(ACTION)
    return (time.perf_counter() - start) / TURNS


def play_seconds(jobs, limits) -> tuple[float, list]:
    player = ScriptedPlayer(tiny_model(), ACTION)
    start = time.perf_counter()
    episodes = play_episodes(player, jobs, PlaySettings(max_turns=10, limits=limits))
    return time.perf_counter() - start, episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--designs", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n = 2 * args.designs * args.seeds
    envs = start_envs([SIMPLE] * n)
    try:
        one, many = [], []
        for _ in range(args.rounds):
            one.append(turn_seconds(envs, together=False))
            many.append(turn_seconds(envs, together=True))
    finally:
        for env in envs:
            env.close()
    a, b = statistics.median(one), statistics.median(many)
    print(f"benign turn of {n} environments: one after another {a * 1e3:.2f} ms, "
          f"all at once {b * 1e3:.2f} ms, ratio {b / a:.2f}")

    limits = SandboxLimits()
    benign = [Job(SIMPLE, seed, arm, "a hint", f"d{d}") for d in range(args.designs)
              for seed in range(args.seeds) for arm in ("no_hint", "hint")]
    stall_s = limits.call_timeout_s - 0.1
    slow = [Job(stalling(stall_s), seed, arm, "a hint", "slow") for seed in range(args.seeds)
            for arm in ("no_hint", "hint")]
    base, _ = play_seconds(benign, limits)
    with_slow, episodes = play_seconds(benign + slow, limits)
    cut = sum(e.crashed == "step" for e in episodes if e.job.design_id == "slow")
    won = sum(e.end_reason == "truncated" for e in episodes if e.job.design_id != "slow")
    print(f"play of {len(benign)} benign episodes: {base:.2f} s; with one design of "
          f"{len(slow)} episodes stalling {stall_s:g} s per step: {with_slow:.2f} s, extra "
          f"{with_slow - base:.2f} s against a budget of {DESIGN_BUDGET_S:g} s "
          f"(one after another its steps would wait {len(slow) * 10 * stall_s:.0f} s); "
          f"{cut}/{len(slow)} of its episodes cut, {won}/{len(benign)} benign ones played out")


if __name__ == "__main__":
    main()
