"""The links of one update, through `one_iteration`: the policy scores every completion under the
`Sampling` that drew it (designer replies pass through design.py and loop.py, agent turns through
agent.py and loop.py, both through reinforce.py), both roles train in one update, and the
baselines are the README's groups: one environment's plays for the agent, one skill's designs
for the designer. Tests of the scorer alone and of decoding alone pass with any of these links
cut; these do not. The doubles below draw nothing: they say how their tokens were drawn, with a
Sampling no code path sets by default."""
import random
import re

import pytest
from scripted import ScriptedPlayer, parts

import spade_mini.loop as loop
import spade_mini.policy as policy_module
from spade_mini.config import Config
from spade_mini.designer import skills_for
from spade_mini.envs import HandEnv
from spade_mini.loop import State, one_iteration
from spade_mini.policy import PLAIN, Sampling
from spade_mini.reinforce import make_optimizer

DESIGNER = Sampling(temperature=0.7)  # full support: the scripted tokens have finite log-probs
AGENT = Sampling(temperature=0.5)

# Wins when the observation names the number (even secrets), loses otherwise: returns that differ
# within the environment, so the agent's advantages are not all 0.
HALF = '''import random

class HalfEnv:
    """Say the number; it is shown as itself when even only (a copy of the text wins half)."""
    def reset(self, seed=None):
        self.secret = random.Random(seed).randint(0, 99)
        shown = "Say the number %d" % self.secret if self.secret % 2 == 0 else "Say the number after %d" % (self.secret - 1)
        return shown + " inside \\\\boxed{}.", {}

    def step(self, action):
        won = action.strip() == "\\\\boxed{%d}" % self.secret
        return ("Yes." if won else "No."), float(won), True, False, {}

    def hint(self):
        return "Numbers below a hundred."

    def solution(self):
        return ["\\\\boxed{%d}" % self.secret]
'''
# Always shown: every play wins, so every advantage of this environment is 0 under its own baseline.
SHOWN = HALF.replace("HalfEnv", "ShownEnv").replace("Say the", "Copy the").replace(
    ' if self.secret % 2 == 0 else "Copy the number after %d" % (self.secret - 1)', "")


def digit_player(policy, replies=(), hinted_mark: bool = False) -> ScriptedPlayer:
    """The tiny policy's tokenizer and weights; designer prompts get prepared replies, and the agent
    says the number its observation names (else 0); with `hinted_mark` a hint-arm turn ends in a mark
    of its own. Every completion says it was drawn with DESIGNER or AGENT."""
    def act(chat):
        shown = re.search(r"the number (\d+)", chat[0]["content"])
        mark = " (as hinted)" if hinted_mark and "HINT:" in chat[0]["content"] else ""
        return f"\\boxed{{{shown.group(1) if shown else 0}}}{mark}"
    roles = ScriptedPlayer(policy, act, replies)
    roles.sampling = {"designer": DESIGNER, "agent": AGENT}
    return roles


def iteration(policy, cfg, pool=()):
    state = State(policy, make_optimizer(policy.policy.model, cfg.lr), skills_for("games"), None, None,
                  random.Random(0), examples=list(pool))
    return parts(one_iteration(state, cfg))


def small(**kw) -> Config:
    # lr 0: the update runs whole (scores, loss, gradient, step) and the shared weights stay as they are
    return Config(**{"model": "tiny", "plays_per_design": 6, "max_turns": 1, "turn_max_new_tokens": 8,
                     "hint_source": "env", "lr": 0.0, **kw})


def recorded_updates(monkeypatch) -> list:
    """The samples of every update `one_iteration` takes."""
    seen, real = [], loop.update

    def recording(policy, samples, *args, **kwargs):
        seen.append(list(samples))
        return real(policy, samples, *args, **kwargs)
    monkeypatch.setattr(loop, "update", recording)
    return seen


def test_both_roles_train_and_every_completion_is_scored_under_its_own_sampler(tiny_policy, monkeypatch):
    scored, real = {}, policy_module.token_logprobs

    def recording(model, prompts, completions, pad_id, *args, samplings=None, **kwargs):
        for c, s in zip(completions, samplings or [PLAIN] * len(completions)):
            scored[tuple(c)] = s
        return real(model, prompts, completions, pad_id, *args, samplings=samplings, **kwargs)
    monkeypatch.setattr(policy_module, "token_logprobs", recording)  # what reinforce.update calls
    broken = "```python\nclass BrokenEnv:\n    def reset(self, seed=None):\n        return 42\n```"
    policy = digit_player(tiny_policy, [f"```python\n{HALF}```", broken])
    row, designs, _, episodes, _ = iteration(policy, small(designs_per_iteration=2))

    assert [d.valid for d in designs] == [True, False]
    assert len({e.ret for e in episodes if e.job.arm == "no_hint"}) == 2  # some plays won, some lost
    assert row["agent_loss"] != 0.0 and row["designer_loss"] != 0.0 and row["update_skipped"] is None, row
    designer = {tuple(d.completion.completion_ids) for d in designs}
    agent = {tuple(t.completion_ids) for e in episodes if e.job.arm == "no_hint" for t in e.turns}
    assert designer <= scored.keys() and agent & scored.keys()  # both roles reached the scorer ...
    assert {scored[c] for c in designer} == {DESIGNER}  # ... each under the sampler that drew it
    assert {scored[c] for c in agent & scored.keys()} == {AGENT}


