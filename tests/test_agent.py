"""The agent: action extraction, lockstep play, hints, broken environments, episode records.

Most tests use a scripted policy (replies chosen by a function of the chat) so that outcomes are
known exactly; solutions are computed in-process by exec'ing the trusted source with the same
seed. The real tiny and embedded models check the records training needs and that lockstep
batching does not change what the agent does.
"""
import importlib
import sys

import pytest
import torch

from scripted import ScriptedPlayer

from spade_mini.agent import RAW_ACTION_CHARS, Job, PlaySettings, extract_action, last_boxed, play_episodes
from spade_mini.envs import EXAMPLES
from spade_mini.policy import token_logprobs
from spade_mini.sandbox import SandboxLimits

# Name three hidden letters in order; four misses lose. Actions arrive as \boxed{x}.
LETTERS = r'''
import random
import re


class LettersEnv:
    def reset(self, seed=None):
        rng = random.Random(seed)
        self.letters = [rng.choice("abcdefgh") for _ in range(3)]
        self.found, self.misses = 0, 0
        return f"Game {seed}: name my three hidden letters (a-h), one per turn.", {}

    def step(self, action):
        m = re.fullmatch(r"\\boxed\{(.*)\}", action.strip(), re.S)
        guess = m.group(1).strip() if m else ""
        if guess == self.letters[self.found]:
            self.found += 1
            if self.found == 3:
                return "You named all three.", 1.0, True, False, {}
            return "Right, next letter.", 0.0, False, False, {}
        self.misses += 1
        if self.misses >= 4:
            return "Four misses: you lose.", 0.0, True, False, {}
        return "Wrong, try again.", 0.0, False, False, {}

    def hint(self):
        return "The letters are " + ", ".join(self.letters) + "."

    def solution(self):
        return ["\\boxed{%s}" % c for c in self.letters]
'''
# One environment, three ways to break: MODE is replaced before use.
BROKEN = r'''
class BrokenEnv:
    def reset(self, seed=None):
        if "MODE" == "reset":
            raise ValueError("reset exploded")
        return "Game broken: say anything.", {}

    def step(self, action):
        if "MODE" == "step":
            raise ValueError("step exploded")
        while True:  # MODE == "hang"
            pass
'''
SHORT = SandboxLimits(call_timeout_s=1)


def trusted(source: str, seed: int):
    """The environment in-process (trusted source only), reset with `seed`: (env, obs, info)."""
    if "tooluse" not in sys.modules:  # the sandbox exposes the helper as a top-level module
        sys.modules["tooluse"] = importlib.import_module("spade_mini.tooluse")
    namespace: dict = {"__name__": "trusted_env"}
    exec(compile(source, "<env>", "exec"), namespace)
    (cls,) = [v for k, v in namespace.items() if k.endswith("Env") and isinstance(v, type)
              and v.__module__ == "trusted_env"]
    env = cls()
    obs, info = env.reset(seed=seed)
    return env, obs, info


def winner(policy, jobs: list[Job]) -> ScriptedPlayer:
    """Plays each job's solution(), found by the observation in the chat's first message."""
    moves = {}
    for job in jobs:
        env, obs, _ = trusted(job.source, job.seed)
        moves[obs] = env.solution()

    def reply(chat):
        turn = sum(m["role"] == "assistant" for m in chat)
        plan = next((v for obs, v in moves.items() if obs in chat[0]["content"]), [])
        move = plan[turn] if turn < len(plan) else "\\boxed{?}"
        return f"Let me think. {move}" if move.startswith("\\boxed") else move

    return ScriptedPlayer(policy, reply)


@pytest.fixture
def wrong(tiny_policy) -> ScriptedPlayer:
    return ScriptedPlayer(tiny_policy, "I guess \\boxed{z}")


def batches(policy: ScriptedPlayer) -> list[int]:
    return [len(turn) for turn in policy.turns]



# --- action extraction -------------------------------------------------------------------------

