"""bfloat16 on a CPU (spade_mini/policy/dtypes.py): `--dtype auto` picks it only where it measured
faster, the adapters and their optimizer state stay float32, and in bf16 the sampler and the
scorer still agree on every token's log-prob (the update is on-policy)."""
import importlib.util
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig

from spade_mini.config import Config
from spade_mini.policy import dtypes, embedded_checkpoint, load_policy, pick_dtype, token_logprobs
from spade_mini.policy.dtypes import Phase, Workload

CACHE = "~/.cache/spade_mini"
OPENERS = ["Name a colour. Reply with \\boxed{colour}.", "Which is bigger, 17 or 71? Reply inside \\boxed{}.",
           "Say a fruit that is yellow.", "Count from one to five in words."]


def embedded_config():
    return AutoConfig.from_pretrained(embedded_checkpoint(CACHE))


def test_auto_picks_what_measured_faster_and_caches_it(monkeypatch, tmp_path):
    cfg = Config(model="embedded", quantize="none", cache_dir=str(tmp_path))
    calls = []
    monkeypatch.setattr(dtypes, "cpu_has_bf16", lambda: True)

    def fake(seconds):
        def measure(config, dtype, workload):
            calls.append(dtype)
            return seconds[dtype]
        return measure
    monkeypatch.setattr(dtypes, "iteration_seconds", fake({torch.float32: 2.0, torch.bfloat16: 1.0}))
    said = []
    assert pick_dtype(cfg, torch.device("cpu"), embedded_config(), say=lambda *a, **k: said.append(a[0])) == torch.bfloat16
    assert calls == [torch.float32, torch.bfloat16] and "bfloat16" in said[-1]
    # measured once per CPU, model and workload: the next run reads the answer
    assert pick_dtype(cfg, torch.device("cpu"), embedded_config(), say=lambda *a, **k: said.append(a[0])) == torch.bfloat16
    assert len(calls) == 2 and "cached" in said[-1]
    # another workload (a play batch of 2 rows) is measured again, and here bf16 lost
    monkeypatch.setattr(dtypes, "iteration_seconds", fake({torch.float32: 1.0, torch.bfloat16: 3.0}))
    small = Config(model="embedded", quantize="none", cache_dir=str(tmp_path), designs_per_iteration=1,
                   plays_per_design=1)
    assert pick_dtype(small, torch.device("cpu"), embedded_config(), say=lambda *a, **k: said.append(a[0])) == torch.float32
    assert len(calls) == 4


def test_auto_is_float32_without_bf16_units_and_bf16_on_a_gpu(monkeypatch, tmp_path):
    cfg = Config(model="embedded", quantize="none", cache_dir=str(tmp_path))
    monkeypatch.setattr(dtypes, "cpu_has_bf16", lambda: False)
    monkeypatch.setattr(dtypes, "iteration_seconds", lambda *a: (_ for _ in ()).throw(AssertionError("measured")))
    assert pick_dtype(cfg, torch.device("cpu"), embedded_config()) == torch.float32
    assert pick_dtype(cfg, torch.device("cuda"), embedded_config()) == torch.bfloat16
    assert pick_dtype(Config(dtype="bfloat16"), torch.device("cpu"), embedded_config()) == torch.bfloat16


def test_the_probe_times_the_real_decoding_and_update_at_both_dtypes():
    """The probe itself, on the tiny test model's architecture (bf16 without bf16 units can be
    30x slower than float32, so a real shape would take minutes here): both dtypes give a
    positive time for the run's workload, and a larger workload takes longer."""
    config = tiny_config()
    small = Workload(phases=(Phase(2, 8, 4, 1),), update_tokens=64, update_rows=1)
    large = Workload(phases=(Phase(2, 8, 4, 1), Phase(8, 32, 64, 2)), update_tokens=4096, update_rows=2)
    for dtype in (torch.float32, torch.bfloat16):
        a, b = dtypes.iteration_seconds(config, dtype, small), dtypes.iteration_seconds(config, dtype, large)
        assert 0 < a < b


def tiny_config():
    from transformers import AutoTokenizer

    from spade_mini.policy import tiny_model
    return tiny_model(AutoTokenizer.from_pretrained(embedded_checkpoint(CACHE))).config


