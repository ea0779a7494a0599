"""Two paths of `one_iteration` that only its own state reaches: a design that copies one the
memory holds from an earlier iteration is refused as a duplicate, and a design whose hint() or
solution() stalls costs the hint phase at most its budget and plays no hint arm."""
import random

import pytest
from hostile import KIT
from scripted import parts
from test_wiring import HALF, digit_player, small

import spade_mini.designer.hints as hints
from spade_mini.designer import Memory, skills_for
from spade_mini.loop import State, one_iteration
from spade_mini.reinforce import make_optimizer


def state(policy, memory=None) -> State:
    return State(policy, make_optimizer(policy.policy.model, 0.0), skills_for("games"), None, memory,
                 random.Random(0))


def test_a_copy_of_an_earlier_iterations_design_is_a_duplicate(tiny_policy):
    """Iteration 0's valid design goes into the memory; iteration 1 writes it again under other
    names and comments, and is refused: valid code, nothing new."""
    copy = HALF.replace("HalfEnv", "DigitEnv").replace('"""Say the number; it is shown as itself when even only (a copy of the text wins half)."""',
                                                       "# a game of digits")
    policy = digit_player(tiny_policy, [f"```python\n{HALF}```", f"```python\n{copy}```"])
    s, cfg = state(policy, Memory()), small(designs_per_iteration=1, plays_per_design=2)
    _, (first,), _, _, _ = parts(one_iteration(s, cfg))
    assert first.valid and first.id in {r.id for r in s.memory.records if r.valid}
    row, (second,), playables, episodes, _ = parts(one_iteration(s, cfg))
    assert not second.valid and second.stage == "duplicate"  # the gate's archive holds the first design
    assert second.reasons[0].startswith(f"duplicate: a re-skin of {first.id}: the same logic"), second.reasons
    # nothing new is played: only the pool replays the first design, no hint arm
    assert {p.id for p in playables} <= {first.id} and {e.job.arm for e in episodes} <= {"no_hint"}
    assert row["valid_fraction"] == 0.0
    # without the novelty gate, the exact copy check refuses it too
    s, cfg = state(digit_player(tiny_policy, [f"```python\n{HALF}```", f"```python\n{copy}```"]), Memory()), \
        small(designs_per_iteration=1, plays_per_design=2, novelty=False)
    first = parts(one_iteration(s, cfg))[1][0]
    (second,) = parts(one_iteration(s, cfg))[1]
    assert second.validation.ok and second.stage == "duplicate"
    assert second.reasons == [f"duplicate: the same environment as {first.id} up to names, comments and docstrings"]


@pytest.mark.parametrize("method", ["hint", "solution"])
def test_a_stalling_hint_or_solution_costs_at_most_the_hint_budget(tiny_policy, monkeypatch, method):
    """Each call of `method` waits 0.4 s (validation's few calls pass); reading six seeds' hints
    and solutions would take 2.4 s against a budget of 1.5 s."""
    budget = 1.5
    monkeypatch.setattr(hints, "HINT_BUDGET_S", budget)
    slow = KIT + HALF.replace(f"    def {method}(self):\n", f"    def {method}(self):\n        wait(0.4)\n")
    row, (design,), _, episodes, scores = parts(one_iteration(state(digit_player(tiny_policy, [f"```python\n{slow}```"])),
                                                              small(designs_per_iteration=1)))
    assert design.valid
    score = scores[design.id]
    assert score.note.startswith("hints not read: EnvTimeout") and score.regret is None, score
    assert {e.job.arm for e in episodes} == {"no_hint"} and len(episodes) == 6
    assert row["time_hint_s"] < budget + 1.0, row["time_hint_s"]
