"""Data parallelism for the SPADE loop on torch.distributed: the same loop on every process.

    torchrun --standalone --nproc-per-node 4 train.py --preset gpu    # one node, 4 GPUs (NCCL)
    torchrun --standalone --nproc-per-node 2 train.py --device cpu    # CPU processes (gloo)

`init` reads torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT); without
it (plain `python train.py`) there is one process and every helper here is a no-op that returns
its input, so a one-process run takes exactly the same code path.

How the loop divides an iteration: each rank designs and plays a contiguous block of the N
design slots (`share`) with random streams of its own (`rank_seed`); a design's paired seeds
stay on the rank that plays it. What needs the whole batch is gathered as small Python records,
never token tensors: the designer's per-skill rewards (its baseline spans ranks), the
learning-potential returns, the memory records, the per-role token counts that divide the loss,
and the metrics row. Gathers concatenate in rank order, which is slot order, so the gathered
lists are the lists one process would have built.

The update is an explicit all-reduce (sum) of the trainable gradients after every rank has
accumulated its micro-batches, with the loss divided by the WHOLE batch's token counts; the sum
is then the gradient of the whole batch, and one optimizer step on identical gradients keeps
the weights identical everywhere (`check_identical` verifies it bit for bit). Not DDP, because
here ranks hold different numbers of micro-batches per role, sometimes none (DDP all-reduces in
every backward and needs every rank to run the same ones, or `join()`), and with separate
adapters a micro-batch touches one adapter only (DDP would need find_unused_parameters). One
all-reduce per update is what DDP's `no_sync()` plus a last backward would do; it does not
overlap communication with the backward, which costs little when one update follows minutes of
generation.

Omitted, and how it would fit:
- FSDP, for full fine-tuning of a model too large for one device: wrap the transformer blocks
  with `fully_shard` (FSDP2) and skip `all_reduce_gradients` (FSDP reduce-scatters gradients in
  the backward; set its divide factor to 1 so it sums, as the global token counts expect). Every
  rank must then run the same number of forward/backward passes: pad the short ranks with
  zero-advantage micro-batches. Generation needs the full weights (unshard around `generate`,
  or hand them to an inference engine), and checkpoints become torch.distributed.checkpoint
  shards, since no rank holds the whole state.
- Duplicates across ranks within one iteration: each rank's novelty guard sees the memory and
  its own earlier slots, so a design copying another rank's design of the same iteration is only
  caught from the next iteration on, through the memory.
- Multi-node resume needs the run directory on storage every node can read (rank 0 writes it;
  every rank reads its checkpoint). The warm start needs no shared storage: rank 0 builds or
  loads it and broadcasts the weights.
"""
from __future__ import annotations

import hashlib
import os
from datetime import timedelta

import torch
import torch.distributed as dist

# Collectives wait this long for the slowest rank: rank 0 warm-starts alone (minutes on a CPU)
# while the others wait for its weights. torchrun ends every rank when one fails.
TIMEOUT = timedelta(hours=2)
BUCKET_ELEMENTS = 2**24  # gradients all-reduced per message (64 MB of float32)


class DistributedError(RuntimeError):
    """A data-parallel run that cannot start or that diverged; the message says what to do."""


def rank() -> int:
    return int(os.environ.get("RANK", 0))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", 1))


def is_main() -> bool:
    """Rank 0 owns the run directory, the checkpoints, the warm start and what is printed."""
    return rank() == 0


def init(device: str = "auto") -> None:
    """Join torchrun's process group: NCCL on CUDA (one GPU per process, by LOCAL_RANK), gloo on
    CPU. Nothing to do in a single process, or when the group exists already."""
    if world_size() == 1 or dist.is_initialized():
        return
    cuda = device != "cpu" and torch.cuda.is_available()
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", 0))
        if local >= torch.cuda.device_count():
            raise DistributedError(f"process {local} of this node has no GPU of its own (there are "
                                   f"{torch.cuda.device_count()}); start at most that many with "
                                   "--nproc-per-node, or add --device cpu.")
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo", timeout=TIMEOUT)


