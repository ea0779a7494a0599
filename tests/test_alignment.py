"""Alignment (spade_mini/alignment.py): the cosine of an environment's gradient with the alignment
set's, taken inside the update by grouping its micro-batches by environment."""
from types import SimpleNamespace

import pytest
import torch

from spade_mini import alignment
from spade_mini.agent import Job
from spade_mini.envs import ALL_HELDOUT, MEMORY_ONLY, TIERS
from spade_mini.policy import PLAIN, BareModel
from spade_mini.reinforce import Sample, UpdateSettings, make_optimizer, micro_batches, update


class Table(torch.nn.Module):
    """A model small enough to check by hand: the next token's logits are a row of a V x V table,
    picked by the token before. At zero weights every next token has probability 1/V."""

    def __init__(self, vocab: int = 2):
        super().__init__()
        self.table = torch.nn.Parameter(torch.zeros(vocab, vocab))


def table_logprobs(model, prompts, completions, pad_id, samplings):
    out = []
    for prompt, completion in zip(prompts, completions):
        before = torch.tensor((prompt + completion)[-len(completion) - 1:-1])  # (L,)
        logp = torch.log_softmax(model.table[before], dim=-1)  # (L, V)
        out.append(logp.gather(1, torch.tensor(completion)[:, None])[:, 0])  # (L,)
    return out


def test_cosine_of_known_vectors():
    assert alignment.cosine(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 3.0])) == 0.0
    assert alignment.cosine(torch.tensor([1.0, 1.0]), torch.tensor([2.0, 2.0])) == pytest.approx(1.0)
    assert alignment.cosine(torch.tensor([1.0, 2.0]), torch.tensor([-2.0, -4.0])) == pytest.approx(-1.0)
    assert alignment.cosine(torch.tensor([3.0, 4.0]), torch.tensor([4.0, 3.0])) == pytest.approx(24 / 25)
    assert alignment.cosine(torch.zeros(2), torch.ones(2)) is None and alignment.cosine(None, torch.ones(2)) is None


def test_alignment_on_a_table_checked_by_hand():
    """V = 2, zero weights: a sample (prompt [0], answer y, advantage A) of N agent tokens adds
    -A/N (e_y - [1/2, 1/2]) to row 0 of the table's gradient. The set's gradient pays answer 1
    after token 0, so an environment that pays answer 1 there has cosine 1, one that pays answer
    0 has -1, and one that trains row 1 only has 0."""
    model = Table()
    samples = [Sample([0], [1], 1.0, "agent", env="pays_1"), Sample([0], [0], -1.0, "agent", env="pays_1"),
               Sample([0], [0], 1.0, "agent", env="pays_0"),
               Sample([1], [1], 1.0, "agent", env="other_row"), Sample([1], [1], 0.0, "agent", env="no_signal")]
    target = torch.tensor([0.5, -0.5, 0.0, 0.0])  # -(e_1 - 1/2): the gradient of a loss that wants 1 after 0
    watch = alignment.EnvGradients(target)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    update(BareModel(model), samples, optimizer, UpdateSettings(micro_batch=1), logprob_fn=table_logprobs, watch=watch)
    assert watch.cos == pytest.approx({"pays_1": 1.0, "pays_0": -1.0, "other_row": 0.0})
    # N = 4 informative agent tokens: pays_1 adds 2 x (1/4)(1/2)(1, -1) to row 0, norm sqrt(2)/4
    assert watch.norm["pays_1"] == pytest.approx(2 ** 0.5 / 4) and watch.norm["pays_0"] == pytest.approx(2 ** 0.5 / 8)
    assert "no_signal" not in watch.cos  # advantage 0: no gradient, no alignment


