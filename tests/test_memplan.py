"""The memory plan (spade_mini/policy/memplan.py), checked on a reduced Qwen3-shaped model (a
transformers Qwen3Config with two layers, random weights, over the embedded tokenizer): its bytes
per cached position are a real cache's, chunked generation and token-packed updates give what one
batch gives, no forward pass holds more cache than the plan allows (seen by a forward hook), an
out-of-memory error is halved, retried and recorded, and `train.py --plan` prints and refuses."""
import contextlib
import dataclasses
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from scripted import ScriptedPlayer
import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache

from spade_mini.agent import Job, PlaySettings, play_episodes
from spade_mini.config import Config
from spade_mini.designer import DesignSettings, design_environments, generate_hints, skills_for
from spade_mini.envs import EXAMPLES
from spade_mini.policy import (ModelShape, PlanError, Sampling, embedded_checkpoint, make_plan, pack_by_tokens,
                               policy_from_model, token_logprobs)
from spade_mini.policy.decoding import cache_argument
from spade_mini.policy.chunks import chunk_rows
from spade_mini.reinforce import Sample, UpdateSettings, update

ROOT = Path(__file__).resolve().parents[1]
OOM = "CUDA out of memory. Tried to allocate 2.00 GiB (injected by the test)"


def qwen3_model(dtype=torch.float32, layers=2):
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM
    tokenizer = AutoTokenizer.from_pretrained(embedded_checkpoint(Config().cache_dir))
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=8192,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    return Qwen3ForCausalLM(config).to(dtype).eval(), tokenizer


@pytest.fixture(scope="module")
def policy():
    model, tokenizer = qwen3_model()
    p = policy_from_model(model, tokenizer, Config(model="tiny", quantize="none", temperature=0, seed=0),
                          device=torch.device("cpu"))
    with torch.no_grad():  # LoRA B starts at zero: give the adapter a gradient through A too
        for name, w in p.model.named_parameters():
            if "lora_B" in name:
                w.normal_(0, 0.05)
    return p


@pytest.fixture
def plan(policy):
    """The policy's plan, restored after the test (tests shrink it to simulate a small device)."""
    kept = policy.plan
    policy.plan = dataclasses.replace(kept)
    yield policy.plan
    policy.plan = kept


@contextlib.contextmanager
def watching(policy):
    """After every forward pass of the decoder, record (positions its cache holds as allocated,
    rows x length with padding; their bytes; rows; the chat cache's bytes)."""
    seen = []

    def record(module, args, kwargs, output):
        cache = next((v for v in kwargs.values() if isinstance(v, Cache)), None)
        if cache is not None:
            held = [(layer.buffers if hasattr(layer, "buffers") else [layer.keys, layer.values]) for layer in cache.layers]
            seen.append((max(k.shape[0] * k.shape[2] for k, _ in held), sum(k.nbytes + v.nbytes for k, v in held),
                         held[0][0].shape[0], policy.chat_cache.used))
    hook = decoder(policy).register_forward_hook(record, with_kwargs=True)
    try:
        yield seen
    finally:
        hook.remove()


@contextlib.contextmanager
def failing(policy, when):
    """Raise an out-of-memory error before a forward pass of the decoder whenever `when(module,
    rows)` says so."""
    def check(module, args, kwargs):
        ids = kwargs.get("input_ids") if kwargs.get("input_ids") is not None else (args or [None])[0]
        if when(module, ids.shape[0] if ids is not None else 0):
            raise torch.OutOfMemoryError(OOM)
    hook = decoder(policy).register_forward_pre_hook(check, with_kwargs=True)
    try:
        yield
    finally:
        hook.remove()


def decoder(policy):
    return policy.model.get_base_model().get_decoder()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_bytes_per_cached_position_are_a_real_dynamic_cache(dtype):
    model, _ = qwen3_model(dtype, layers=3)
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=torch.randint(0, 1000, (2, 7)), use_cache=True, **{cache_argument(model): cache})
    held = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    assert held == 2 * 7 * ModelShape.of(model.config).position_bytes(torch.empty(0, dtype=dtype).element_size())


