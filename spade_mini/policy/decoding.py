"""Decoding that stops each row at its EOS and reuses a chat's keys and values across turns.

`decode(model, prompts, ...)` samples completions for a batch of token prompts with its own
loop instead of Hugging Face `generate`, for two savings that `generate` cannot make:

- a row that emitted EOS leaves the batch at once (`generate` keeps decoding padding for it
  until the longest row stops);
- a row may come with the keys and values computed for an earlier prompt (an agent's previous
  turn): the longest common token prefix is reused and only the rest of the prompt is
  prefilled, so a 25-turn episode does not re-read its growing chat 25 times.

Reuse is exact: keys and values of a token prefix depend only on those tokens and the weights,
so matching tokens (never assuming the chat template re-renders a turn the same way) and
`ChatCache` refusing entries made under other weights or another adapter are enough.
Sampling draws from exactly the distribution `logprobs.sampled_logprobs` takes log-probs under
(temperature, then top-k, then top-p); greedy is the argmax, as in `generate`.

Shapes (legend: spade_mini/__init__.py): B, R, S, V, h, d. Omitted: paged attention and continuous batching (transformers'
`generate_batch`; slower on CPU, bench/RESULTS.md), models with sliding-window
layers (they decode here without reuse), and beam search.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from spade_mini.policy.logprobs import Sampling, sampler_logits


@dataclass
class Reusable:
    """What a finished row leaves for its next turn: the tokens it has fed through the model
    and, per layer, their keys and values ((h, n, d) each, n = len(tokens))."""
    tokens: list[int]
    layers: list[tuple[torch.Tensor, torch.Tensor]]

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in self.layers)


@dataclass
class Decoded:
    ids: list[int]              # completion ids, up to and including EOS when finished
    finished: bool              # ended by EOS, not by the token budget
    logprobs: torch.Tensor      # (len(ids),) log-probability of each drawn token under the sampler
    reusable: Reusable | None   # for the next turn, when the model's cache allows reuse
    reused: int                 # prompt tokens whose keys and values came from `past`


class ChatCache:
    """Reusable keys and values per chat key, for one call to the next.

    `take` hands out (and forgets) the entries for this call's keys; `keep` stores what the
    call left, up to `max_bytes`. So nothing outlives the next call, and an entry is only ever
    used under the same `stamp` (active adapter, weights version) it was made under.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes, self.entries, self.stamp = max_bytes, {}, None

    def take(self, keys: list, stamp) -> list[Reusable | None]:
        entries = self.entries if stamp == self.stamp else {}
        self.entries = {}
        return [entries.get(k) for k in keys]

    def keep(self, keys: list, reusables: list[Reusable | None], stamp) -> None:
        self.entries, self.stamp, used = {}, stamp, 0
        for key, r in zip(keys, reusables):
            if r is not None and used + r.nbytes <= self.max_bytes:
                self.entries[key] = r
                used += r.nbytes

    def clear(self) -> None:
        self.entries = {}


@torch.no_grad()
def decode(model, prompts: list[list[int]], max_new_tokens: int, sampling: Sampling | None,
           eos_ids: set[int], pad_id: int, past: list[Reusable | None] | None = None) -> list[Decoded]:
    """Sample a completion for each prompt (greedy when `sampling` is None); `past[i]` is an
    earlier call's Reusable for prompt i, or None."""
    B, device = len(prompts), next(model.parameters()).device
    reuse = reusable_cache(model)
    past = past if reuse and past is not None else [None] * B
    # reuse the longest common prefix, but always prefill at least one token (the logits)
    kept = [0 if r is None else min(common_prefix(r.tokens, p), len(p) - 1) for r, p in zip(past, prompts)]
    R, S = max(kept), max(len(p) - k for p, k in zip(prompts, kept))
    mask = torch.zeros(B, R + S, dtype=torch.long, device=device)  # (B, R + S)
    ids = torch.full((B, S), pad_id, dtype=torch.long, device=device)  # (B, S)
    for i, (p, k) in enumerate(zip(prompts, kept)):
        mask[i, R - k:R] = 1  # the reused prefix, left padded to R
        mask[i, R + S - (len(p) - k):] = 1  # the rest of the prompt, left padded to S
        ids[i, S - (len(p) - k):] = torch.tensor(p[k:], device=device)
    cache = DynamicCache(config=model.config)
    if reuse:  # each layer keeps room for the whole turn (the prompt's rest and its completion)
        cache.layers = [RoomyLayer(S + max_new_tokens) for _ in cache.layers]
        for layer, (k, v) in zip(cache.layers, stacked_past(past, kept, R) if R else []):
            layer.update(k, v)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, R + S) counted over real tokens only
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions[:, R:], use_cache=True,
                   logits_to_keep=1, **{cache_argument(model): cache}).logits[:, -1]  # (B, V)

    rows = list(range(B))  # prompt index of each live row of the batch
    tokens: list[list[int]] = [[] for _ in range(B)]
    logps: list[list[torch.Tensor]] = [[] for _ in range(B)]
    done: list[Decoded | None] = [None] * B
    last = positions[:, -1]  # (B,)
    for step in range(max_new_tokens):
        drawn, logp = draw(logits, sampling)  # (b,), (b,)
        ending = []
        for j, (i, token) in enumerate(zip(rows, drawn.tolist())):
            tokens[i].append(token)
            logps[i].append(logp[j])
            if tokens[i][-1] in eos_ids or step == max_new_tokens - 1:
                ending.append(j)
        for j in ending:  # their last token is drawn but not fed: the cache holds the rest
            i = rows[j]
            keep = reuse and (prompts[i] + tokens[i][:-1], cache_rows(cache, j, mask[j]))
            done[i] = Decoded(tokens[i], tokens[i][-1] in eos_ids, torch.stack(logps[i]),
                              Reusable(*keep) if keep else None, kept[i])
        if len(ending) == len(rows):
            break
        if ending:  # finished rows leave the batch
            stay = torch.tensor([j for j in range(len(rows)) if j not in ending], device=device)  # (b',)
            cache.batch_select_indices(stay)
            mask, last, drawn = mask[stay], last[stay], drawn[stay]
            rows = [rows[j] for j in stay.tolist()]
        mask = torch.cat([mask, mask.new_ones(len(rows), 1)], dim=1)  # (b, L + 1)
        last = last + 1  # (b,)
        logits = model(input_ids=drawn[:, None], attention_mask=mask, position_ids=last[:, None],
                       use_cache=True, **{cache_argument(model): cache}).logits[:, -1]  # (b, V)
    return done


