"""The policy: one causal language model that plays both roles, designer and agent.

`Policy` holds a model, its tokenizer and its sampling settings. The role is set only by the
prompt (and, with `--separate-adapters`, by the adapter `acting_as` switches to); this module
knows nothing about environments. Loading, LoRA and the trainable state are in load.py.

Two ways to sample: `generate` (Hugging Face `generate`) and `continue_chats` (the agent's
turns: `decoding.decode` drops finished rows and reuses each episode's keys and values between
turns; the same greedy output). Log-probs of sampled tokens are in logprobs.py. Both cut their
rows into chunks within the memory plan (memplan.py), and halve a chunk that runs out of memory;
under greedy decoding the chunks give what one batch gives.

Chats are rendered with `chat.chat_ids` (no text of a message can forge a special token).

Shapes (legend: spade_mini/__init__.py): B, T.
Omitted on purpose: vLLM and other fast inference engines, and a frozen reference model (the
loss has no KL term).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from spade_mini.policy.chat import chat_ids, special_starts
from spade_mini.policy.logprobs import PLAIN, Sampling, last_position, left_pad
from spade_mini.policy.chunks import chunk_rows
from spade_mini.policy.memplan import MemoryPlan, PlanError, out_of_memory

CHAT_CACHE_BYTES = 8 * 2**30  # keys and values kept between an agent's turns, at most (without a plan)


@dataclass
class Completion:
    text: str                  # decoded completion, special tokens stripped
    prompt_ids: list[int]      # chat-template prompt tokens, no padding
    completion_ids: list[int]  # generated tokens, up to and including EOS when finished
    finished: bool             # True when the model emitted EOS (not cut by max_new_tokens)
    sampling: Sampling = PLAIN  # how completion_ids were drawn (greedy: log-probs under PLAIN)


class Policy:
    """A model, its tokenizer and its sampling settings: `generate` for chats, `continue_chats`
    for chats that continue over turns, and the trainable parameters for the update.

    Modes are set explicitly: `generate` puts the model in eval mode (no dropout) and
    `reinforce.update` in train mode (dropout and gradient checkpointing, which transformers
    only applies in train mode). `autocast` is the compute dtype when the weights are kept in
    float32 (full fine-tuning in bf16/fp16), else None. `adapters` maps each role to its own LoRA
    adapter when roles are trained separately (`--separate-adapters`), else None. `plan` is the
    memory plan every call runs inside (None: one batch, as a bare model would).
    """

    def __init__(self, model, tokenizer, *, device: torch.device, temperature: float, top_p: float, top_k: int,
                 autocast: torch.dtype | None = None, adapters: dict[str, str] | None = None,
                 chat_cache_bytes: int = CHAT_CACHE_BYTES, plan: MemoryPlan | None = None):
        self.model, self.tokenizer, self.device = model, tokenizer, device
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.autocast, self.adapters = autocast, adapters
        self.tokenizer.padding_side = "left"
        eos = model.generation_config.eos_token_id
        eos = eos if isinstance(eos, list) else [eos]
        self.eos_ids = {int(e) for e in eos + [tokenizer.eos_token_id] if e is not None}
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else min(self.eos_ids))
        from spade_mini.policy.decoding import ChatCache
        self.plan = plan
        self.chat_cache = ChatCache(plan.chat_cache_bytes if plan else chat_cache_bytes)
        self.special_starts = special_starts(tokenizer)  # for chat_ids
        # running counts, for throughput metrics: tokens kept, and positions the model computed
        # (prefilled prompt positions with their padding, decoded positions with the padding
        # after EOS that `generate` decodes), and prompt tokens whose keys and values were reused
        self.tokens_generated = self.tokens_prefilled = self.tokens_decoded = self.tokens_reused = 0

    def prompt_ids(self, chat: list[dict], tools: list[dict] | None = None) -> list[int]:
        return chat_ids(self.tokenizer, chat, tools, self.special_starts)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    @contextlib.contextmanager
    def acting_as(self, role: str):
        """Generate or take log-probs as `role`: with separate adapters, switch to that role's adapter."""
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
                       tools: list[list[dict] | None] | None = None, keys: list | None = None,
                       stop=None) -> list[Completion]:
        """`generate` for chats that go on over turns: each row stops at its EOS, and a chat
        given a key reuses the keys and values its key's chat left in the previous call (the
        common token prefix; the rest is prefilled). Same samples in distribution as `generate`,
        the same completions under greedy decoding. Keys must be unique within a call. Without
        keys, rows that begin with the same tokens (at least 64) share them: their keys and values
        are computed once (decoding.prefill). `stop(ids)` ends a row early, finished (decoding.decode)."""
        from spade_mini.policy.decoding import decode, prefill, reusable_cache, reused_prefix, shared_prefixes
        if not chats:
            return []
        tools = tools or [None] * len(chats)
        prompts = [self.prompt_ids(c, t) for c, t in zip(chats, tools)]
        if keys is not None:
            self.chat_cache.start(keys, self.weights_stamp())
            kept = [reused_prefix(r, p) for r, p in zip(self.chat_cache.peek(keys), prompts)]
        else:  # rows that begin alike share their prefix's keys and values, computed once a chunk
            shared = shared_prefixes(prompts) if reusable_cache(self.model) else [0] * len(prompts)
            kept = [min(n, len(p) - 1) for n, p in zip(shared, prompts)]
        s = self.sampling(temperature)
        self.model.eval()  # sampling: no dropout

        def chunk(rows: list[int]):
            with self.compute():
                if keys is not None:
                    past = self.chat_cache.take([keys[i] for i in rows])
                else:
                    heads = {tuple(prompts[i][:shared[i]]) for i in rows if shared[i]}
                    made = {head: prefill(self.model, list(head)) for head in heads}
                    self.tokens_prefilled += sum(map(len, heads))
                    past = [made.get(tuple(prompts[i][:shared[i]])) for i in rows]
                out = decode(self.model, [prompts[i] for i in rows], max_new_tokens, None if s is PLAIN else s,
                             self.eos_ids, self.pad_id, past,
                             room=self.chat_cache.room if keys is not None else (lambda n: False),  # nothing to keep
                             stop=stop)
            if keys is not None:
                self.chat_cache.keep([keys[i] for i in rows], [d.reusable for d in out])
            self.tokens_prefilled += len(rows) * max(len(prompts[i]) - d.reused for i, d in zip(rows, out))
            return out

        out = self.in_chunks(kept, [len(p) - k for p, k in zip(prompts, kept)], max_new_tokens, chunk)
        self.tokens_reused += sum(d.reused for d in out)
        self.tokens_decoded += sum(len(d.ids) for d in out)
        self.tokens_generated += sum(len(d.ids) for d in out)
        return self.completions(prompts, [(d.ids, d.finished) for d in out], temperature)

    def generate_until(self, chats: list[list[dict]], max_new_tokens: int, temperature: float | None = None,
                       until=None, when: str | None = None) -> list[Completion]:
        """`generate` in the decoding loop: every row leaves the batch at its EOS, or, finished, as
        soon as `until(its text so far)` is true (the designer's: its environment's code block has
        closed; what follows is never read), instead of `generate` decoding padding until the
        longest row ends. With `when`, `until` is asked only after a token whose text holds it (the
        designer's: a backtick, which ends every closing fence), so a row's whole text is not
        decoded again at every step."""
        def stop(ids: list[int]) -> bool:
            return (until is not None and (when is None or when in self.tokenizer.decode(ids[-1:]))
                    and until(self.tokenizer.decode(ids, skip_special_tokens=True)))
        return self.continue_chats(chats, max_new_tokens, temperature, stop=stop)

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
        the policy of the log-probs differ from the sampled one."""
        from transformers import GenerationConfig
        s = self.sampling(temperature)
        sampling = (dict(do_sample=True, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p)
                    if s is not PLAIN else dict(do_sample=False))
        return GenerationConfig(max_new_tokens=max_new_tokens, pad_token_id=self.pad_id,
                                eos_token_id=sorted(self.eos_ids), **sampling)

    def in_chunks(self, prefix: list[int], rest: list[int], max_new_tokens: int, run: Callable[[list[int]], list]) -> list:
        """run(rows) over chunks of rows within the plan's cache positions (`memplan.chunk_rows`:
        row i reuses prefix[i] cached positions and prefills rest[i]); results in row order. A
        chunk that runs out of memory is halved and retried, and the plan tightened."""
        if self.plan is None:
            return run(list(range(len(rest))))
        out = [None] * len(rest)
        todo = chunk_rows(prefix, rest, max_new_tokens, self.plan.generation_positions, self.plan.row_positions)
        while todo:
            rows = todo.pop(0)
            try:
                results = run(rows)
            except RuntimeError as e:
                if not out_of_memory(e):
                    raise
                results = None  # retried below, once the error and the tensors it holds are gone
            if results is None:
                size = len(rows) * (max(prefix[i] for i in rows) + max(rest[i] for i in rows) + max_new_tokens
                                    + self.plan.row_positions)  # as chunk_rows counts it
                if len(rows) == 1:
                    raise PlanError(f"one row of {size:,} cache positions runs out of memory on its own; lower "
                                    "this phase's budget (--design-max-new-tokens, --hint-max-new-tokens, "
                                    "--turn-max-new-tokens or --max-context-tokens) or --gpu-memory.") from None
                self.plan.generation_positions = min(self.plan.generation_positions, size // 2)
                self.plan.survived(f"a generation chunk of {len(rows)} rows ({size:,} cache positions)",
                                   f"chunks hold at most {self.plan.generation_positions:,} positions")
                todo[:0] = [rows[:len(rows) // 2], rows[len(rows) // 2:]]
                continue
            for i, result in zip(rows, results):
                out[i] = result
        return out

    @torch.no_grad()
    def generate_ids(self, prompts: list[list[int]], max_new_tokens: int,
                     temperature: float | None = None) -> list[tuple[list[int], bool]]:
        """Token ids in, (completion ids, finished-by-EOS) out, in chunks within the memory plan."""
        return self.in_chunks([0] * len(prompts), [len(p) for p in prompts], max_new_tokens,
                              lambda rows: self.generate_batch([prompts[i] for i in rows], max_new_tokens, temperature))

    def generate_batch(self, prompts: list[list[int]], max_new_tokens: int,
                       temperature: float | None = None) -> list[tuple[list[int], bool]]:
        """One `generate` call for all prompts, left padded."""
        input_ids, attention_mask = left_pad(prompts, self.pad_id, self.device)  # (B, T), (B, T)
        self.model.eval()  # sampling: no dropout
        with self.compute():
            out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                      logits_to_keep=last_position(self.device),
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

