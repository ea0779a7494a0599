"""Decoding that stops each row at its EOS and reuses a chat's keys and values across turns.

`decode(model, prompts, ...)` samples completions for a batch of token prompts with its own
loop instead of Hugging Face `generate`, for two savings that `generate` cannot make:

- a row that emitted EOS leaves the batch at once (`generate` keeps decoding padding for it
  until the longest row stops);
- a row may come with the keys and values computed for an earlier prompt (an agent's previous
  turn): the longest common token prefix is reused and only the rest of the prompt is
  prefilled, so a 25-turn episode does not re-read its growing chat 25 times;
- rows of one call that begin alike (the designer's prompts, which open with one contract and
  example) share that prefix: `shared_prefixes` finds it and `prefill` computes its keys and
  values once, for every row that starts with it.

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
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from spade_mini.policy.logprobs import Sampling, last_position, sampler_logits


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
    """Reusable keys and values per chat key, from one call to the next, within `max_bytes`.

    A call `start`s with its keys: entries of other keys, or made under another `stamp` (active
    adapter, weights version), are dropped, so nothing outlives the next call. Each chunk of the
    call `take`s (and forgets) its rows' entries, and `decode` asks for `room` before it copies a
    finished row's keys and values out, which `keep` then stores. So the bytes held never pass
    `max_bytes`, in the middle of a call too.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes, self.entries, self.stamp, self.used = max_bytes, {}, None, 0

    def start(self, keys: list, stamp) -> None:
        entries = self.entries if stamp == self.stamp else {}
        self.entries = {k: entries[k] for k in keys if k in entries}
        self.stamp, self.used = stamp, sum(r.nbytes for r in self.entries.values())

    def peek(self, keys: list) -> list[Reusable | None]:
        return [self.entries.get(k) for k in keys]

    def take(self, keys: list) -> list[Reusable | None]:
        taken = [self.entries.pop(k, None) for k in keys]
        self.used -= sum(r.nbytes for r in taken if r is not None)
        return taken

    def room(self, nbytes: int) -> bool:
        """Reserve `nbytes` for an entry about to be made, if the budget allows."""
        if self.used + nbytes > self.max_bytes:
            return False
        self.used += nbytes
        return True

    def keep(self, keys: list, reusables: list[Reusable | None]) -> None:
        """Store the entries made with `room` reserved."""
        self.entries.update((k, r) for k, r in zip(keys, reusables) if r is not None)

    def clear(self) -> None:
        self.entries, self.used = {}, 0


