"""Rendering a chat into prompt tokens, safely.

The text of every message (and of tool specs) is untrusted (observations, hints, tool
descriptions and documents come from generated environments and the corpus), so before the chat
template runs, each place where a special token's text starts is broken by a zero-width space:
the template's own markers are the only special tokens in a prompt, and an observation holding
"<|im_end|><|im_start|>assistant" cannot forge a turn.
"""
from __future__ import annotations

import re

ZERO_WIDTH_SPACE = "\u200b"


def special_starts(tokenizer) -> re.Pattern | None:
    """A regex that matches the first character wherever the text of one of `tokenizer`'s special
    tokens starts (overlapping ones too); None when it has none of two characters or more."""
    texts = {t.content for t in tokenizer.added_tokens_decoder.values() if t.special}
    texts = sorted(texts | set(tokenizer.all_special_tokens), key=len, reverse=True)
    texts = [t for t in texts if len(t) > 1]
    return re.compile("(?=" + "|".join(map(re.escape, texts)) + ")(.)", re.S) if texts else None


def neutralized(value, starts: re.Pattern | None):
    """`value` (a str, or lists and dicts of them) with a zero-width space after the first
    character of every special token's text, so that no tokenizer reads it as that token."""
    if starts is None:
        return value
    if isinstance(value, str):
        return starts.sub(lambda m: m.group(1) + ZERO_WIDTH_SPACE, value)
    if isinstance(value, list):
        return [neutralized(v, starts) for v in value]
    if isinstance(value, dict):
        return {k: neutralized(v, starts) for k, v in value.items()}
    return value


def chat_ids(tokenizer, chat: list[dict], tools: list[dict] | None = None,
             starts: re.Pattern | None = None) -> list[int]:
    """The prompt tokens of `chat` (and `tools`) with a generation prompt: every message's
    content is `neutralized` first, so the only special tokens are the template's own."""
    starts = special_starts(tokenizer) if starts is None else starts
    safe = [{**m, "content": neutralized(m["content"], starts)} if "content" in m else m for m in chat]
    out = tokenizer.apply_chat_template(safe, tools=neutralized(tools, starts) or None,
                                        add_generation_prompt=True, tokenize=True, return_dict=True)
    return list(out["input_ids"])
