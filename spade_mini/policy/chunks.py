"""Cutting work into pieces within a memory plan (memplan.py): generation calls into chunks of
rows within their cache positions, and an update into micro-batches within their tokens. Both put
the longest rows first, so that rows of a piece are alike and padding stays small; both refuse,
in one sentence naming the flag, a single row that cannot fit at all.
"""
from __future__ import annotations

from spade_mini.policy.memplan import PlanError


def chunk_rows(prefix: list[int], rest: list[int], new_tokens: int, positions: int,
               row_positions: int = 0) -> list[list[int]]:
    """Row indices in chunks whose cache holds at most `positions` positions, padding included:
    b rows with reused prefixes p and prompt rests s hold b x (max p + max s + new_tokens), and
    each row also counts `row_positions`. All rows in their order when they fit at once; else
    longest first, so that rows of a chunk are alike and padding stays small."""
    n = len(rest)
    if not n:
        return []
    if n * (max(prefix) + max(rest) + new_tokens + row_positions) <= positions:
        return [list(range(n))]
    chunks: list[list[int]] = []
    chunk, P, S = [], 0, 0
    for i in sorted(range(n), key=lambda i: -(prefix[i] + rest[i])):
        p, s = max(P, prefix[i]), max(S, rest[i])
        if chunk and (len(chunk) + 1) * (p + s + new_tokens + row_positions) > positions:
            chunks.append(chunk)
            chunk, p, s = [], prefix[i], rest[i]
        need = p + s + new_tokens + row_positions
        if not chunk and need > positions:
            raise PlanError(f"one row of {p + s:,} prompt and {new_tokens:,} new tokens needs {need:,} "
                            f"cache positions, more than the {positions:,} a generation chunk may hold here; "
                            "lower this phase's budget (--design-max-new-tokens, --hint-max-new-tokens, "
                            "--turn-max-new-tokens or --max-context-tokens) or raise --gpu-memory.")
        chunk.append(i)
        P, S = p, s
    return chunks + [chunk]


def pack_by_tokens(lengths: list[int], tokens: int, max_rows: int, limit: int = 0) -> list[list[int]]:
    """Indices in micro-batches of at most `max_rows` rows and `tokens` padded tokens (rows x
    longest), longest first: each micro-batch's first row is its longest. A row longer than
    `tokens` but within `limit` (a plan by need's cap) gets a micro-batch of its own."""
    batches: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if batches and len(batches[-1]) < max_rows and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= tokens:
            batches[-1].append(i)
        elif lengths[i] > max(tokens, limit):
            raise PlanError(f"a sample of {lengths[i]:,} tokens is longer than the update's {tokens:,} tokens "
                            "per micro-batch; raise --update-tokens or --gpu-memory, or lower "
                            "--max-context-tokens or --design-max-new-tokens.")
        else:
            batches.append([i])
    return batches
