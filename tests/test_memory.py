"""The environment memory: band and skill in selection, regret preference, rendering, persistence."""
import random

import pytest

from spade_mini.designer.memory import REFERENCE_POOL, EnvRecord, Memory, Selection, env_title


def rec(i, skill="logical_deduction", rate=0.5, regret=0.2, valid=True, source=None):
    return EnvRecord(id=f"e{i}", iteration=i, setting="games", skill=skill, title=f"Env number {i}",
                     source=source or f"class E{i}Env:\n    pass\n", valid=valid,
                     reasons=[] if valid else ["broken"], no_hint_solve_rate=rate,
                     hint_solve_rate=None if rate is None else min(1.0, rate + 0.3), regret=regret)


def mixed_memory():
    memory = Memory()
    memory.add([rec(0, rate=0.5), rec(1, rate=0.2), rec(2, rate=0.95), rec(3, rate=0.05),
                rec(4, skill="optimization", rate=0.5), rec(5, rate=0.6, valid=False),
                rec(6, rate=0.15), rec(7, rate=0.85), rec(8, rate=0.86)])
    return memory


def test_selection_obeys_band_skill_and_validity():
    memory = mixed_memory()
    seen_refs, seen_avoid = set(), set()
    for seed in range(40):
        selection = memory.select("logical_deduction", random.Random(seed))
        assert len(selection.references) == 2
        for r in selection.references:
            assert r.skill == "logical_deduction" and r.valid
            assert 0.15 <= r.no_hint_solve_rate <= 0.85
        seen_refs |= {r.id for r in selection.references}
        assert selection.avoid is not None and selection.avoid.skill == "logical_deduction"
        assert not 0.15 <= selection.avoid.no_hint_solve_rate <= 0.85
        seen_avoid.add(selection.avoid.id)
    assert seen_refs == {"e0", "e1", "e6", "e7"}
    assert seen_avoid == {"e2", "e3", "e8"}


def test_selection_prefers_high_regret_and_is_deterministic():
    memory = Memory()
    memory.add([rec(i, regret=i / 20) for i in range(20)])
    top = {f"e{i}" for i in range(20 - REFERENCE_POOL, 20)}
    for seed in range(30):
        ids = [r.id for r in memory.select("logical_deduction", random.Random(seed)).references]
        assert set(ids) <= top
        again = [r.id for r in memory.select("logical_deduction", random.Random(seed)).references]
        assert ids == again


def test_unplayed_examples_fill_in_and_empty_selection():
    memory = Memory()
    memory.add([rec(0, rate=None, regret=None), rec(1, rate=0.99), rec(2, skill="optimization", rate=None)])
    selection = memory.select("logical_deduction", random.Random(0))
    assert [r.id for r in selection.references] == ["e0"]
    assert selection.avoid.id == "e1"
    nothing = memory.select("causal_inference", random.Random(0))
    assert nothing == Selection([], None)
    assert memory.render(nothing) == ""


def test_render_shows_stats_whole_sources_and_why_to_avoid():
    """A reference is shown whole (a source cut mid-code was copied cut, and failed at syntax),
    and one longer than REFERENCE_MAX_CHARS is never selected."""
    from spade_mini.designer.memory import REFERENCE_MAX_CHARS
    memory = Memory()
    long_source = '"""A long env."""\nclass LongEnv:\n' + "    x = 1\n" * 500
    references = [rec(0, rate=0.4, regret=0.35), rec(1)]
    block = memory.render(Selection(references, rec(2, rate=0.95)))
    assert "<REFERENCE_ENVIRONMENTS>" in block and "DIFFERENT" in block
    assert "solve rate 0.40 without hint, 0.70 with hint, regret 0.35" in block
    assert references[0].source.strip() in block and "truncated" not in block
    assert "too easy" in block and "Env number 2" in block
    hard = memory.render(Selection([], rec(3, rate=0.05)))
    assert "too hard" in hard and "REFERENCE" not in hard
    memory.add([rec(4, rate=0.5, regret=0.9, source=long_source), rec(5, rate=0.5, regret=0.1)])
    assert len(long_source) > REFERENCE_MAX_CHARS
    picked = memory.select(memory.records[0].skill, random.Random(0), references=2).references
    assert picked and all(len(r.source) <= REFERENCE_MAX_CHARS for r in picked)


def test_jsonl_round_trip(tmp_path):
    memory = mixed_memory()
    memory.add(rec(9, rate=None, regret=None, valid=False))
    path = tmp_path / "memory.jsonl"
    memory.save(path)
    loaded = Memory.load(path)
    assert loaded.records == memory.records
    assert loaded.records[-1].no_hint_solve_rate is None and loaded.records[-1].reasons == ["broken"]


def test_an_older_runs_memory_with_fields_since_removed_still_loads(tmp_path):
    """Records written before round five carry `written_as` and `parent` (the repair and edit
    prompts, since removed): a resumed run or eval.py reads them, without those fields."""
    import json
    from dataclasses import asdict
    path = tmp_path / "memory.jsonl"
    path.write_text(json.dumps({**asdict(rec(0)), "written_as": "repair", "parent": "e9"}) + "\n")
    assert Memory.load(path).records == [rec(0)]


def test_oldest_records_are_evicted():
    memory = Memory(max_records=3)
    for i in range(5):
        memory.add(rec(i))
    assert [r.id for r in memory.records] == ["e2", "e3", "e4"]
    memory.add([rec(5), rec(6), rec(7), rec(8)])
    assert [r.id for r in memory.records] == ["e6", "e7", "e8"]


def test_seeded_with_examples_never_held_out():
    from spade_mini.envs import EXAMPLES, HELDOUT
    memory = Memory.seeded(EXAMPLES)
    assert len(memory) == len(EXAMPLES)
    assert all(r.iteration == -1 and r.valid and r.no_hint_solve_rate is None for r in memory.records)
    assert {r.skill for r in memory.records} == {e.skill for e in EXAMPLES}
    name = EXAMPLES[0].name
    played = Memory.seeded(EXAMPLES, solve_rates={name: (0.25, 0.75)})
    assert played.records[0].regret == pytest.approx(0.5)
    with pytest.raises(ValueError, match="held-out"):
        Memory.seeded(EXAMPLES + HELDOUT[:1])


def test_env_title():
    assert env_title('class FooEnv:\n    """Find the foo.\n\n    More."""\n') == "Find the foo."
    assert env_title("import random\nclass BarEnv:\n    pass\n") == "BarEnv"
    assert env_title("class BrokenEnv(:\n") == "BrokenEnv"
    assert env_title("x = 1\n") == "untitled environment"


def test_render_of_unplayed_example_says_so():
    block = Memory().render(Selection([rec(0, rate=None, regret=None)], None))
    assert "not played yet" in block and "unknown" not in block