def test_the_probe_counts_each_prompt_pass_once_per_call(monkeypatch):
    """On a clock that `decode` advances by a known cost a layer (a prompt pass of 1 ms a prompt
    token, a decode step of 3 ms a row), the probe's parts are exactly each phase's calls x (prompt
    pass + new tokens x step) x the model's depth. An estimate that counts the prompt pass once per
    probe decode (3 times for a 24-token turn), one call of a phase that makes two, or a depth
    extrapolated from the wrong end fails here."""
    from types import SimpleNamespace

    from spade_mini.policy import decoding
    config, clock = tiny_config(), [0.0]
    depth = config.num_hidden_layers
    monkeypatch.setattr(dtypes, "time", SimpleNamespace(perf_counter=lambda: clock[0]))

    def timed(model, prompts, new, *args, **kwargs):
        clock[0] += model.config.num_hidden_layers * (1e-3 * len(prompts) * len(prompts[0]) + 3e-3 * len(prompts) * new)
    monkeypatch.setattr(decoding, "decode", timed)
    workload = Workload(phases=(Phase(16, 10, 24, 1), Phase(4, 100, 50, 2)), update_tokens=64, update_rows=1)
    parts = dtypes.probe_parts(config, torch.float32, workload)
    generation = {name: round(seconds, 6) for name, seconds in parts.items() if not name.startswith("update")}
    assert depth > 1 and generation == {
        "phase 0: 1 x generate 16 rows of 10 + 24 tokens: prompt passes": round(depth * 0.16, 6),
        "phase 0: 1 x generate 16 rows of 10 + 24 tokens: decode steps": round(depth * 16 * 24 * 3e-3, 6),
        "phase 1: 2 x generate 4 rows of 100 + 50 tokens: prompt passes": round(depth * 0.8, 6),
        "phase 1: 2 x generate 4 rows of 100 + 50 tokens: decode steps": round(depth * 2 * 4 * 50 * 3e-3, 6)}


def test_the_workload_is_a_design_iteration_of_the_preset():
    """The cpu preset writes its 48 attempts in one call of 48 rows; 4 valid designs play 8 seeds
    in both arms and the pool's replays fill the rest of the 64 no-hint episodes; the update scores
    every no-hint turn, the 4 valid designs and a quarter of the 44 invalid ones (11), with their
    prompts (every attempt with --invalid-update-fraction 1); the fixed pool designs nothing.
    `--plan` counts the same design calls."""
    cpu = Config.from_preset("cpu")
    turn, design = (dtypes.TURN_PROMPT_TOKENS, 24), (dtypes.DESIGN_PROMPT_TOKENS, 512)
    work = Workload.of(cpu)
    assert work.phases == (Phase(48, *design, 1), Phase(64, *turn, 1), Phase(32, *turn, 1))
    from spade_mini.run.planning import phases
    assert [p.calls for p in phases(cpu) if p.name == "design"] == [1]  # the memory plan counts the same calls
    assert work.update_tokens == 64 * sum(turn) + (4 + 11) * sum(design)
    every = Workload.of(Config.from_preset("cpu", invalid_update_fraction=1.0))
    assert every.update_tokens == 64 * sum(turn) + 48 * sum(design)
    odd = Workload.of(Config.from_preset("cpu", design_attempts=56))  # 48 + a last call of 8
    assert odd.phases[:2] == (Phase(48, *design, 1), Phase(8, *design, 1))
    fixed = Workload.of(Config.from_preset("cpu", pool_fill="examples"))
    assert fixed.phases == (Phase(64, *turn, 1),) and fixed.update_tokens == 64 * sum(turn)


def test_the_typical_prompt_lengths_follow_the_prompts():
    """DESIGN_PROMPT_TOKENS and TURN_PROMPT_TOKENS were measured with the 1.5B's tokenizer; here the
    embedded model's tokenizer (about 10% more tokens on these prompts) counts today's prompts, so
    a designer or agent prompt that grows or shrinks by a third sends the reader to measure again."""
    import random

    from transformers import AutoTokenizer

    from spade_mini.agent import first_message
    from spade_mini.designer import Corpus, designer_prompt, skills_for
    cpu = Config.from_preset("cpu")
    tokenizer = AutoTokenizer.from_pretrained(embedded_checkpoint(CACHE))

    def tokens(chat):
        return len(tokenizer(tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)).input_ids)
    corpus, rng = Corpus.load(None, cpu.corpus_max_words), random.Random(0)
    designs = [tokens(designer_prompt(skill, corpus.sample(rng), "", turns=cpu.max_turns,
                                      turn_tokens=cpu.turn_max_new_tokens)) for skill in skills_for("games")]
    assert 0.8 < sum(designs) / len(designs) / dtypes.DESIGN_PROMPT_TOKENS < 1.3, designs
    bare = tokens([{"role": "user", "content": first_message("", None, None, cpu.agent_template)}])
    assert bare < dtypes.TURN_PROMPT_TOKENS < bare + 60, bare  # the template and an observation of a few lines