@pytest.mark.parametrize("text, box", [
    ("so \\boxed{\\frac{1}{2}} it is", "\\frac{1}{2}"),              # nested braces
    ("\\boxed{3} no wait \\boxed{ 4 }", "4"),                        # the last box wins, stripped
    ("\\boxed{7} then \\boxed{{a}, {b}", None),                      # the last box is unclosed
    ("no box at all", None),
])
def test_last_boxed(text, box):
    assert last_boxed(text) == box


def test_extract_action_games():
    assert extract_action("x \\boxed{{1,2}} y", tool_use=False) == "\\boxed{{1,2}}"
    assert extract_action("a \\boxed{1} b \\boxed{2}", tool_use=False) == "\\boxed{2}"
    long = "  rambling " * 1000
    assert extract_action(long, tool_use=False) == long.strip()[:RAW_ACTION_CHARS]
    assert len(extract_action(long, tool_use=False)) == RAW_ACTION_CHARS
    # tags mean nothing in games: the raw text is passed on
    assert extract_action("<answer>5</answer>", tool_use=False) == "<answer>5</answer>"


def test_extract_action_tool_use():
    call = '<tool_call>{"name": "f", "arguments": {"q": {"x": 1}}}</tool_call>'
    assert extract_action(f"First I look.\n{call}\nthen <answer>9</answer>", tool_use=True) == call
    assert extract_action("Done: <answer>ORD-1</answer> \\boxed{2}", tool_use=True) == "<answer>ORD-1</answer>"
    assert extract_action("<answer>\nmulti\nline\n</answer>", tool_use=True) == "<answer>\nmulti\nline\n</answer>"
    # without a tag, a box still counts; an unclosed tag is raw text
    assert extract_action("I think \\boxed{42}", tool_use=True) == "\\boxed{42}"
    assert extract_action("<tool_call>{\"name\": \"f\"}", tool_use=True) == '<tool_call>{"name": "f"}'


# --- winning, losing and hints -----------------------------------------------------------------

def test_scripted_winner_wins_and_wrong_player_loses(tiny_policy, wrong):
    jobs = [Job(LETTERS, seed) for seed in (3, 4, 5)]
    policy = winner(tiny_policy, jobs)
    won = play_episodes(policy, jobs, PlaySettings(max_turns=10))
    assert [(e.end_reason, e.ret, e.terminated) for e in won] == [("won", 1.0, True)] * 3
    assert [t.reward for t in won[0].turns] == [0.0, 0.0, 1.0]
    assert won[0].turns[-1].action == trusted(LETTERS, 3)[0].solution()[-1]
    assert batches(policy) == [3, 3, 3]  # all episodes in one call per turn
    lost = play_episodes(wrong, jobs[:1], PlaySettings(max_turns=10))[0]
    assert (lost.end_reason, lost.ret, len(lost.turns)) == ("lost", 0.0, 4)


def test_tool_use_winner_wins(tiny_policy):
    env = next(e for e in EXAMPLES if e.name == "inventory_order")
    jobs = [Job(env.source, seed) for seed in (0, 1)]
    episodes = play_episodes(winner(tiny_policy, jobs), jobs, PlaySettings(max_turns=10))
    for ep in episodes:
        assert (ep.end_reason, ep.ret) == ("won", 1.0)
        assert ep.tools and "search_products" in ep.messages[0]["content"]
        assert ep.turns[0].action.startswith("<tool_call>")


def test_hint_arms(wrong):
    text = "Start with the letter a."
    hinted, plain, own = play_episodes(wrong, [Job(LETTERS, 1, arm="hint", hint=text),
                                               Job(LETTERS, 1, arm="no_hint", hint=text),
                                               Job(LETTERS, 1, arm="hint", hint=None)], PlaySettings(max_turns=1))
    assert "\n\nHINT: " + text in hinted.messages[0]["content"]
    assert "HINT:" not in plain.messages[0]["content"]
    assert "HINT:" not in own.messages[0]["content"] and not own.hint_shown  # read beforehand