class RoomyLayer(DynamicLayer):
    """A DynamicLayer that writes new keys and values into a buffer with `room` spare positions,
    instead of concatenating the whole cache at every step (that copy was 39% of a CPU decode
    step at 800 cached tokens). `keys` and `values` are views of the filled part."""

    def __init__(self, room: int):
        super().__init__()
        self.room, self.length = room, 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        n = key_states.shape[-2]
        if not self.is_initialized or self.length + n > self.buffers[0].shape[-2]:
            grown = [x.new_zeros(*x.shape[:2], self.length + n + self.room, x.shape[-1])
                     for x in (key_states, value_states)]  # (b, h, capacity, d) each
            for new, old in zip(grown, (self.keys, self.values) if self.is_initialized else ()):
                new[:, :, :self.length] = old
            self.buffers, self.is_initialized, self.device = grown, True, key_states.device
        for buffer, x in zip(self.buffers, (key_states, value_states)):
            buffer[:, :, self.length:self.length + n] = x
        self.length += n
        self.keys, self.values = (b[:, :, :self.length] for b in self.buffers)  # (b, h, length, d)
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.buffers = [b[indices] for b in self.buffers]
        self.keys, self.values = (b[:, :, :self.length] for b in self.buffers)


def draw(logits: torch.Tensor, sampling: Sampling | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens (b,), their log-probs (b,)) from next-token logits (b, V): the argmax when
    sampling is None (greedy: log-probs under PLAIN), else a sample from softmax(logits / T) cut to
    the top-k, then top-p support."""
    if sampling is None:
        z = logits.float()  # (b, V)
        drawn = z.argmax(-1)  # (b,)
    else:
        z = sampler_logits(logits, sampling)  # (b, V)
        n = int(torch.isfinite(z).sum(-1).max())  # the largest support of a row
        if n < z.shape[-1]:  # draw among the n best only: the same distribution, a smaller draw
            top, where = z.topk(n, dim=-1)  # (b, n), (b, n): every finite logit of every row
            drawn = where.gather(-1, torch.multinomial(top.softmax(-1), 1)).squeeze(-1)  # (b,)
        else:
            drawn = torch.multinomial(z.softmax(-1), 1).squeeze(-1)  # (b,)
    logp = z.log_softmax(-1).gather(-1, drawn[:, None]).squeeze(-1)  # (b,)
    return drawn, logp


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def reusable_cache(model) -> bool:
    """Whether every layer keeps plain, full-length keys and values (no sliding window), which
    is what cutting and re-stacking them per row needs."""
    text = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return all(t == "full_attention" for t in (getattr(text, "layer_types", None) or ["full_attention"]))


def cache_argument(model) -> str:
    """The forward's name for the cache: `cache` in recent transformers, `past_key_values` before."""
    return "cache" if "cache" in inspect.signature(model.get_decoder().forward).parameters else "past_key_values"


def cache_rows(cache, row: int, mask: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One row's keys and values at its real (unpadded) positions, per layer, (h, n, d) each."""
    real = mask.nonzero().squeeze(-1)  # (n,)
    return [(layer.keys[row][:, real].clone(), layer.values[row][:, real].clone()) for layer in cache.layers]


def stacked_past(past: list[Reusable | None], kept: list[int], R: int):
    """Per layer, (keys, values) of shape (B, h, R, d): each row's first kept[i] positions,
    left padded with zeros (masked out) to R."""
    some = next(r for r in past if r is not None)
    layers = []
    for layer, (k0, v0) in enumerate(some.layers):
        keys = k0.new_zeros(len(past), k0.shape[0], R, k0.shape[2])  # (B, h, R, d)
        values = v0.new_zeros(len(past), v0.shape[0], R, v0.shape[2])  # (B, h, R, d)
        for i, (r, k) in enumerate(zip(past, kept)):
            if k:
                keys[i, :, R - k:] = r.layers[layer][0][:, :k]
                values[i, :, R - k:] = r.layers[layer][1][:, :k]
        layers.append((keys, values))
    return layers