def test_bf16_base_keeps_float32_adapters_and_optimizer_state():
    from spade_mini.reinforce import Sample, make_optimizer, update
    policy = load_policy(Config(model="embedded", quantize="none", dtype="bfloat16"), verbose=False)
    frozen = [p for p in policy.model.parameters() if not p.requires_grad and p.is_floating_point()]
    assert frozen and all(p.dtype == torch.bfloat16 for p in frozen)
    trainable = policy.trainable_parameters()
    assert trainable and all(p.dtype == torch.float32 for p in trainable)
    optimizer = make_optimizer(policy.model, 1e-3)
    prompt = policy.prompt_ids([{"role": "user", "content": OPENERS[0]}])
    stats = update(policy, [Sample(prompt, [300, 301, 302], 1.0, "agent"),
                            Sample(prompt, [400, 401], -1.0, "agent")], optimizer)
    assert stats.agent_loss != 0
    moments = [t for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t) and t.numel() > 1]
    assert moments and all(t.dtype == torch.float32 for t in moments)


def sampler_and_scorer(dtype: str, monkeypatch):
    """Per-token log-probs of sampled agent turns: the sampler's own (decode, with its key/value
    cache) and the scorer's (one padded forward, as the update takes them)."""
    from spade_mini.policy import decoding
    policy = load_policy(Config(model="embedded", quantize="none", dtype=dtype, temperature=0.6), verbose=False)
    seen, decode = [], decoding.decode

    def recording(*args, **kwargs):
        seen.append(decode(*args, **kwargs))
        return seen[-1]
    monkeypatch.setattr(decoding, "decode", recording)
    torch.manual_seed(0)
    chats = [[{"role": "user", "content": o}] for o in OPENERS * 2]
    outs = policy.continue_chats(chats, 24, keys=list(range(len(chats))))
    with torch.no_grad():
        scored = token_logprobs(policy.model, [o.prompt_ids for o in outs], [o.completion_ids for o in outs],
                                policy.pad_id, samplings=[o.sampling for o in outs])
    sampled = torch.cat([d.logprobs for d in seen[-1]])  # (N,)
    return sampled.float(), torch.cat(scored).float()


def test_sampler_and_scorer_agree_in_bf16_within_a_bound(monkeypatch):
    """k1 = mean(log p_sampler - log p_scorer) per token: about 1e-8 in float32; bf16 rounds the
    two computations differently (another matmul shape, a cache), and the bound below is what
    keeps the update on-policy in practice: far below the 0.24 nats/token of scoring at the
    wrong temperature (docs/the-learning-signal.md)."""
    sampled, scored = sampler_and_scorer("float32", monkeypatch)
    assert (sampled - scored).mean().abs() < 1e-5
    sampled, scored = sampler_and_scorer("bfloat16", monkeypatch)
    k1 = (sampled - scored).mean().item()
    assert abs(k1) < 0.02, k1
    assert (sampled - scored).abs().max() < 1.0  # no token scored as if drawn from another distribution


def test_the_probe_bench_reads_a_runs_design_iterations(tmp_path):
    """bench/dtype_probe.py --against RUN holds the estimate against the iterations where the designer
    ran (design + hint + play + update), not the cheap ones; a run it cannot read gets the fix."""
    spec = importlib.util.spec_from_file_location("dtype_probe", Path(__file__).parents[1] / "bench" / "dtype_probe.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    with pytest.raises(SystemExit, match="make train"):
        bench.design_iterations(tmp_path)
    times = {"time_design_s": 300.0, "time_hint_s": 1.0, "time_play_s": 30.0, "time_update_s": 170.0}
    rows = [{"iteration": 0, "designs": 16, **times}, {"iteration": 1, "designs": 0, **times, "time_design_s": 0.0},
            {"iteration": 2, "designs": 16, **times, "time_update_s": 20.0}]
    (tmp_path / "metrics.jsonl").write_text(json.dumps(rows[1]) + "\n")
    with pytest.raises(SystemExit, match="no iteration where the designer ran"):
        bench.design_iterations(tmp_path)
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert bench.design_iterations(tmp_path) == [(0, 501.0), (2, 351.0)]