@torch.no_grad()
def decode(model, prompts: list[list[int]], max_new_tokens: int, sampling: Sampling | None,
           eos_ids: set[int], pad_id: int, past: list[Reusable | None] | None = None,
           room: Callable[[int], bool] | None = None,
           stop: Callable[[list[int]], bool] | None = None) -> list[Decoded]:
    """Sample a completion for each prompt (greedy when `sampling` is None); `past[i]` is an
    earlier call's Reusable for prompt i, or None (consumed: its tensors are freed as they are
    copied). A finished row leaves a Reusable when `room(its bytes)` allows (None: always).
    A row also ends, finished, when `stop(its completion ids)` says so (e.g. its code block closed)."""
    B, device = len(prompts), next(model.parameters()).device
    reuse = reusable_cache(model)
    past = past if reuse and past is not None else [None] * B
    kept = [reused_prefix(r, p) for r, p in zip(past, prompts)]
    R, S = max(kept), max(len(p) - k for p, k in zip(prompts, kept))
    mask = torch.zeros(B, R + S, dtype=torch.long, device=device)  # (B, R + S)
    ids = torch.full((B, S), pad_id, dtype=torch.long, device=device)  # (B, S)
    for i, (p, k) in enumerate(zip(prompts, kept)):
        mask[i, R - k:R] = 1  # the reused prefix, left padded to R
        mask[i, R + S - (len(p) - k):] = 1  # the rest of the prompt, left padded to S
        ids[i, S - (len(p) - k):] = torch.tensor(p[k:], device=device)
    cache = DynamicCache(config=model.config)
    if reuse:  # each layer holds the whole turn at once: reused prefix, rest of the prompt, completion
        cache.layers = [RoomyLayer(R + S + max_new_tokens) for _ in cache.layers]
        if R:
            fill_past(cache.layers, past, kept, R)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, R + S) counted over real tokens only
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions[:, R:], use_cache=True,
                   logits_to_keep=last_position(device), **{cache_argument(model): cache}).logits[:, -1]  # (B, V)

    rows = list(range(B))  # prompt index of each live row of the batch
    tokens: list[list[int]] = [[] for _ in range(B)]
    logps: list[list[torch.Tensor]] = [[] for _ in range(B)]
    done: list[Decoded | None] = [None] * B
    last = positions[:, -1]  # (B,)
    for step in range(max_new_tokens):
        drawn, logp = draw(logits, sampling)  # (b,), (b,)
        ending, stopped = [], set()  # stopped: rows ended by `stop` (asked once a row a step)
        for j, (i, token) in enumerate(zip(rows, drawn.tolist())):
            tokens[i].append(token)
            logps[i].append(logp[j])
            if stop is not None and token not in eos_ids and stop(tokens[i]):
                stopped.add(i)
            if token in eos_ids or step == max_new_tokens - 1 or i in stopped:
                ending.append(j)
        for j in ending:  # their last token is drawn but not fed: the cache holds the rest
            i = rows[j]
            keep = reuse and (room is None or room(int(mask[j].sum()) * position_bytes(cache)))
            done[i] = Decoded(tokens[i], tokens[i][-1] in eos_ids or i in stopped, torch.stack(logps[i]),
                              Reusable(prompts[i] + tokens[i][:-1], cache_rows(cache, j, mask[j])) if keep else None,
                              kept[i])
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
    """A DynamicLayer that writes new keys and values into buffers of `capacity` positions,
    allocated once, instead of concatenating the whole cache at every step (that copy was 39% of
    a CPU decode step at 800 cached tokens). `keys` and `values` are views of the filled part."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity, self.length = capacity, 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        n = key_states.shape[-2]
        if not self.is_initialized or self.length + n > self.buffers[0].shape[-2]:
            grown = [x.new_zeros(*x.shape[:2], max(self.capacity, self.length + n), x.shape[-1])
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


def shared_prefixes(prompts: list[list[int]], least: int = 64) -> list[int]:
    """Per prompt, the length of a token prefix it shares with other prompts of the call (0: none
    of at least `least` tokens). Sorted, prompts that share a prefix are neighbours; a run of
    neighbours whose common prefixes are all at least `least` long shares the shortest of them."""
    order = sorted(range(len(prompts)), key=lambda i: prompts[i])
    common = [common_prefix(prompts[a], prompts[b]) for a, b in zip(order, order[1:])]  # neighbours'
    shared, start = [0] * len(prompts), 0
    for end in range(1, len(order) + 1):
        if end == len(order) or common[end - 1] < least:  # the run order[start:end] ends here
            if end - start > 1:
                for i in order[start:end]:
                    shared[i] = min(common[start:end - 1])
            start = end
    return shared


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@torch.no_grad()
def prefill(model, tokens: list[int]) -> Reusable:
    """The keys and values of one token sequence, computed once, as a Reusable that `decode`
    copies into every row whose prompt starts with it."""
    cache = DynamicCache(config=model.config)
    ids = torch.tensor([tokens], device=next(model.parameters()).device)  # (1, n)
    model(input_ids=ids, use_cache=True, logits_to_keep=1, **{cache_argument(model): cache})
    return Reusable(list(tokens), [(layer.keys[0].clone(), layer.values[0].clone()) for layer in cache.layers])


def reused_prefix(past: Reusable | None, prompt: list[int]) -> int:
    """Prompt tokens whose keys and values `past` holds: the longest common token prefix, but
    at least one token is always prefilled (its logits start the completion)."""
    if past is None:
        return 0
    return min(common_prefix(past.tokens, prompt), len(prompt) - 1)


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


def position_bytes(cache) -> int:
    """Bytes of one row's keys and values at one position, over every layer."""
    return sum(2 * layer.keys.shape[1] * layer.keys.shape[3] * layer.keys.element_size() for layer in cache.layers)


def fill_past(layers: list[RoomyLayer], past: list[Reusable | None], kept: list[int], R: int) -> None:
    """Start every layer with each row's first kept[i] reused positions, left padded with zeros
    (masked out) to R, written straight into its buffers; each Reusable's tensors of a layer are
    dropped once copied, so the prefix is never held twice."""
    some = next(r for r in past if r is not None)
    for n, layer in enumerate(layers):
        k0, v0 = some.layers[n]
        layer.buffers = [x.new_zeros(len(past), x.shape[0], layer.capacity, x.shape[2]) for x in (k0, v0)]  # (B, h, capacity, d)
        for i, (r, k) in enumerate(zip(past, kept)):
            if k:
                layer.buffers[0][i, :, R - k:R] = r.layers[n][0][:, :k]
                layer.buffers[1][i, :, R - k:R] = r.layers[n][1][:, :k]
        for r in past:
            if r is not None:
                r.layers[n] = None
        layer.is_initialized, layer.device, layer.length = True, k0.device, R
        layer.keys, layer.values = (b[:, :, :R] for b in layer.buffers)  # (B, h, R, d)