def test_the_child_that_plays_is_never_asked_for_its_hint(wrong):
    # hints are read outside the children that play (designer/hints.py), so both arms' children
    # get the same calls; a hint arm without a hint plays unhinted
    broken_hint = LETTERS.replace('return "The letters are "',
                                  'raise KeyError("no hint today")\n        return "The letters are "')
    (ep,) = play_episodes(wrong, [Job(broken_hint, 1, arm="hint", hint=None)], PlaySettings(max_turns=1))
    assert "HINT:" not in ep.messages[0]["content"] and not ep.notes
    assert ep.ret == 0.0 and ep.end_reason != "" and not ep.end_reason.startswith("reset failed")


# --- broken environments -----------------------------------------------------------------------

def test_broken_environments_end_only_their_own_episode(tiny_policy):
    jobs = [Job(LETTERS, 1), Job(BROKEN.replace("MODE", "step"), 2),
            Job(BROKEN.replace("MODE", "hang"), 3), Job(BROKEN.replace("MODE", "reset"), 4),
            Job(LETTERS, 2)]
    policy = winner(tiny_policy, [jobs[0], jobs[-1]])  # the broken ones get a default reply
    good1, step, hang, reset, good2 = play_episodes(policy, jobs, PlaySettings(max_turns=10, limits=SHORT))
    assert (good1.end_reason, good1.ret) == (good2.end_reason, good2.ret) == ("won", 1.0)
    assert step.end_reason.startswith("step failed: EnvRuntimeError") and "step exploded" in step.end_reason
    assert hang.end_reason.startswith("step failed: EnvTimeout")
    assert reset.end_reason.startswith("reset failed: EnvRuntimeError") and "reset exploded" in reset.end_reason
    assert [step.ret, hang.ret, reset.ret] == [-1.0, -1.0, -1.0]
    assert reset.turns == [] and len(step.turns) == len(hang.turns) == 1
    assert "[environment error]" in step.messages[-1]["content"]
    assert batches(policy) == [4, 2, 2]  # the failed reset never plays; crashed episodes drop out


def test_crash_reward_is_configurable(wrong):
    ep = play_episodes(wrong, [Job(BROKEN.replace("MODE", "step"), 0)], PlaySettings(crash_reward=-0.5))[0]
    assert ep.ret == -0.5


# --- how episodes end --------------------------------------------------------------------------

def test_completion_without_eos_ends_no_eos(tiny_policy):
    policy = ScriptedPlayer(tiny_policy, "\\boxed{a} and on and on", finished=False)
    ep = play_episodes(policy, [Job(LETTERS, 0)], PlaySettings(max_turns=5))[0]
    assert (ep.end_reason, ep.ret, ep.terminated, len(ep.turns)) == ("no_eos", 0.0, False, 1)
    assert ep.messages[-1]["role"] == "assistant"  # nothing reached the environment


def test_context_limit_ends_context(wrong):
    first = len(wrong.prompt_ids([{"role": "user", "content": _first_message(0)}]))
    ep = play_episodes(wrong, [Job(LETTERS, 0)], PlaySettings(max_turns=5, max_new_tokens=16,
                                                              max_context_tokens=first + 16 + 5))[0]
    assert (ep.end_reason, ep.ret, len(ep.turns)) == ("context", 0.0, 1)
    none = play_episodes(wrong, [Job(LETTERS, 0)], PlaySettings(max_new_tokens=16, max_context_tokens=first))[0]
    assert (none.end_reason, none.turns) == ("context", [])


def _first_message(seed):
    from spade_mini.agent import first_message
    return first_message(trusted(LETTERS, seed)[1], None, None)


def test_turn_cap_ends_turn_cap(wrong):
    ep = play_episodes(wrong, [Job(LETTERS, 0)], PlaySettings(max_turns=2))[0]
    assert (ep.end_reason, ep.ret, ep.terminated, len(ep.turns)) == ("turn_cap", 0.0, False, 2)


# --- what training needs -----------------------------------------------------------------------

def always_stops(policy) -> ScriptedPlayer:
    """The model plays, and each of its turns counts as finished, so episodes last."""
    return ScriptedPlayer(policy, None, finished=True)


