"""Continuing chats: the same greedy transcripts as plain `generate`, the sampled distribution is
the scored one, finished rows leave the batch, and a cache is only reused under the weights and
adapter it was made under."""
import pytest
import torch
from scripted import ScriptedPlayer

from spade_mini.agent import Job, PlaySettings, play_episodes
from spade_mini.config import Config
from spade_mini.envs import EXAMPLES
from spade_mini.policy import PLAIN, Sampling, decoding, load_policy, sampled_logprobs, token_logprobs
from spade_mini.policy.decoding import ChatCache, Reusable, decode


OPENERS = ["Guess my number from 1 to 10.", "Name a colour.", "What is 3 + 4? Reply with a box.",
           "Tell me about the sea, in detail, please.", "Hi."]


def grow(chats, outs, turn):
    """What the agent does between turns: the reply, then the environment's next observation."""
    for k, (chat, out) in enumerate(zip(chats, outs)):
        chat.append({"role": "assistant", "content": out.text})
        chat.append({"role": "user", "content": f"Turn {turn}: not yet, try again ({k})."})


def test_greedy_continuations_equal_plain_generate_over_turns(fp32_policy):
    chats = [[{"role": "user", "content": o}] for o in OPENERS]
    keys = list(range(len(chats)))
    reused = fp32_policy.tokens_reused
    for turn in range(4):
        plain = fp32_policy.generate(chats, 10, temperature=0)
        went_on = fp32_policy.continue_chats(chats, 10, temperature=0, keys=keys)
        for a, b in zip(plain, went_on):
            assert (a.prompt_ids, a.completion_ids, a.finished, a.text) == (b.prompt_ids, b.completion_ids, b.finished, b.text)
            assert b.sampling == PLAIN
        grow(chats, plain, turn)
    assert len({tuple(o.completion_ids) for o in plain}) == len(chats)  # really different replies
    assert fp32_policy.tokens_reused - reused > 3 * len(chats) * 30  # later turns reused their chats


class Forgets(ScriptedPlayer):
    """The model plays, every turn counted as finished, and keeps nothing between turns (no keys:
    each turn decodes its whole chat again)."""

    def continue_chats(self, chats, max_new_tokens, temperature=None, keys=None):
        return super().continue_chats(chats, max_new_tokens, temperature, keys=None)


def test_play_gives_the_same_transcripts_on_either_path(fp32_policy):
    source = next(e for e in EXAMPLES if e.name == "knapsack").source  # a wrong answer does not end it
    jobs = [Job(source, seed) for seed in range(4)]
    kw = PlaySettings(max_turns=3, max_new_tokens=8, temperature=0)
    reused = fp32_policy.tokens_reused
    plain = play_episodes(Forgets(fp32_policy, None, finished=True), jobs, kw)
    assert fp32_policy.tokens_reused == reused  # nothing kept, nothing reused
    went_on = play_episodes(ScriptedPlayer(fp32_policy, None, finished=True), jobs, kw)
    assert fp32_policy.tokens_reused > reused
    assert all(len(e.turns) == 3 for e in plain)
    for a, b in zip(plain, went_on):
        assert a.transcript() == b.transcript()
        assert [t.completion_ids for t in a.turns] == [t.completion_ids for t in b.turns]
        assert [t.prompt_ids for t in a.turns] == [t.prompt_ids for t in b.turns]


def test_continued_samples_are_scored_with_the_distribution_that_drew_them(tiny_policy, monkeypatch):
    """On-policy on the new path too: the sampler's own log-prob of each drawn token equals what
    the update computes for it, on a first turn and on a turn that reuses its cache."""
    seen = []

    def recording(*args, **kwargs):
        seen.append(decode(*args, **kwargs))
        return seen[-1]
    monkeypatch.setattr(decoding, "decode", recording)
    sampling = Sampling(temperature=0.6, top_k=20, top_p=0.95)
    policy = tiny_policy
    monkeypatch.setattr(policy, "temperature", 0.6)
    monkeypatch.setattr(policy, "top_k", 20)
    monkeypatch.setattr(policy, "top_p", 0.95)
    torch.manual_seed(0)
    chats = [[{"role": "user", "content": o}] for o in OPENERS[:3]]
    for turn in range(2):
        outs = policy.continue_chats(chats, 12, keys=["a", "b", "c"])
        assert all(o.sampling == sampling for o in outs)
        scored = token_logprobs(policy.model, [o.prompt_ids for o in outs], [o.completion_ids for o in outs],
                                policy.pad_id, samplings=[o.sampling for o in outs])
        plain = token_logprobs(policy.model, [o.prompt_ids for o in outs], [o.completion_ids for o in outs],
                               policy.pad_id)
        for d, s, p in zip(seen[-1], scored, plain):
            torch.testing.assert_close(d.logprobs, s, atol=1e-4, rtol=1e-4)
            assert (p - s).abs().max() > 1.0  # temperature 1 over the whole vocabulary is another policy
        assert (turn == 0) == all(d.reused == 0 for d in seen[-1])
        grow(chats, outs, turn)