def test_the_agent_baseline_is_its_environments_own(tiny_policy, monkeypatch):
    """HalfEnv wins some plays, ShownEnv every play. Under one environment's baseline ShownEnv's
    turns have advantage 0 and HalfEnv's sum to 0; a baseline over both would pay every ShownEnv win."""
    updates = recorded_updates(monkeypatch)
    pool = [HandEnv(name, "games", skill, name, source)  # two skills: the pool's skill cap admits both
            for name, skill, source in (("half", "logical_deduction", HALF), ("shown", "memory_recall", SHOWN))]
    _, _, playables, episodes, _ = iteration(digit_player(tiny_policy), small(designs_per_iteration=2, pool_fill="examples"),
                                             pool)

    env_of = {tuple(t.prompt_ids): e.job.design_id for e in episodes if e.job.arm == "no_hint" for t in e.turns}
    advantages = {p.id: [] for p in playables}
    for s in updates[0]:
        advantages[env_of[tuple(s.prompt_ids)]].append(s.advantage)
    half, shown = advantages["example-half"], advantages["example-shown"]
    assert len(half) == len(shown) == 6 and len(set(half)) == 2  # HalfEnv's plays differ
    assert sum(half) == pytest.approx(0.0, abs=1e-9)
    assert shown == [0.0] * 6


def test_the_designer_baseline_is_its_skills_own(tiny_policy, monkeypatch):
    """Four invalid designs, two per skill, graded by how far validation got: each skill's
    advantages sum to 0, and the skills' mean rewards differ (so one baseline over both would not)."""
    updates = recorded_updates(monkeypatch)
    replies = ["No code, only words.",                                       # no_code
               "```python\nclass BrokenEnv(:\n    pass\n```",                # syntax
               "```python\nclass RaiseEnv:\n    def __init__(self):\n        raise ValueError\n```",  # load
               "```python\nclass ResetEnv:\n    def reset(self, seed=None):\n        return 42\n```"]  # reset
    _, designs, _, _, _ = iteration(digit_player(tiny_policy, replies), small(designs_per_iteration=4))

    assert [d.stage for d in designs] == ["no_code", "syntax", "load", "reset"]
    skill_of = {tuple(d.completion.completion_ids): d.skill.key for d in designs}
    by_skill = {}
    for s in updates[0]:
        if s.role == "designer":
            by_skill.setdefault(skill_of[tuple(s.completion_ids)], []).append(s.advantage)
    rewards = {}
    for d in designs:
        rewards.setdefault(d.skill.key, []).append(d.reward)
    assert len(by_skill) == 2 and all(len(a) == 2 for a in by_skill.values())
    assert len({sum(r) for r in rewards.values()}) == 2  # the skills' means differ
    for skill, adv in by_skill.items():
        assert sum(adv) == pytest.approx(0.0, abs=1e-9), skill
        assert adv != [0.0, 0.0]


def test_the_hint_arm_is_never_trained(tiny_policy, monkeypatch):
    """Hint-arm plays whose returns differ (so, were they trained, their advantages would not be 0)
    never become samples of the update; the no-hint plays of the same seeds do."""
    updates = recorded_updates(monkeypatch)
    row, designs, _, episodes, _ = iteration(digit_player(tiny_policy, [f"```python\n{HALF}```"], hinted_mark=True),
                                             small(designs_per_iteration=1))
    hinted = [e for e in episodes if e.job.arm == "hint"]
    assert hinted and len({e.ret for e in hinted}) == 2  # the hint arm was played, and some won, some lost
    hint_turns = {tuple(t.completion_ids) for e in hinted for t in e.turns}
    no_hint_turns = {tuple(t.completion_ids) for e in episodes if e.job.arm == "no_hint" for t in e.turns}
    assert not hint_turns & no_hint_turns  # the mark makes them tell apart
    (samples,) = updates
    trained = {tuple(s.completion_ids) for s in samples if s.role == "agent"}
    assert trained and trained <= no_hint_turns and not trained & hint_turns