def test_an_update_started_over_after_running_out_of_memory_reads_each_environment_once():
    """Under a memory plan an out-of-memory error restarts the accumulation with zeroed gradients:
    the watch forgets the cut attempt, and the readings are those of an update without the error."""
    from types import SimpleNamespace
    samples = [Sample([0], [1], 1.0, "agent", env="a"), Sample([0], [0], -1.0, "agent", env="a"),
               Sample([1], [1], 1.0, "agent", env="b"), Sample([1], [0], -1.0, "agent", env="b")]
    target = torch.tensor([0.5, -0.5, 0.3, -0.3])
    calls = []

    def flaky(model, prompts, completions, pad_id, samplings):
        calls.append(len(prompts))
        if len(calls) == 2:
            raise RuntimeError("CPU: can't allocate memory (simulated)")
        return table_logprobs(model, prompts, completions, pad_id, samplings)

    readings = []
    for logprob_fn in (table_logprobs, flaky):
        plan = SimpleNamespace(update_tokens=100, update_limit=100, survived=lambda *a: None)
        watch, model = alignment.EnvGradients(target), Table()
        update(BareModel(model, plan=plan), samples, torch.optim.SGD(model.parameters(), lr=0.0),
               UpdateSettings(micro_batch=2), logprob_fn=logprob_fn, watch=watch)
        readings.append(watch.cos)
    assert len(calls) > 2 and readings[1] == pytest.approx(readings[0]) and set(readings[0]) == {"a", "b"}


def test_micro_batches_hold_one_environment_each_when_grouped():
    samples = [Sample([1], [2], 1.0, "agent", env=e) for e in "abab"] + [Sample([1], [2], 1.0, "designer")] * 3
    grouped = micro_batches(samples, 3, by_env=True)
    agent = [b for role, b in grouped if role == "agent"]
    assert [[s.env for s in b] for b in agent] == [["a", "a"], ["b", "b"]]
    assert [len(b) for role, b in grouped if role == "designer"] == [3]
    assert [[s.env for s in b] for role, b in micro_batches(samples, 3) if role == "agent"] == [["a", "b", "a"], ["b"]]


