"""How likely the policy finds given tokens: the sampling distribution, and token log-probs.

`Sampling` says how tokens were drawn (temperature, then top-k, then top-p, as transformers
applies them); `sampled_logprobs` is log pi(token) under exactly that distribution, and
`token_logprobs` gives the log-probs of the completion tokens of a batch of (prompt, completion) pairs with it.
Taking each sample's log-probs under the Sampling that drew it is what makes the update on-policy.

Memory is bounded: the (B, C, V) logits of a micro-batch are never held at once. One forward
gives the final hidden states (B, T, H); the output head is applied to at most
LOGIT_CHUNK_ELEMENTS / V positions at a time, and in the backward pass each chunk's logits are
recomputed from its hidden states (activation checkpointing), so the peak is one chunk's
(n, V) tensors instead of (B, C, V) several times over: at V = 151,936 (Qwen3) one 4096-token
completion's fp32 log-softmax alone is 2.5 GB. Padding positions get no log-prob.

Shapes (legend: spade_mini/__init__.py): B, T, C, H, V, N, n, L, k.
Omitted: fused kernels (Liger's fused linear cross-entropy does the same thing in Triton).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint

LOGIT_CHUNK_ELEMENTS = 2**24  # logits held at once: 64 MB in fp32, 110 positions at V = 151,936


@dataclass(frozen=True)
class Sampling:
    """How tokens were drawn: softmax(logits / temperature), cut to the top_k most likely tokens
    (0: no cut), then to the smallest set holding top_p of the probability (1.0: no cut).
    Log-probs under the same settings are what makes the update on-policy."""
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0


PLAIN = Sampling()  # the untruncated softmax: supervised targets' log-probs use it


def last_position(device) -> torch.Tensor:
    """`logits_to_keep` for the last position only, as an index: an int slices the final hidden
    states into a non-contiguous (B, 1, H) view, which torch's matmul cannot fold into one matrix
    when nothing requires a gradient, so it multiplies by B expanded copies of the output head
    (measured on a CPU: B x V x H bytes, 0.6 GB for 4 rows of a 151,936 x 512 bf16 head). An index
    gathers a contiguous (B, 1, H) instead: the same logits, no copy."""
    return torch.tensor([-1], device=device)


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
    left padded, so every completion ends at the last position; only completion positions go
    through the output head, in chunks (see the module docstring).
    """
    samplings = samplings or [PLAIN] * len(prompts)
    out: list[torch.Tensor] = []
    device = next(model.parameters()).device
    for start in range(0, len(prompts), micro_batch):
        ps, cs = prompts[start:start + micro_batch], completions[start:start + micro_batch]
        ss = samplings[start:start + micro_batch]
        C = max(len(c) for c in cs)
        if C == 0:  # no completion tokens
            out.extend(torch.zeros(0, device=device) for _ in cs)
            continue
        ids, mask = left_pad([p + c for p, c in zip(ps, cs)], pad_id, device)  # (B, T), (B, T)
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, T) real tokens count from 0
        hidden, head, V = final_hidden(model, ids, mask, position_ids)  # (B, T, H)
        chunk = max(1, LOGIT_CHUNK_ELEMENTS // V)  # positions whose logits are held at once
        T = ids.shape[1]
        hidden = hidden[:, T - C - 1:T - 1]  # (B, C, H): position j predicts token j + 1
        targets = ids[:, T - C:]  # (B, C)
        lengths = torch.tensor([len(c) for c in cs], device=device)  # (B,)
        kept = torch.arange(C, device=device) >= (C - lengths)[:, None]  # (B, C) completion positions
        rows: list[torch.Tensor | None] = [None] * len(cs)
        for sampling in dict.fromkeys(ss):  # each distinct Sampling once, in order
            group = [i for i, s in enumerate(ss) if s == sampling]
            keep = kept[group]  # (b, C)
            logp = chunked_logprobs(head, hidden[group][keep], targets[group][keep], sampling, chunk)  # (N,)
            for i, part in zip(group, logp.split([len(cs[i]) for i in group])):
                rows[i] = part  # row-major selection: row i's L positions, in order
        out.extend(rows)
    return out


class Head:
    """How the model turns final hidden states (..., H) into logits (..., V): its output layer,
    then Gemma-style tanh soft-capping when the config asks for it. `module` None means the
    "hidden states" are already logits (the fallback)."""

    def __init__(self, module: torch.nn.Module | None, cap: float | None):
        self.module, self.cap = module, cap

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        logits = h if self.module is None else self.module(h)  # (..., V)
        return logits if self.cap is None else torch.tanh(logits / self.cap) * self.cap

    @property
    def frozen_linear(self) -> bool:
        """A plain linear layer without trainable weights (LoRA leaves the head alone)."""
        m = self.module
        return type(m) is torch.nn.Linear and not any(p.requires_grad for p in m.parameters())


def final_hidden(model, ids: torch.Tensor, mask: torch.Tensor, position_ids: torch.Tensor):
    """(hidden (B, T, H), head, V) from one forward: the decoder's last hidden states, the Head
    that turns them into the model's logits, and the vocabulary size.

    The forward computes logits at the last position only, and those logits check that
    head(hidden) reproduces them. A model whose forward changes its logits in another way
    (e.g. a fixed scale) fails the check, and gets a second, (B, T, V) forward instead.
    """
    captured = []
    hook = model.get_decoder().register_forward_hook(lambda module, args, output: captured.append(output[0]))
    try:
        last = model(input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=False,
                     logits_to_keep=last_position(ids.device)).logits  # (B, 1, V)
    finally:
        hook.remove()
    hidden = captured[-1]  # (B, T, H)
    head = Head(model.get_output_embeddings(), getattr(model.config, "final_logit_softcapping", None))
    with torch.no_grad():  # (B, H), not a (B, 1, H) slice: see last_position
        # within a few roundings of the compute dtype: in bf16 another matmul shape may round
        # logits one step apart (0.125 at 20), while a model's own logit scale moves them far more
        tol = max(1e-3, 4 * torch.finfo(last.dtype).eps)
        same = torch.allclose(head(hidden[:, -1]).float(), last[:, -1].float(), rtol=tol, atol=tol)
    if same:
        return hidden, head, last.shape[-1]
    full = model(input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=False).logits  # (B, T, V)
    return full, Head(None, None), last.shape[-1]


def chunked_logprobs(head: Head, hidden: torch.Tensor, targets: torch.Tensor, sampling: Sampling,
                     n: int) -> torch.Tensor:
    """sampled_logprobs(head(hidden), targets) for hidden (N, H) and targets (N,), computed n
    positions at a time. With gradients, a frozen linear head gets its hidden-state gradient in
    the forward pass (FrozenHeadLogprobs); any other head recomputes each chunk's logits in the
    backward pass (activation checkpointing). Either way no chunk's logits are kept."""
    if len(targets) == 0:
        return hidden.sum(-1)  # (0,): no positions, still part of the graph
    parts = []
    for a in range(0, len(targets), n):
        h, t = hidden[a:a + n], targets[a:a + n]  # (n, H), (n,)
        if not torch.is_grad_enabled():
            parts.append(sampled_logprobs(head(h), t, sampling))  # (n,)
        elif head.frozen_linear:
            parts.append(FrozenHeadLogprobs.apply(h, t, head, sampling))  # (n,)
        else:
            parts.append(checkpoint(chunk_logprobs, head, h, t, sampling, use_reentrant=False))  # (n,)
    return torch.cat(parts)  # (N,)


def chunk_logprobs(head: Head, hidden: torch.Tensor, targets: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    return sampled_logprobs(head(hidden), targets, sampling)  # (n,)


class FrozenHeadLogprobs(torch.autograd.Function):
    """sampled_logprobs(head(hidden), targets) through a frozen linear head, whose gradient
    with respect to hidden (n, H) is formed in the forward pass, while the sampler's
    distribution q is at hand:

        d logp_t / d hidden_t = ((onehot(target_t) - q_t) / T * d cap(x) / dx) @ W     (H,)

    The backward only scales those rows by the incoming gradient. This costs one more (n, V) x
    (V, H) matmul in the forward and none in the backward: the same work as keeping the logits,
    without keeping them, and a third less than recomputing them."""

    @staticmethod
    def forward(ctx, hidden, targets, head: Head, sampling: Sampling):
        m = head.module
        raw = torch.nn.functional.linear(hidden, m.weight, m.bias)  # (n, V)
        z = sampler_logits(raw if head.cap is None else torch.tanh(raw / head.cap) * head.cap, sampling,
                           keep=targets)  # (n, V)
        logq = z.log_softmax(-1)  # (n, V), -inf off the support
        rows = torch.arange(len(targets), device=targets.device)  # (n,)
        if ctx.needs_input_grad[0]:
            dz = logq.exp().mul_(-1.0 / sampling.temperature)  # (n, V): -q / T
            dz[rows, targets] += 1.0 / sampling.temperature  # (onehot - q) / T
            if head.cap is not None:
                dz *= 1 - torch.tanh(raw.float() / head.cap) ** 2
            ctx.save_for_backward(dz.to(m.weight.dtype) @ m.weight)  # (n, H)
            ctx.hidden_dtype = hidden.dtype
        return logq[rows, targets]  # (n,)

    @staticmethod
    def backward(ctx, grad):
        (dhidden,) = ctx.saved_tensors  # (n, H)
        return (grad[:, None] * dhidden).to(ctx.hidden_dtype), None, None, None


def sampler_logits(logits: torch.Tensor, sampling: Sampling, keep: torch.Tensor | None = None) -> torch.Tensor:
    """(L, V) float32 logits of the sampler `sampling` describes: logits (L, V) / temperature,
    -inf outside its top-k / top-p support; the tokens `keep` (L,) stay in it whatever rounding
    says (a token that has a log-prob here was drawn, so it was inside)."""
    z = logits.float()  # (L, V)
    z = z / sampling.temperature if sampling.temperature != 1.0 else z  # (L, V)
    if sampling.top_k or sampling.top_p < 1.0:
        support = sampling_support(z.detach(), sampling)  # (L, V)
        if keep is not None:
            support[torch.arange(len(keep), device=keep.device), keep] = True
        z = z.masked_fill(~support, float("-inf"))  # (L, V)
    return z


def sampled_logprobs(logits: torch.Tensor, targets: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """log pi(target) for logits (L, V) and targets (L,) under the sampler `sampling` describes:
    softmax(logits / temperature) restricted to its top-k / top-p support and renormalised.

    This is exactly the distribution `generate` draws from (transformers applies temperature,
    then top-k, then top-p), so these log-probs are on-policy: the probability ratio between the
    sampler and them is 1 up to float rounding. The support is treated as fixed (it changes only in
    steps, so it has no gradient), and the drawn token is always inside it, which guards against
    rounding differences between the cached forward of `generate` and this full forward.
    """
    z = sampler_logits(logits, sampling, keep=targets)  # (L, V)
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
