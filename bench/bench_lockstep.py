"""What lockstep play buys, and what continuing chats buys on multi-turn episodes.

Run: python bench/bench_lockstep.py [--workload lockstep|multi-turn] [--episodes 16].

`lockstep` (the default): all episodes in one batched call per turn versus one at a time, on the
same hand-written game with the same seeds, greedy, so both do (nearly) the same work. Also
prints the fraction of wall time spent outside generation (sandbox start-up, reset/step round
trips, chat templating), measured by timing the policy's calls.

`multi-turn`: the same episodes (16 x 8 turns of a guessing game) played three ways:
today's path (`Policy.generate`: each turn re-reads the whole chat, and finished rows keep
decoding padding until the longest row stops), `Policy.continue_chats` (each row stops at its
EOS and each episode reuses the keys and values of its previous turn), and transformers'
continuous batching (`generate_batch`, paged attention with prefix sharing between calls).
Prints wall time, positions prefilled and decoded (padding included), prompt tokens reused, as
ratios to today's path, and whether the greedy transcripts are identical. The 135M model
rarely stops within a CPU-sized token budget, and the agent ends an episode at a turn that did
not stop, so here every turn counts as finished (in all three paths alike) and each episode
lasts until the guess cap. Prints only; asserts
nothing. On a CPU shared with other jobs, run with OMP_NUM_THREADS=1: oversubscribed OpenMP
threads spin and can make generation several times slower, which swamps what is being measured.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere
from spade_mini.agent import Job, PlaySettings, play_episodes  # noqa: E402
from spade_mini.config import Config  # noqa: E402
from spade_mini.envs import EXAMPLES  # noqa: E402
from spade_mini.policy import load_policy  # noqa: E402

GAME = "arithmetic_chain"  # its observations vary with the seed, so batches are really padded
MULTI_TURN_GAME = "guess_number"  # wrong guesses do not end it: episodes last until the guess cap


class TimedPolicy:
    """The agent's turns through the policy's `generate` (each turn decodes its whole chat
    again, nothing kept between turns), the time spent in it added up."""

    def __init__(self, policy, go_on: bool = False):
        self.policy, self.go_on, self.generate_s, self.calls = policy, go_on, 0.0, 0

    def prompt_ids(self, chat, tools=None):
        return self.policy.prompt_ids(chat, tools)

    def timed(self, fn, *args, **kwargs):
        t0 = time.perf_counter()
        outs = fn(*args, **kwargs)
        self.generate_s += time.perf_counter() - t0
        self.calls += 1
        for out in outs if self.go_on else []:
            out.finished = True  # a turn cut at the budget still reaches the environment
        return outs

    def generate(self, chats, max_new_tokens, temperature=None, tools=None):
        return self.timed(self.policy.generate, chats, max_new_tokens, temperature=temperature, tools=tools)

    def continue_chats(self, chats, max_new_tokens, temperature=None, keys=None):
        return self.generate(chats, max_new_tokens, temperature)

    def acting_as(self, role):
        return self.policy.acting_as(role)


class TimedContinuing(TimedPolicy):
    """The agent's turns through the policy's `continue_chats`: each episode's keys and values kept."""

    def continue_chats(self, chats, max_new_tokens, temperature=None, keys=None):
        return self.timed(self.policy.continue_chats, chats, max_new_tokens, temperature=temperature, keys=keys)


class TimedContinuousBatching(TimedPolicy):
    """Turns through transformers' `generate_batch`: paged attention, rows that finish leave the
    batch, and one persistent manager so that later turns can share earlier turns' full pages."""

    def __init__(self, policy, max_new_tokens):
        import logging

        from transformers import ContinuousBatchingConfig
        super().__init__(policy, go_on=True)
        logging.getLogger("ContinuousBatchingLogger").setLevel(logging.ERROR)  # a warning per call
        self.cb = ContinuousBatchingConfig(page_size=32, num_blocks=2048, max_batch_tokens=1024)
        self.generation_config = policy.generation_config(max_new_tokens, 0)

    def continue_chats(self, chats, max_new_tokens, temperature=None, keys=None):
        return self.timed(self.batch, chats, max_new_tokens)

    def batch(self, chats, max_new_tokens):
        p = self.policy
        prompts = [p.prompt_ids(c) for c in chats]
        out = p.model.generate_batch(prompts, generation_config=self.generation_config, max_new_tokens=max_new_tokens,
                                     continuous_batching_config=self.cb, persistent_manager=True, warmup=False)
        ids = [o.generated_tokens for o in out.values()]
        p.tokens_decoded += sum(len(i) for i in ids)
        p.tokens_generated += sum(len(i) for i in ids)
        return p.completions(prompts, [(i, bool(i) and i[-1] in p.eos_ids) for i in ids], 0)