def fake_episodes(groups: dict[str, list[float]], seed: int = 0):
    """Episodes of one turn each, with random prompt and completion tokens (vocab 64)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for group, returns in groups.items():
        for r in returns:
            turn = SimpleNamespace(prompt_ids=torch.randint(3, 64, (5,), generator=g).tolist(),
                                   completion_ids=torch.randint(3, 64, (3,), generator=g).tolist(), sampling=PLAIN)
            out.append(SimpleNamespace(job=Job("", 0, design_id=group), ret=r, turns=[turn]))
    return out


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)).eval()


def test_grouping_by_environment_equals_separate_backward_passes():
    """Each environment's cosine inside one update equals the cosine of its own gradient, taken
    on its samples alone; its norm differs only by the token denominators (its own vs the batch's)."""
    model = tiny_llama()
    policy, settings = BareModel(model), UpdateSettings(micro_batch=2)
    optimizer = make_optimizer(model, lr=0.0)
    episodes = fake_episodes({"e1": [1, 0, 0], "e2": [0, 1, 1, 1], "e3": [1, 1], "e4": [0, 1]})
    samples = alignment.turn_samples(episodes)
    target = alignment.set_gradient(policy, optimizer, fake_episodes({"s1": [1, 0], "s2": [0, 1, 1]}, seed=1),
                                    settings).vector
    watch = alignment.EnvGradients(target)
    update(policy, samples, optimizer, settings, watch=watch)
    total = sum(len(s.completion_ids) for s in samples if s.advantage != 0)
    assert set(watch.cos) == {"e1", "e2", "e4"}  # e3: all won, advantage 0
    for env in watch.cos:
        alone, tokens = alignment.gradient(policy, optimizer, [s for s in samples if s.env == env], settings)
        assert watch.cos[env] == pytest.approx(alignment.cosine(alone, target), abs=1e-5)
        assert watch.norm[env] == pytest.approx(float(alone.norm()) * tokens / total, rel=1e-4)
    assert len({round(c, 3) for c in watch.cos.values()}) == 3  # three different directions


def test_the_sets_gradient_is_its_halves_token_weighted_and_the_floor_their_cosine():
    model = tiny_llama()
    policy, settings = BareModel(model), UpdateSettings(micro_batch=4)
    optimizer = make_optimizer(model, lr=0.0)
    episodes = fake_episodes({"i0": [1, 0, 0], "i1": [0, 1], "i2": [1, 1, 0, 0], "i3": [0, 0, 1]})
    got = alignment.set_gradient(policy, optimizer, episodes, settings)
    whole, _ = alignment.gradient(policy, optimizer, alignment.turn_samples(episodes), settings)
    assert torch.allclose(got.vector, whole, atol=1e-6)
    halves = [alignment.gradient(policy, optimizer, alignment.turn_samples(
        [e for e in episodes if e.job.design_id in items]), settings)[0] for items in (("i0", "i2"), ("i1", "i3"))]
    assert got.floor == pytest.approx(alignment.cosine(*halves)) and got.items == 4
    assert got.rate == pytest.approx(5 / 12)
    assert all(p.grad is None for p in model.parameters())  # no gradient left behind for the update


@pytest.mark.parametrize("tier", sorted(TIERS))
def test_the_alignment_set_is_nothing_the_run_trains_on_shows_or_evaluates(tier):
    envs = alignment.alignment_envs(tier, "mix")
    assert envs
    trained = {e.source for e in TIERS[tier][0] + MEMORY_ONLY[tier]}
    evaluated = {e.source for e in ALL_HELDOUT}  # the held-out suites (and the no-example starters)
    for env in envs:
        assert env.source not in trained and env.source not in evaluated, env.name
    assert all(e.setting == "games" for e in alignment.alignment_envs(tier, "games"))
    jobs = alignment.alignment_jobs([(envs[0], 3), (envs[1], 4)], plays=2)
    assert [j.group for j in jobs] == [alignment.item_id(envs[0], 3)] * 2 + [alignment.item_id(envs[1], 4)] * 2
    assert alignment.in_band({"a": 0.0, "b": 0.1, "c": 0.5, "d": 0.95}) == ["b", "c"]


def test_the_pool_weighs_by_alignment_and_retires_what_stays_misaligned():
    from spade_mini.pool import MIN_WEIGHT, Pool, weight
    assert weight(0.5) == 0.25 and weight(0.5, [1.0, 1.0]) == 0.5 and weight(0.5, [3.0]) == 0.5  # clipped at +1
    assert weight(0.5, [-0.5, 0.5]) == 0.25 and weight(0.5, [9.0, 0.0, 0.0]) == 0.25  # the last two readings
    assert weight(0.5, [-1.0, -2.0]) == MIN_WEIGHT
    pool = Pool(window=4)
    for name in ("honest", "leaky", "once"):
        assert pool.admit(name, name, "games", "src", [1.0, 0.0], iteration=0)
    pool.note_alignment({"honest": 0.8, "leaky": -1.5, "once": -3.0, "gone": 1.0})
    assert pool.review(1) == []  # one reading below -1 is not yet "stays below"
    pool.note_alignment({"honest": 0.1, "leaky": -1.2, "once": -0.9})
    assert [(e.id, why) for e, why in pool.review(2)] == [("leaky", "misaligned")]
    assert pool.ids() == {"honest", "once"} and pool.life_table()[0]["why"] == "misaligned"
    restored = Pool.from_dict(pool.to_dict())
    assert restored.get("honest").alignment == [0.8, 0.1]


def test_the_memory_ranks_references_by_alignment_and_never_shows_a_misaligned_one():
    """Ten designs in band: two of high regret and no reading, six aligned of low regret, two
    misaligned of the highest regret. A prompt draws its references from the six best ranked:
    by alignment first, the aligned six always; by regret alone, the misaligned would lead."""
    import random
    from spade_mini.designer import EnvRecord, Memory
    from spade_mini.designer.memory import REFERENCE_POOL
    assert REFERENCE_POOL == 6
    memory = Memory()
    kinds = [("unread", 0.8, None)] * 2 + [("aligned", 0.1, 0.5)] * 6 + [("misaligned", 0.95, -2.0)] * 2
    for i, (kind, regret, aligned) in enumerate(kinds):
        memory.add(EnvRecord(f"{kind}{i}", 1, "games", "optimization", f"T{i}", f"class T{i}Env: pass", True, [],
                             0.5, 0.9, regret, alignment=aligned))
    seen = {r.id.rstrip("0123456789") for seed in range(40)
            for r in memory.select("optimization", random.Random(seed), references=3).references}
    assert seen == {"aligned"}
    memory.note_alignment({"misaligned8": 0.9, "misaligned9": 0.2, "aligned2": -1.5})
    seen = {r.id for seed in range(40) for r in memory.select("optimization", random.Random(seed), references=3).references}
    assert "misaligned8" in seen and "aligned2" not in seen


def test_an_iteration_measures_alignment_and_the_pool_reads_it(tiny_policy, monkeypatch):
    """Through the loop: parity games the scripted agent wins about half the time, and an
    alignment set of parity games too; the update's readings reach the row, the pool and the memory
    (--alignment-pool; without it the pool holds none: the next test)."""
    import random
    from scripted import parity_roles, parity_source
    from spade_mini.config import Config
    from spade_mini.designer import Memory, skills_for
    from spade_mini.envs import HandEnv
    from spade_mini.loop import State, one_iteration
    even = {n: next(s for s in range(20) if random.Random(s).randint(n, n + 999) % 2 == 0) for n in (1000, 5000, 9000, 20000)}
    items = [(HandEnv(f"par{n}", "games", "logical_deduction", "", parity_source(n)), s) for n, s in even.items()]
    # every item's answer is \boxed{0}: the halves of the set pull the same way (a floor above 0)
    monkeypatch.setattr(alignment, "chosen_items", lambda *a: (items, "four parity items"))
    monkeypatch.setattr(alignment, "PLAYS", 8)
    cfg = Config(model="tiny", designs_per_iteration=2, plays_per_design=8, max_turns=1, turn_max_new_tokens=8,
                 hint_source="env", lr=1e-3, novelty=False, alignment_every=1, alignment_pool=True,
                 alignment_memory=True, pool_min=1, drift_probe=0)
    torch.manual_seed(0)
    state = State(parity_roles(tiny_policy), make_optimizer(tiny_policy.model, cfg.lr), skills_for("games"), None,
                  Memory(), random.Random(0))
    record = one_iteration(state, cfg)
    row = record.row
    assert record.alignment_note == "four parity items" and row["alignment_set_rate"] > 0
    assert row["alignment_floor"] == record.alignment_set.floor is not None
    assert row["alignment_envs"] == len(record.alignment) >= 1 and row["time_align_s"] > 0
    for env, reading in record.alignment.items():
        assert reading == pytest.approx(record.watch.cos[env] / record.alignment_set.floor)
    in_pool = {e.id: e.alignment for e in state.pool.envs}
    assert in_pool and all(a == ([record.alignment[i]] if i in record.alignment else []) for i, a in in_pool.items())
    assert any(in_pool.values())
    remembered = {r.id: r.alignment for r in state.memory.records if r.id in record.alignment}
    assert remembered and remembered == {i: record.alignment[i] for i in remembered}  # in the admission iteration


def test_reading_alignment_without_measuring_it_is_one_sentence():
    from spade_mini.config import Config, ConfigError
    for flag, value in (("alignment_pool", True), ("alignment_memory", True), ("designer_alignment", 0.3)):
        with pytest.raises(ConfigError, match="--alignment-every 4"):
            Config(**{flag: value})
    with pytest.raises(ConfigError, match="weight in"):
        Config(alignment_every=1, designer_alignment=2.0)
    assert Config(alignment_every=4, alignment_pool=True).alignment_pool


def test_the_measured_items_are_chosen_in_band_spread_over_environments(tmp_path, monkeypatch):
    import importlib.util
    import json
    from pathlib import Path
    import sys
    sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))  # as a script finds its neighbours
    spec = importlib.util.spec_from_file_location("alignment_set", Path(__file__).parents[1] / "bench" / "alignment_set.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rates = {("a", 0): 0.5, ("a", 1): 0.2, ("a", 2): 0.0, ("b", 0): 1.0, ("b", 1): 0.3, ("c", 5): 0.9}
    assert bench.spread_items(rates, 8) == [("a", 0), ("b", 1), ("c", 5), ("a", 1)]
    assert bench.spread_items(rates, 2) == [("a", 0), ("b", 1)]
    envs = alignment.alignment_envs("starter", "games")
    file = tmp_path / "set.json"
    file.write_text(json.dumps({f"m/starter/games": {"items": [[envs[1].name, 3], ["gone", 1], [envs[0].name, 2]]}}))
    monkeypatch.setattr(alignment, "MEASURED", file)
    items, note = alignment.chosen_items("starter", "games", "m")
    assert items == [(envs[1], 3), (envs[0], 2)] and "start rate" in note
    items, note = alignment.chosen_items("starter", "games", "other")
    assert len(items) == min(alignment.ITEMS, len(envs) * alignment.ITEMS) and "not measured" in note
    assert len({(e.name, s) for e, s in items}) == len(items)


def test_a_new_designs_reward_gains_its_reading_in_its_own_iteration(tiny_policy, monkeypatch):
    """The same iteration twice, from the same state and seeds, with --designer-alignment 0 and
    0.5: each new design's reward differs by 0.5 x (1 + its reading clipped) / 2, and its reading
    (its own samples' backward pass) is the one the update's grouping finds."""
    import copy
    import random
    from scripted import parity_roles, parity_source
    from spade_mini.config import Config
    from spade_mini.designer import skills_for
    from spade_mini.envs import HandEnv
    from spade_mini.loop import State, one_iteration
    even = {n: next(s for s in range(20) if random.Random(s).randint(n, n + 999) % 2 == 0) for n in (1000, 5000, 9000)}
    items = [(HandEnv(f"par{n}", "games", "logical_deduction", "", parity_source(n)), s) for n, s in even.items()]
    monkeypatch.setattr(alignment, "chosen_items", lambda *a: (items, "parity items"))
    monkeypatch.setattr(alignment, "PLAYS", 8)
    start = {k: v.detach().clone() for k, v in tiny_policy.model.state_dict().items()}
    records = {}
    for w in (0.0, 0.5):
        tiny_policy.model.load_state_dict(start)
        cfg = Config(model="tiny", designs_per_iteration=3, plays_per_design=8, max_turns=1, turn_max_new_tokens=8,
                     hint_source="env", lr=1e-3, novelty=False, alignment_every=1, designer_alignment=w,
                     drift_probe=0)
        torch.manual_seed(1)
        state = State(parity_roles(tiny_policy), make_optimizer(tiny_policy.model, cfg.lr), skills_for("games"),
                      None, None, random.Random(1))
        records[w] = one_iteration(state, cfg)
        assert state.pool.envs and not any(e.alignment for e in state.pool.envs)  # no --alignment-pool
    plain, paid = records[0.0], records[0.5]
    tiny_policy.model.load_state_dict(start)
    assert plain.credited == {} and paid.credited and paid.row["alignment_credited"] == len(paid.credited)
    assert paid.alignment_set.floor >= alignment.FLOOR_MIN
    for d0, d1 in zip(plain.designs, paid.designs):
        assert d0.id == d1.id
        reading = paid.credited.get(d1.id, 0.0)  # no reading: the neutral W / 2
        bonus = 0.5 * (1 + max(-1.0, min(1.0, reading))) / 2 if d1.id in paid.scores else 0.0
        assert d1.reward == pytest.approx(d0.reward + bonus)
        if d1.id in paid.credited:
            assert reading == pytest.approx(paid.alignment[d1.id], abs=1e-4)
    assert len({round(r, 3) for r in paid.credited.values()}) == len(paid.credited)