def test_chunked_design_hint_and_play_equal_one_batch(policy, plan):
    """Greedy: every phase's transcripts in chunks of at most two rows equal one batch's, and no
    forward pass holds more cache positions (or bytes) than the plan allows, nor the chat cache
    more than its budget."""
    skills = skills_for("games")[:4]
    sources = [e.source for e in EXAMPLES[:3]]
    knapsack = next(e for e in EXAMPLES if e.name == "knapsack").source  # a wrong answer does not end it
    jobs = [Job(knapsack, seed, arm) for seed in range(3) for arm in ("no_hint", "hint")]
    phases = {
        "design": lambda: [d.completion.completion_ids for d in design_environments(policy, skills, None, None, random.Random(0), DesignSettings(max_new_tokens=6, temperature=0), iteration=0)],
        "hint": lambda: generate_hints(policy, sources, ["games"] * 3, 5, temperature=0),
        "play": lambda: [e.transcript() for e in play_episodes(ScriptedPlayer(policy, None, finished=True), jobs, PlaySettings(max_turns=3, max_new_tokens=5, temperature=0))],
    }
    policy.plan, one_batch, longest = None, {}, {}
    for name, phase in phases.items():
        with watching(policy) as seen:
            one_batch[name] = phase()
        longest[name] = max(positions // rows for positions, _, rows, _ in seen)  # a row's cache, at most
    policy.plan, budget = plan, policy.chat_cache.max_bytes
    policy.chat_cache.max_bytes = plan.chat_cache_bytes = 2 * longest["play"] * plan.position_bytes
    policy.forget_chats()  # what the one-batch play kept under the larger budget
    try:
        for name, phase in phases.items():
            plan.generation_positions = 2 * (longest[name] + plan.row_positions)  # a small simulated device
            with watching(policy) as seen:
                assert phase() == one_batch[name], name
            assert max(rows for _, _, rows, _ in seen) == 2, name  # really in chunks
            assert all(positions <= plan.generation_positions for positions, *_ in seen), name
            assert all(nbytes <= positions * plan.position_bytes for positions, nbytes, *_ in seen), name
            assert all(used <= plan.chat_cache_bytes for *_, used in seen), name
    finally:
        policy.chat_cache.max_bytes = budget


def test_an_out_of_memory_chunk_is_halved_retried_and_recorded(policy, plan, capsys):
    chats = [[{"role": "user", "content": f"Row {i}: " + "tell me more " * i}] for i in range(6)]
    one_batch = 6 * (max(len(policy.prompt_ids(c)) for c in chats) + 5 + plan.row_positions)  # all rows at once
    policy.plan = None
    want = [o.completion_ids for o in policy.generate(chats, 5) + policy.continue_chats(chats, 5)]
    policy.plan, armed = plan, []
    with failing(policy, lambda module, rows: rows > 1 and armed and armed.pop()):
        armed.append(True)
        got = policy.generate(chats, 5)
        armed.append(True)
        got += policy.continue_chats(chats, 5, keys=list(range(6)))
    assert [o.completion_ids for o in got] == want
    assert plan.oom_retries == 2 and plan.generation_positions <= one_batch // 2
    assert capsys.readouterr().out.count("out of memory in a generation chunk") == 1  # said once per run


def samples_of(policy, n=9) -> list[Sample]:
    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(n):
        prompt = torch.randint(100, 5000, (int(torch.randint(5, 60, (1,), generator=g)),), generator=g).tolist()
        completion = torch.randint(100, 5000, (int(torch.randint(1, 30, (1,), generator=g)),), generator=g).tolist()
        out.append(Sample(prompt, completion, (-1.0) ** i * (0.5 + i / 10), ("agent", "designer")[i % 3 == 0],
                          Sampling(0.6, 20, 0.95) if i % 2 else Sampling()))
    return out


class KeepGradients(torch.optim.Optimizer):
    """An optimizer whose step only copies the gradients (the weights stay as they are)."""

    def __init__(self, params):
        super().__init__(params, {})

    def step(self, closure=None):
        self.grads = torch.cat([p.grad.flatten() for g in self.param_groups for p in g["params"] if p.grad is not None])


def gradient(policy, samples, tokens: int, when=None):
    policy.plan.update_tokens, passes = tokens, []

    def logprobs(model, prompts, completions, pad_id, samplings):
        passes.append(len(prompts) * max(len(p) + len(c) for p, c in zip(prompts, completions)))
        return token_logprobs(model, prompts, completions, pad_id, micro_batch=len(prompts), samplings=samplings)
    opt = KeepGradients(policy.trainable_parameters())
    with failing(policy, when or (lambda module, rows: False)):
        update(policy, samples, opt, UpdateSettings(micro_batch=64, max_grad_norm=0), logprob_fn=logprobs)
    return opt.grads, passes


def test_micro_batches_by_tokens_give_the_gradient_of_one_batch(policy, plan):
    samples = samples_of(policy)
    one, passes = gradient(policy, samples, tokens=10**6)
    assert len(passes) == 2  # one forward per role
    packed, passes = gradient(policy, samples, tokens=150)
    assert len(passes) > 4 and max(passes) <= 150  # padded tokens within the budget
    assert ((packed - one).norm() / one.norm()).item() < 1e-5


def test_an_out_of_memory_micro_batch_restarts_with_half_the_tokens(policy, plan, capsys):
    samples = samples_of(policy)
    want, _ = gradient(policy, samples, tokens=400)
    forwards = []
    # the second forward: one micro-batch's gradient is already in .grad
    got, passes = gradient(policy, samples, tokens=400, when=lambda module, rows: forwards.append(1) or len(forwards) == 2)
    assert ((got - want).norm() / want.norm()).item() < 1e-5
    assert plan.oom_retries == 1 and plan.update_tokens <= 200 and max(passes[1:]) <= plan.update_tokens
    assert "out of memory in an update micro-batch" in capsys.readouterr().out


def test_the_run_records_out_of_memory_retries(policy, plan):
    from spade_mini.loop import State, one_iteration
    from spade_mini.reinforce import make_optimizer
    cfg = Config(model="tiny", pool_fill="examples", designs_per_iteration=2, plays_per_design=1, max_turns=1,
                 turn_max_new_tokens=10, hint_source="env", lr=0.0)
    state = State(ScriptedPlayer(policy, None, finished=True), make_optimizer(policy.model, 0.0), skills_for("games"), None, None,
                  random.Random(0), examples=[e for e in EXAMPLES if e.setting == "games"])
    armed = [True]
    with failing(policy, lambda module, rows: rows > 1 and armed and armed.pop()):  # the first play turn
        row = one_iteration(state, cfg).row
    assert row["oom_retries"] == 1 and row["episodes"] == 2  # 2 environments x 1 seed; the fixed pool plays no hint arm


def test_what_cannot_fit_at_all_stops_with_one_sentence_naming_the_flag(policy, plan):
    with pytest.raises(PlanError, match="--turn-max-new-tokens or --max-context-tokens"):
        chunk_rows([0], [900], 200, positions=1000)
    with pytest.raises(PlanError, match="--update-tokens"):
        pack_by_tokens([40, 900], tokens=500, max_rows=8)
    assert chunk_rows([0, 0, 0], [10, 30, 20], 5, positions=10**6) == [[0, 1, 2]]  # one batch, in order
    assert chunk_rows([0, 0, 0], [10, 30, 20], 5, positions=60) == [[1], [2, 0]]  # longest first
    shape = ModelShape.of(policy.model.config)
    with pytest.raises(PlanError, match="--gpu-memory"):
        make_plan(shape, device="cuda", total_bytes=2**30, weights_bytes=2**30, state_bytes=0, dtype_bytes=2,
                  checkpointing=True)
    with pytest.raises(PlanError, match="one row .* runs out of memory on its own; .*--max-context-tokens"):
        with failing(policy, lambda module, rows: True):
            policy.generate([[{"role": "user", "content": "Hi."}]], 3)


def run_script(*args, env=None):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)


