"""The warm start: built only from the bundled examples, it lowers both roles' NLL, is cached
under a key of everything that changes it, and an interrupted warm start resumes."""
import random

import pytest
import torch

from spade_mini import warmstart as W
from spade_mini.config import Config
from spade_mini.envs import EXAMPLES, HELDOUT
from spade_mini.policy import load_policy


@pytest.fixture(autouse=True)
def cache_in(tmp_path, monkeypatch):
    """Warm starts cache under tmp_path (the embedded tokenizer stays where it is)."""
    monkeypatch.setattr(W, "cache_folder", lambda cfg: tmp_path / "warm_start" / W.cache_key(cfg))


def _cfg(**kw):
    base = dict(model="tiny", quantize="none", lr=1e-3, warm_start_steps=4, warm_start_lr=3e-3,
                warm_start_designs=2, warm_start_turns=6, agent_template="answer",
                memory_references=1, no_corpus=True, seed=0)
    return Config(**{**base, **kw})


@pytest.fixture(scope="module")
def data():
    policy = load_policy(Config(model="tiny", quantize="none"), verbose=False)
    return policy, W.build_data(policy, Config(model="tiny", agent_template="answer"), None,
                                random.Random(0))


def test_data_comes_from_the_examples_only(data):
    _, built = data
    assert built.sources == {e.source for e in EXAMPLES if e.setting == "games"}
    assert not built.sources & {e.source for e in HELDOUT}
    assert built.designer and built.agent


def test_designer_targets_are_fenced_sources_ending_with_eos(data):
    policy, built = data
    texts = [policy.tokenizer.decode(s.completion_ids) for s in built.designer]
    eos = policy.tokenizer.decode([built.designer[0].completion_ids[-1]])
    for text, example in zip(texts, [e for e in EXAMPLES if e.setting == "games"]):
        assert text.startswith("```python\n") and text.endswith("```" + eos)
        assert example.source.strip() in text
    assert built.designer[0].completion_ids[-1] in policy.eos_ids


def test_agent_turns_are_short_answers_that_end(data):
    policy, built = data
    assert all(s.role == "agent" and s.completion_ids[-1] in policy.eos_ids for s in built.agent)
    assert max(len(s.completion_ids) for s in built.agent) < 80
    names = {e.name for e in EXAMPLES if e.setting == "games"}
    assert len(built.agent) >= len(names)  # every example contributed turns


def test_warm_start_lowers_both_nlls_and_is_cached(tmp_path, data):
    _, built = data
    cfg = _cfg()
    torch.manual_seed(0)
    policy = load_policy(cfg, verbose=False)
    probe = built.designer[:2] + built.agent[:6]
    before = W.role_nll(policy, probe)
    rows = W.warm_start(policy, cfg, None, log=lambda *_: None)
    after = W.role_nll(policy, probe)
    assert len(rows) == 4 and all(r["tokens"] > 0 for r in rows)
    assert after["designer"] < before["designer"] and after["agent"] < before["agent"]
    assert (W.cache_folder(cfg) / "rows.jsonl").is_file()

    again = load_policy(cfg, verbose=False)
    messages = []
    assert W.warm_start(again, cfg, None, log=messages.append) == rows
    assert "loaded" in messages[0]
    assert W.role_nll(again, probe) == pytest.approx(after)
    assert W.cache_key(cfg) != W.cache_key(_cfg(warm_start_steps=5))
    assert W.cache_key(cfg) != W.cache_key(_cfg(agent_template="reasoning"))


def test_an_interrupted_warm_start_resumes_to_the_same_weights(tmp_path, monkeypatch):
    cfg = _cfg(warm_start_steps=3)
    whole = load_policy(cfg, verbose=False)
    W.warm_start(whole, cfg, None, log=lambda *_: None)

    cfg2 = cfg
    monkeypatch.setattr(W, "cache_folder", lambda c: tmp_path / "other" / W.cache_key(c))
    real, calls = W.update, []

    def stop_at_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)
    monkeypatch.setattr(W, "update", stop_at_third)
    broken = load_policy(cfg2, verbose=False)
    with pytest.raises(KeyboardInterrupt):
        W.warm_start(broken, cfg2, None, log=lambda *_: None)
    calls.clear()
    monkeypatch.setattr(W, "update", lambda *args, **kwargs: calls.append(1) or real(*args, **kwargs))
    resumed, said = load_policy(cfg2, verbose=False), []
    rows = W.warm_start(resumed, cfg2, None, log=said.append)
    # a resume, not a restart from step 0 (which would end with the same weights): one step is left
    assert len(rows) == 3 and len(calls) == 1 and "warm start: resuming after step 2" in said
    a, b = dict(whole.model.named_parameters()), dict(resumed.model.named_parameters())
    assert all(torch.equal(a[n], b[n]) for n in a if "lora_" in n)