def test_a_finished_row_leaves_the_batch(tiny_policy):
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(100, 5000, (n,), generator=g).tolist() for n in (7, 12, 9)]
    free = decode(tiny_policy.model, prompts, 6, None, set(), tiny_policy.pad_id)
    # a token that only row r draws, first at step k: as its EOS, row r stops after k + 1 tokens
    r, k = next((r, k) for r in range(3) for k in range(5)
                if all(free[r].ids[k] not in free[j].ids for j in range(3) if j != r)
                and free[r].ids[k] not in free[r].ids[:k])
    sizes = []
    hook = tiny_policy.model.get_decoder().register_forward_hook(
        lambda m, args, out: sizes.append(out[0].shape[0]))
    try:
        stopped = decode(tiny_policy.model, prompts, 6, None, {free[r].ids[k]}, tiny_policy.pad_id)
    finally:
        hook.remove()
    assert (stopped[r].ids, stopped[r].finished) == (free[r].ids[:k + 1], True)
    assert [stopped[i].ids for i in range(3) if i != r] == [free[i].ids for i in range(3) if i != r]
    assert sizes == [3] * (k + 1) + [2] * (5 - k)  # prefill and 5 steps, one row fewer once r stopped
    assert not any(stopped[i].finished for i in range(3) if i != r)


def test_a_row_that_meets_its_stop_rule_leaves_the_batch_finished(tiny_policy):
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(100, 5000, (n,), generator=g).tolist() for n in (7, 12, 9)]
    free = decode(tiny_policy.model, prompts, 6, None, set(), tiny_policy.pad_id)
    first = free[1].ids[0]  # row 1 stops after 3 tokens; a row that never meets the rule runs on
    stopped = decode(tiny_policy.model, prompts, 6, None, set(), tiny_policy.pad_id,
                     stop=lambda ids: len(ids) == 3 and ids[0] == first)
    assert (stopped[1].ids, stopped[1].finished) == (free[1].ids[:3], True)
    others = [(d.ids, False) for i, d in enumerate(free) if i != 1 and d.ids[0] != first]
    assert others and [(d.ids, d.finished) for i, d in enumerate(stopped) if i != 1 and d.ids[0] != first] == others


def test_the_designer_writes_every_attempt_in_one_batch_and_stops_each_at_its_closed_block(tiny_policy, monkeypatch):
    """design_environments on a real Policy: one decoding-loop call for the whole batch, each row
    stopping once the rule says its environment's block has closed (here: 5 tokens in)."""
    import random as stdlib_random

    from spade_mini.designer import DesignSettings
    from spade_mini.designer import design as design_module
    from spade_mini.designer import design_environments, skills_for
    calls = []
    real = type(tiny_policy).continue_chats

    def counted(self, chats, *a, **k):
        calls.append(len(chats))
        return real(self, chats, *a, **k)
    monkeypatch.setattr(type(tiny_policy), "continue_chats", counted)
    monkeypatch.setattr(design_module, "env_block_closed",
                        lambda text: len(tiny_policy.tokenizer(text, add_special_tokens=False)["input_ids"]) >= 5)
    monkeypatch.setattr(design_module, "FENCE_END", None)  # ask the rule after every token (the tiny model writes no fences)
    designs = design_environments(tiny_policy, skills_for("games")[:3], None, None, stdlib_random.Random(0), DesignSettings(max_new_tokens=40, temperature=1.0), iteration=0)
    assert calls == [3]
    assert all(d.completion.finished and len(d.completion.completion_ids) < 40 for d in designs)
    assert not any("cut off" in r for d in designs for r in d.reasons)


def test_a_closed_environment_block_is_recognised_as_it_is_written():
    from spade_mini.designer.design import env_block_closed
    assert env_block_closed("Here:\n```python\nclass AEnv:\n    pass\n```")
    assert env_block_closed("```\nclass CEnv:\n    pass\n```")
    assert not env_block_closed("```python\nclass AEnv:\n    pass\n")  # still open
    assert not env_block_closed("```python\nhelper = 1\n```")  # a block, but no environment yet
    assert env_block_closed("```python\nhelper = 1\n```\nand\n```python\nclass BEnv:\n    pass\n```")


