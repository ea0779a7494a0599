"""What lockstep play buys: all episodes in one batched call per turn versus one at a time.

Run: python bench/bench_lockstep.py [--episodes 16]. Both modes play the same hand-written game
with the same seeds on the embedded model, greedy, so they do (nearly) the same work. Also prints
the fraction of wall time spent outside generation (sandbox start-up, reset/step round trips,
chat templating), measured by timing `policy.generate`. Prints only; asserts nothing.
On a CPU shared with other jobs, run with OMP_NUM_THREADS=1: oversubscribed OpenMP threads
spin and can make generation several times slower, which swamps what is being measured.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere
from spade_mini.agent import Job, play_episodes  # noqa: E402
from spade_mini.config import Config  # noqa: E402
from spade_mini.envs import EXAMPLES  # noqa: E402
from spade_mini.model import load_policy  # noqa: E402

GAME = "arithmetic_chain"  # its observations vary with the seed, so batches are really padded


class TimedPolicy:
    """Forwards to a policy and adds up the wall time spent inside `generate`."""

    def __init__(self, policy):
        self.policy, self.generate_s, self.calls = policy, 0.0, 0

    def prompt_ids(self, chat, tools=None):
        return self.policy.prompt_ids(chat, tools)

    def generate(self, chats, max_new_tokens, temperature=None, tools=None):
        t0 = time.perf_counter()
        outs = self.policy.generate(chats, max_new_tokens, temperature=temperature, tools=tools)
        self.generate_s += time.perf_counter() - t0
        self.calls += 1
        return outs


def run(policy, groups: list[list[Job]], max_turns: int, max_new_tokens: int):
    timed = TimedPolicy(policy)
    before = policy.tokens_generated
    t0 = time.perf_counter()
    episodes = [ep for jobs in groups for ep in play_episodes(
        timed, jobs, max_turns=max_turns, max_new_tokens=max_new_tokens, temperature=0)]
    wall = time.perf_counter() - t0
    return wall, timed, policy.tokens_generated - before, episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--max-turns", type=int, default=2)
    parser.add_argument("--turn-max-new-tokens", type=int, default=32)
    parser.add_argument("--quantize", default="none", choices=["none", "4bit"])
    args = parser.parse_args()
    policy = load_policy(Config(model="embedded", quantize=args.quantize, temperature=0), verbose=False)
    source = next(e for e in EXAMPLES if e.name == GAME).source
    jobs = [Job(source, seed) for seed in range(args.episodes)]
    policy.generate([[{"role": "user", "content": "Hi."}]], 2)  # warm-up
    print(f"{args.episodes} episodes of {GAME}, embedded model ({args.quantize}), greedy, "
          f"max_turns {args.max_turns}, {args.turn_max_new_tokens} new tokens per turn")
    results = {}
    for mode, groups in (("lockstep", [jobs]), ("one by one", [[j] for j in jobs])):
        wall, timed, tokens, episodes = run(policy, groups, args.max_turns, args.turn_max_new_tokens)
        turns = sum(len(e.turns) for e in episodes)
        results[mode] = wall
        print(f"  {mode:<10} {wall:7.1f} s  {timed.calls:3d} generate calls  {turns:3d} turns  "
              f"{tokens:5d} tokens  outside generation {1 - timed.generate_s / wall:5.1%}")
    print(f"  lockstep speed-up: {results['one by one'] / results['lockstep']:.2f}x")


if __name__ == "__main__":
    main()
