"""Environments as adversaries (issue 25): the designer is trained on what the trainer measures,
so every measurement must hold against an environment written to game it. One test per class
of attack, through the public API and the real scoring code; the sandbox's own classes (side
channels, validation that looks like play, replayed determinism) are in
tests/test_sandbox_adversary.py, which also runs as an unprivileged user."""
import pytest

from spade_mini.agent import Episode, Job
from spade_mini.config import Config
from spade_mini.loop import Playable
from spade_mini.reward import LearningPotential, score_playables


def _scored(returns_by_arm: dict[str, list[float]], designer_reward: str, potential=None):
    """The DesignScore of one environment whose seeds i played returns_by_arm[arm][i]."""
    episodes = []
    for arm, returns in returns_by_arm.items():
        for seed, ret in enumerate(returns):
            ep = Episode(job=Job("", seed, arm, None, "env"))
            ep.ret, ep.hint_shown, ep.terminated = ret, arm == "hint", True
            episodes.append(ep)
    cfg = Config(model="tiny", designer_reward=designer_reward, regret_estimator="clipped")
    scores, _ = score_playables([Playable("env", "skill", "games", "")], episodes, cfg,
                                potential or LearningPotential())
    return scores["env"]


# ---- 8. a reward ablation must not pay breaking the reward contract --------------------------

def test_learning_potential_does_not_pay_an_environment_that_ends_every_episode_at_minus_one():
    def potential():  # the skill used to sit at a no-hint return of 0.3
        p = LearningPotential()
        p.update("skill", [0.3])
        return p
    breaker = _scored({"no_hint": [-1.0] * 4}, "learning_potential", potential()).reward
    keepers = [_scored({"no_hint": [r] * 4}, "learning_potential", potential()).reward
               for r in (0.0, 1.0)]  # the most a 0/1 environment can earn either way
    assert breaker <= max(keepers) == pytest.approx(0.7)  # 1.30 before
    moved = potential()
    moved.update("skill", [-1.0])  # its returns do not drag the skill's averages below 0 either
    assert moved.slow["skill"] >= 0.0


def test_regret_does_not_pay_punishing_the_unhinted_arm():
    breaker = _scored({"no_hint": [-1.0] * 4, "hint": [1.0] * 4}, "regret")
    keeper = _scored({"no_hint": [0.0] * 4, "hint": [1.0] * 4}, "regret")
    assert breaker.reward == keeper.reward == 1.0 and breaker.regret == 1.0  # 2.0 before