def test_episode_records_for_training(tiny_policy):
    policy = always_stops(tiny_policy)
    episodes = play_episodes(policy, [Job(LETTERS, 0), Job(LETTERS, 1)],
                             PlaySettings(max_turns=3, max_new_tokens=6, temperature=0))
    for k, ep in enumerate(episodes):
        assert ep.end_reason == "turn_cap" and len(ep.turns) == 3
        assert [len(m) for m in ep.completion_mask] == [len(t.completion_ids) for t in ep.turns]
        assert all(set(m) == {1} for m in ep.completion_mask)
        for t, turn in enumerate(ep.turns):
            chat = ep.messages[:2 * t + 1]  # user, assistant, user, ...: the chat at turn t
            assert turn.prompt_ids == tiny_policy.prompt_ids(chat)
            assert turn.prompt_ids == policy.turns[t][k].prompt_ids
            assert turn.completion_ids == policy.turns[t][k].completion_ids
            assert 1 <= len(turn.completion_ids) <= 6
            assert ep.messages[2 * t + 1]["content"] == policy.turns[t][k].text
    # a later turn's prompt extends the earlier one (the chat only grows)
    p0, p1 = episodes[0].turns[0].prompt_ids, episodes[0].turns[1].prompt_ids
    assert len(p1) > len(p0)


# --- lockstep: batching must not change what the agent does ------------------------------------

LOGPROB_TOL = 1e-4  # fp32 on CPU: left padding changes matmul shapes, not the maths
FLIP_TOL = 1e-3     # a greedy choice may flip only between two tokens this close in log-prob


def test_lockstep_matches_one_by_one(fp32_policy):
    # its observations differ in length by seed (so the batch is really left padded), and a
    # wrong answer does not end the game (so turn 2 is played)
    source = next(e for e in EXAMPLES if e.name == "knapsack").source
    jobs = [Job(source, seed) for seed in (0, 1, 2, 3)]
    kw = PlaySettings(max_turns=2, max_new_tokens=12, temperature=0)
    # the model rarely stops within 12 tokens; treating every turn as finished reaches turn 2
    batched = play_episodes(always_stops(fp32_policy), jobs, kw)
    alone = [play_episodes(always_stops(fp32_policy), [j], kw)[0] for j in jobs]
    assert len({len(e.turns[0].prompt_ids) for e in batched}) > 1
    assert any(len(e.turns) == 2 for e in batched)  # some episodes reach a second, padded turn
    pad = fp32_policy.pad_id
    # first turn: the batched tokens score the same in the (padded) batch and alone
    in_batch = token_logprobs(fp32_policy.model, [e.turns[0].prompt_ids for e in batched],
                              [e.turns[0].completion_ids for e in batched], pad)
    for b, a, lp_b in zip(batched, alone, in_batch):
        assert b.turns[0].prompt_ids == a.turns[0].prompt_ids
        lp_a = token_logprobs(fp32_policy.model, [b.turns[0].prompt_ids],
                              [b.turns[0].completion_ids], pad)[0]
        assert torch.allclose(lp_b, lp_a, atol=LOGPROB_TOL)
        if b.transcript() == a.transcript():
            continue
        # otherwise the first difference must be a near tie between two greedy choices
        t = next(i for i, (x, y) in enumerate(zip(b.turns, a.turns)) if x.completion_ids != y.completion_ids)
        assert b.turns[t].prompt_ids == a.turns[t].prompt_ids
        x, y = b.turns[t].completion_ids, a.turns[t].completion_ids
        k = next(i for i, (u, v) in enumerate(zip(x, y)) if u != v)
        prefix = b.turns[t].prompt_ids + x[:k]
        lx, ly = token_logprobs(fp32_policy.model, [prefix, prefix], [[x[k]], [y[k]]], pad)
        assert abs(float(lx[0] - ly[0])) < FLIP_TOL, f"seed {b.job.seed}: batching changed a clear choice"