def run(timed, groups: list[list[Job]], max_turns: int, max_new_tokens: int):
    policy = timed.policy
    before = (policy.tokens_generated, policy.tokens_prefilled, policy.tokens_decoded, policy.tokens_reused)
    t0 = time.perf_counter()
    episodes = [ep for jobs in groups for ep in play_episodes(timed, jobs, PlaySettings(max_turns=max_turns, max_new_tokens=max_new_tokens, temperature=0))]
    wall = time.perf_counter() - t0
    after = (policy.tokens_generated, policy.tokens_prefilled, policy.tokens_decoded, policy.tokens_reused)
    return wall, [a - b for a, b in zip(after, before)], episodes


def lockstep(policy, args) -> None:
    source = next(e for e in EXAMPLES if e.name == GAME).source
    jobs = [Job(source, seed) for seed in range(args.episodes)]
    print(f"{args.episodes} episodes of {GAME}, embedded model ({args.quantize}), greedy, "
          f"max_turns {args.max_turns}, {args.turn_max_new_tokens} new tokens per turn")
    results = {}
    for mode, groups in (("lockstep", [jobs]), ("one by one", [[j] for j in jobs])):
        timed = TimedPolicy(policy)
        wall, (tokens, *_), episodes = run(timed, groups, args.max_turns, args.turn_max_new_tokens)
        turns = sum(len(e.turns) for e in episodes)
        results[mode] = wall
        print(f"  {mode:<10} {wall:7.1f} s  {timed.calls:3d} generate calls  {turns:3d} turns  "
              f"{tokens:5d} tokens  outside generation {1 - timed.generate_s / wall:5.1%}")
    print(f"  lockstep speed-up: {results['one by one'] / results['lockstep']:.2f}x")


def multi_turn(policy, args) -> None:
    source = next(e for e in EXAMPLES if e.name == MULTI_TURN_GAME).source
    cap = f"randint(1, 64), {args.max_turns}"  # the guess cap becomes the turn count
    source = source.replace("randint(1, 64), 7", cap).replace("in 7 tries", f"in {args.max_turns} tries")
    assert cap in source, "guess_number changed: update the bench"
    jobs = [Job(source, seed) for seed in range(args.episodes)]
    print(f"{args.episodes} episodes x {args.max_turns} turns of {MULTI_TURN_GAME}, embedded model "
          f"({args.quantize}), greedy, {args.turn_max_new_tokens} new tokens per turn")
    paths = [("generate (today)", TimedPolicy(policy, go_on=True)), ("continue_chats", TimedContinuing(policy, go_on=True))]
    if not args.skip_continuous_batching:
        paths.append(("generate_batch", TimedContinuousBatching(policy, args.turn_max_new_tokens)))
    rows, transcripts = {}, {}
    for name, timed in paths:
        wall, counts, episodes = run(timed, [jobs], args.max_turns, args.turn_max_new_tokens)
        rows[name] = (wall, timed.generate_s, *counts, sum(len(e.turns) for e in episodes))
        transcripts[name] = [e.messages for e in episodes]
    base = rows["generate (today)"]
    print(f"  {'path':<17} {'wall s':>7} {'in model':>8} {'turns':>5} {'kept':>6} {'prefilled':>9} "
          f"{'decoded':>8} {'reused':>7}   ratio to today: wall prefilled decoded   same transcripts")
    for name, (wall, gen_s, kept, prefilled, decoded, reused, turns) in rows.items():
        same = sum(a == b for a, b in zip(transcripts[name], transcripts["generate (today)"]))
        known = prefilled or name != "generate_batch"  # its prefix hits are internal to transformers
        ratio = f"{prefilled / base[3]:.2f}" if known else "n/a"
        print(f"  {name:<17} {wall:7.1f} {gen_s:8.1f} {turns:5d} {kept:6d} "
              f"{prefilled if known else 'n/a':>9} {decoded:8d} {reused if known else 'n/a':>7}"
              f"   {wall / base[0]:19.2f} {ratio:>9} {decoded / base[4]:7.2f}   {same}/{len(jobs)}")
    for name in rows:
        print(f"  play speed-up of {name}: {base[0] / rows[name][0]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="lockstep", choices=["lockstep", "multi-turn"])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--max-turns", type=int, default=None, help="default: 2 (lockstep), 8 (multi-turn)")
    parser.add_argument("--turn-max-new-tokens", type=int, default=None, help="default: 32 (lockstep), 48 (multi-turn)")
    parser.add_argument("--quantize", default="none", choices=["none", "4bit"])
    parser.add_argument("--skip-continuous-batching", action="store_true")
    args = parser.parse_args()
    multi = args.workload == "multi-turn"
    args.max_turns = args.max_turns or (8 if multi else 2)
    args.turn_max_new_tokens = args.turn_max_new_tokens or (48 if multi else 32)
    policy = load_policy(Config(model="embedded", quantize=args.quantize, temperature=0), verbose=False)
    policy.generate([[{"role": "user", "content": "Hi."}]], 2)  # warm-up
    (multi_turn if multi else lockstep)(policy, args)


if __name__ == "__main__":
    main()