def test_plain_generate_decodes_the_padding_that_continue_chats_skips(fp32_policy):
    chats = [[{"role": "user", "content": "What is 2+2?"}],
             [{"role": "user", "content": "Write a long story about a dragon who learns to bake bread."}]]
    before = fp32_policy.tokens_decoded
    plain = fp32_policy.generate(chats, 24, temperature=0)
    decoded_plain, before = fp32_policy.tokens_decoded - before, fp32_policy.tokens_decoded
    went_on = fp32_policy.continue_chats(chats, 24, temperature=0)
    decoded_ours = fp32_policy.tokens_decoded - before
    assert [o.completion_ids for o in plain] == [o.completion_ids for o in went_on]
    assert plain[0].finished and not plain[1].finished  # a short answer, and a story cut at 24
    assert decoded_plain == 2 * 24  # the short answer's row kept decoding padding
    assert decoded_ours == len(plain[0].completion_ids) + 24 < decoded_plain


def test_an_update_makes_the_cache_stale():
    policy = load_policy(Config(model="tiny", quantize="none", temperature=0, seed=1), verbose=False)
    chats = [[{"role": "user", "content": o}] for o in OPENERS[:2]]
    outs = policy.continue_chats(chats, 6, keys=[0, 1])
    grow(chats, outs, 0)
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=0.05)
    lp = token_logprobs(policy.model, [o.prompt_ids for o in outs], [o.completion_ids for o in outs], policy.pad_id)
    (-sum(x.sum() for x in lp)).backward()
    opt.step()
    reused = policy.tokens_reused
    went_on = policy.continue_chats(chats, 6, keys=[0, 1])
    assert policy.tokens_reused == reused  # other weights: nothing reused
    assert [o.completion_ids for o in went_on] == [o.completion_ids for o in policy.generate(chats, 6)]


def test_a_cache_made_under_one_adapter_is_never_used_under_another():
    policy = load_policy(Config(model="tiny", quantize="none", temperature=0, separate_adapters=True),
                         verbose=False)
    with torch.no_grad():  # make the designer's adapter really differ from the agent's
        for name, p in policy.model.named_parameters():
            if "lora_B" in name and ".designer" in name:
                p.normal_(0, 0.5)
    chats = [[{"role": "user", "content": o}] for o in OPENERS[:2]]
    with policy.acting_as("agent"):
        policy.continue_chats(chats, 6, keys=[0, 1])
    reused = policy.tokens_reused
    with policy.acting_as("designer"):
        went_on = policy.continue_chats(chats, 6, keys=[0, 1])
        plain = policy.generate(chats, 6)
    assert policy.tokens_reused == reused
    assert [o.completion_ids for o in went_on] == [o.completion_ids for o in plain]
    with policy.acting_as("agent"):  # and the agent's own cache is not resurrected either
        policy.continue_chats(chats, 6, keys=[0, 1])
    assert policy.tokens_reused == reused


def test_the_update_frees_the_cache(tiny_policy):
    from spade_mini.reinforce import Sample, make_optimizer, update
    chats = [[{"role": "user", "content": o}] for o in OPENERS[:2]]
    outs = tiny_policy.continue_chats(chats, 4, keys=["x", "y"])
    assert tiny_policy.chat_cache.entries
    opt = make_optimizer(tiny_policy.model, 0.0)  # lr 0: the shared fixture's weights stay as they are
    update(tiny_policy, [Sample(outs[0].prompt_ids, outs[0].completion_ids, 1.0, "agent")], opt)
    assert not tiny_policy.chat_cache.entries


def test_chat_cache_keeps_within_its_budget_and_for_one_call():
    def entry(n):
        return Reusable(list(range(n)), [(torch.zeros(2, n, 4), torch.zeros(2, n, 4))])  # 64 n bytes
    cache = ChatCache(max_bytes=64 * 10)
    cache.start(["a", "b", "c"], stamp=1)
    made = {k: entry(n) if cache.room(64 * n) else None for k, n in (("a", 4), ("b", 8), ("c", 5))}
    cache.keep(list(made), list(made.values()))
    assert set(cache.entries) == {"a", "c"}  # "b" would pass the budget, "c" still fits
    cache.start(["a"], stamp=2)  # another stamp: nothing
    assert cache.take(["a"]) == [None]
    cache.start(["a", "c"], stamp=1)
    assert cache.room(64 * 4) and cache.room(64 * 5)
    cache.keep(["a", "c"], [entry(4), entry(5)])
    cache.start(["c", "z"], stamp=1)  # a call: entries of other keys are gone at once
    assert set(cache.entries) == {"c"} and cache.used == 64 * 5
    assert not cache.room(64 * 6)  # what the call's pending entries hold counts against the budget
    got = cache.take(["c", "z"])
    assert got[0].tokens == list(range(5)) and got[1] is None and cache.used == 0
    assert cache.take(["c"]) == [None]  # taking forgets


