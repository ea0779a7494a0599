"""What the plays of an iteration are worth: returns, hint-based regret, the designer's reward,
the graded reward of invalid designs, and the agent's and designer's advantages.

Pure Python on plain numbers: nothing here imports torch or the sandbox (a test reads the
imports), so every rule can be checked by hand and in the notebooks.

    scores.py              score_playables: pair the arms of every seed, score each environment;
                           informative_episodes: the plays in groups with both outcomes;
                           sum_squared_deviations: their spread around the group means;
                           thin_out: a share of the samples, reweighted (same expected gradient)
    regret.py              episode_return, hint regret, designer_reward, DesignScore, advantages
    invalidity.py          the reward of a design that failed validation, by its stage
    learning_potential.py  LearningPotential: the no-hint ablation's per-skill averages
    bands.py               the four solve-rate bands (pool, memory references, plateau, gate), one name each

Other folders use the names below; the files above import each other directly.
"""
from spade_mini.reward.invalidity import INVALID_STAGES, apply_invalid_policy, graded_invalid_reward
from spade_mini.reward.learning_potential import LearningPotential
from spade_mini.reward.regret import (DESIGNER_REWARD_KINDS, REGRET_ESTIMATORS, DesignScore, designer_reward,
                                      episode_return, group_advantages, hint_regret, lowest_valid_reward,
                                      score_design)
from spade_mini.reward.scores import (ScoreSettings, informative_episodes, score_playables, sum_squared_deviations,
                                     thin_out)

__all__ = ["ScoreSettings", "score_playables", "thin_out", "informative_episodes", "sum_squared_deviations", "episode_return", "hint_regret", "designer_reward", "DesignScore", "score_design",
           "group_advantages", "lowest_valid_reward", "DESIGNER_REWARD_KINDS", "REGRET_ESTIMATORS",
           "INVALID_STAGES", "apply_invalid_policy", "graded_invalid_reward", "LearningPotential"]