def test_train_plan_prints_every_phase_without_a_gpu_or_weights():
    out = run_script("train.py", "--plan", "--preset", "gpu", "--gpu-memory", "24GiB")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "not downloaded" in out.stdout and "memory plan: 24.0 GiB on cuda" in out.stdout
    for phase in ("design", "hint", "play, turn 1", "play, turns 2-", "update"):
        assert f"\n{phase}" in out.stdout
    refused = run_script("train.py", "--plan", "--preset", "gpu", "--gpu-memory", "8GiB")
    assert refused.returncode == 2 and "lower --max-context-tokens or raise --gpu-memory" in refused.stdout
    unknown = run_script("train.py", "--plan", "--preset", "gpu", "--model", "nobody/no-such-model-xyz")
    assert unknown.returncode == 2 and "cannot be read offline" in unknown.stdout


def test_loading_prints_only_what_a_user_can_act_on():
    """Unquantized: bitsandbytes is never imported, and no warning reaches the screen; a 4-bit
    load in the same process still works, and says nothing more."""
    code = ("import sys\nfrom spade_mini.config import Config\nfrom spade_mini.policy import load_policy\n"
            "load_policy(Config(model='tiny', quantize='none', gradient_checkpointing=True), verbose=False)\n"
            "print('bitsandbytes' in sys.modules)\n"
            "p = load_policy(Config(model='embedded', quantize='4bit'), verbose=False)\n"
            "print(type(p.model.get_base_model().model.layers[0].self_attn.q_proj.base_layer).__name__)\n")
    out = run_script("-W", "default", "-c", code, env={"TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "Linear4bit"]
    assert out.stderr.strip() == "", out.stderr


# --- a CPU plans by need -----------------------------------------------------------------------

def test_a_cpu_plan_is_what_the_run_needs_under_its_cap():
    from spade_mini.policy import Need
    shape = ModelShape(layers=4, hidden=64, intermediate=128, heads=4, kv_heads=2, head_dim=16, vocab=1000, tied=True)
    common = dict(device="cpu", weights_bytes=10 * 2**20, state_bytes=2**20, dtype_bytes=4, checkpointing=False)
    need = Need(generation=((4, 900), (64, 300)), chat_positions=64 * 300, update_tokens=1200)
    whole = make_plan(shape, total_bytes=20 * 2**30, **common)
    by_need = make_plan(shape, total_bytes=20 * 2**30, need=need, **common)
    assert whole.total_bytes == 20 * 2**30 and not whole.by_need
    assert by_need.by_need and by_need.total_bytes < 2**31  # a few MB of work, not the 20 GiB there are
    assert by_need.generation_positions == 64 * (300 + by_need.row_positions)  # the larger call, all rows at once
    assert by_need.update_tokens == 1200 and by_need.update_limit == whole.update_tokens
    work = max(by_need.generation_bytes(by_need.generation_positions) + by_need.chat_cache_bytes,
               by_need.update_bytes(by_need.update_tokens))
    assert by_need.total_bytes == by_need.weights_bytes + by_need.state_bytes + by_need.margin_bytes + work
    assert "memory plan by need" in by_need.line()
    # a need beyond the cap: the plan is the cap, and the update is cut to what fits under it
    huge = make_plan(shape, total_bytes=20 * 2**30, need=dataclasses.replace(need, update_tokens=10**8), **common)
    assert huge.total_bytes <= 20 * 2**30 and huge.update_tokens == whole.update_tokens < 10**8


def test_a_sample_longer_than_the_estimate_gets_a_micro_batch_of_its_own():
    """By need, micro-batches hold the estimated longest sample; one longer than that still runs
    alone when the cap allows it, and only one beyond the cap stops the run."""
    assert pack_by_tokens([1500, 300, 300, 300], tokens=1200, max_rows=4, limit=5000) == [[0], [1, 2, 3]]
    with pytest.raises(PlanError, match="--update-tokens"):
        pack_by_tokens([6000, 300], tokens=1200, max_rows=4, limit=5000)


def test_train_plan_on_a_cpu_is_by_need():
    out = run_script("train.py", "--plan", "--preset", "cpu-smoke")
    assert out.returncode == 0, out.stdout + out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("memory plan"))
    assert line.startswith("memory plan by need:") and "on cpu" in line
    total = float(line.split(":")[1].split("GiB")[0])
    assert total < 12, line  # the 135M model's run, at its longest rows; not the machine's RAM
    capped = run_script("train.py", "--plan", "--preset", "cpu-smoke", "--gpu-memory", "1GiB")
    assert capped.returncode == 2 and "--gpu-memory" in capped.stdout