def close() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def rank_seed(seed: int) -> int:
    """This rank's seed: `seed` itself on rank 0 (so a one-process run is unchanged), and
    `seed + rank` elsewhere, so ranks draw different designs, seeds and samples."""
    return seed + rank()


def share(n: int) -> range:
    """This rank's slots out of n: a contiguous block, blocks in rank order (sizes differ by at
    most one). Concatenating every rank's results in rank order gives slot order."""
    return range(n * rank() // world_size(), n * (rank() + 1) // world_size())


# --- small Python records ----------------------------------------------------------------------

def all_gather(obj) -> list:
    """One picklable object from every rank, in rank order ([obj] in one process)."""
    if world_size() == 1:
        return [obj]
    out = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def gather_concat(items: list) -> tuple[list, slice]:
    """Every rank's `items` concatenated in rank order, and the slice holding this rank's own."""
    parts = all_gather(items)
    start = sum(len(p) for p in parts[:rank()])
    return [x for p in parts for x in p], slice(start, start + len(items))


def gather_by_key(lists: dict[str, list]) -> dict[str, list]:
    """Each key's lists from every rank, concatenated in rank order (one collective for all)."""
    parts = all_gather(lists)
    return {key: [x for p in parts for x in p[key]] for key in lists}


def sum_over_ranks(values: tuple) -> tuple:
    """The elementwise sum of a tuple of numbers over all ranks."""
    return tuple(sum(column) for column in zip(*all_gather(tuple(values))))


def from_main(obj):
    """Rank 0's `obj` on every rank (e.g. a time-stamped run name)."""
    if world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


# --- weights and gradients ---------------------------------------------------------------------

def broadcast_parameters(params: list[torch.nn.Parameter]) -> None:
    """Copy rank 0's values of `params` to every rank (after its warm start or checkpoint load)."""
    if world_size() == 1:
        return
    with torch.no_grad():
        for p in params:
            dist.broadcast(p.data, src=0)


def all_reduce_gradients(params: list[torch.nn.Parameter]) -> None:
    """Sum every gradient over all ranks, in place. With each rank's loss divided by the whole
    batch's token counts, the sum is the gradient of the whole batch's loss.

    A gradient that only some ranks have (they had samples of that role) counts as zeros on the
    others; one that no rank has stays None, so the optimizer skips that parameter as it does in
    one process (with separate adapters, a role without live samples)."""
    if world_size() == 1 or not params:
        return
    has = torch.tensor([float(p.grad is not None) for p in params], device=params[0].device)  # (P,)
    dist.all_reduce(has)
    live = [p for p, n in zip(params, has.tolist()) if n > 0]
    for p in live:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    for bucket in _buckets(live):
        flat = torch.cat([p.grad.reshape(-1) for p in bucket])  # (E,) one message per bucket
        dist.all_reduce(flat)
        start = 0
        for p in bucket:
            p.grad.copy_(flat[start:start + p.numel()].view_as(p.grad))
            start += p.numel()


def _buckets(params: list[torch.nn.Parameter]) -> list[list[torch.nn.Parameter]]:
    """Runs of parameters of one dtype and device, each up to BUCKET_ELEMENTS (or one tensor)."""
    out: list[list[torch.nn.Parameter]] = []
    size = 0
    for p in params:
        fits = out and size + p.numel() <= BUCKET_ELEMENTS
        if not (fits and (p.dtype, p.device) == (out[-1][0].dtype, out[-1][0].device)):
            out.append([])
            size = 0
        out[-1].append(p)
        size += p.numel()
    return out


def check_identical(params: list[torch.nn.Parameter], when: str, *state) -> None:
    """Raise DistributedError unless every rank holds bit-identical `params` (and an equal repr
    of `state`, e.g. the memory records): the debug check of --check-weights-every."""
    digest = hashlib.sha256(repr(state).encode())  # repr, not pickle: pickles depend on object identity
    for p in params:
        digest.update(p.detach().reshape(-1).view(torch.uint8).cpu().numpy().tobytes())
    digests = all_gather(digest.hexdigest()[:16])
    if len(set(digests)) > 1:
        raise DistributedError(f"the processes no longer hold the same weights and state {when} "
                               f"(checksums by rank: {', '.join(digests)}); the data-parallel update "
                               "has diverged: rerun with one process to compare.")