def test_sliding_window_models_decode_without_reuse():
    from transformers import MistralConfig, MistralForCausalLM
    torch.manual_seed(0)
    sliding = MistralForCausalLM(MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                               sliding_window=4, layer_types=["sliding_attention"] * 2)).eval()
    assert not decoding.reusable_cache(sliding)
    out = decode(sliding, [[1, 2, 3, 4, 5, 6]], 4, None, set(), 0)[0]
    want = sliding.generate(torch.tensor([[1, 2, 3, 4, 5, 6]]), max_new_tokens=4, do_sample=False)[0, 6:].tolist()
    assert out.ids == want and out.reusable is None


@pytest.mark.parametrize("sampling", [PLAIN, Sampling(0.6, 20, 0.95)], ids=["plain", "truncated"])
def test_draw_takes_its_log_prob_from_the_sampled_distribution(sampling):
    torch.manual_seed(0)
    logits = torch.randn(4, 50) * 3  # (b, V)
    drawn, logp = decoding.draw(logits, None if sampling is PLAIN else sampling)
    if sampling is PLAIN:
        assert drawn.tolist() == logits.argmax(-1).tolist()
    want = sampled_logprobs(logits, drawn, sampling)
    torch.testing.assert_close(logp, want)


@pytest.mark.parametrize("sampling", [Sampling(0.6, 20, 0.95), Sampling(1.0, 7, 1.0), Sampling(0.8, 0, 0.9),
                                      Sampling(1.3, 0, 1.0)], ids=["truncated", "top_k", "top_p", "temperature"])
def test_draw_samples_the_distribution_that_is_scored(sampling):
    """The sampler's frequencies over many draws match the scored distribution token by token,
    and nothing outside the scored support is ever drawn."""
    torch.manual_seed(0)
    V, draws = 40, 40_000
    logits = torch.randn(V) * 2  # (V,)
    scored = decoding.sampler_logits(logits[None], sampling).log_softmax(-1)[0].exp()  # (V,)
    support = scored > 0  # (V,)
    everything = torch.arange(V)[support]  # the scored log-prob of each token that can be drawn
    torch.testing.assert_close(sampled_logprobs(logits.expand(len(everything), V), everything, sampling).exp(),
                               scored[support])
    drawn, _ = decoding.draw(logits.expand(draws, V), sampling)  # (draws,)
    freq = torch.bincount(drawn, minlength=V).float() / draws  # (V,)
    assert freq[~support].sum() == 0
    truncating = sampling.top_k or sampling.top_p < 1.0
    assert (1 < support.sum() < V) if truncating else support.all()  # a real cut, or none
    sigma = (scored * (1 - scored) / draws).sqrt()  # (V,) binomial standard deviation
    assert ((freq - scored).abs() <= 5 * sigma + 1e-9).all(), (freq - scored).abs().max()


def test_shared_prefixes_finds_runs_of_prompts_that_begin_alike():
    a, b = [1] * 70 + [2, 3], [1] * 70 + [4]
    c, d = [5] * 80 + [6], [5] * 66 + [7]
    alone, short = [9] * 100, [1] * 10 + [8]
    assert decoding.shared_prefixes([a, c, alone, b, d, short]) == [70, 66, 0, 70, 66, 0]
    assert decoding.shared_prefixes([a, b], least=71) == [0, 0]  # too short to share
    assert decoding.shared_prefixes([a, a]) == [72, 72]  # equal prompts share all (decode prefills the last)
    assert decoding.shared_prefixes([a]) == [0] and decoding.shared_prefixes([]) == []


def test_rows_that_begin_alike_share_their_prefix_and_decode_as_plain_generate(fp32_policy):
    """The designer's batch: prompts that open with one long text, then differ. The shared keys
    and values are computed once, and greedy decoding gives what plain `generate` gives."""
    head = "Rules of the game: " + " ".join(f"rule {i} says the agent must think." for i in range(20))
    chats = [[{"role": "user", "content": f"{head}\n\n{tail}"}] for tail in OPENERS]
    prompts = [fp32_policy.prompt_ids(c) for c in chats]
    assert min(decoding.shared_prefixes(prompts)) > 100
    before_reused, before_prefilled = fp32_policy.tokens_reused, fp32_policy.tokens_prefilled
    shared = fp32_policy.continue_chats(chats, 12, temperature=0)
    reused = fp32_policy.tokens_reused - before_reused
    assert reused >= len(chats) * 100  # every row took the head's keys and values
    assert fp32_policy.tokens_prefilled - before_prefilled < sum(map(len, prompts)) / 2  # the head once, not 5 times
    plain = fp32_policy.generate(chats, 12, temperature=0)
    assert [o.completion_ids for o in shared] == [o.completion_ids for o in plain]
    assert len({tuple(o.completion_ids) for o in plain}) > 1  # the tails matter
