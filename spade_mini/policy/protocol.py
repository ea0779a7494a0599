"""What the roles and the update need of the model: the `Roles` protocol, in one place.

`Policy` (policy.py) is the implementation every run uses; the tests' scripted designer and
player (tests/scripted.py) write some replies themselves and hand the rest to a real Policy.
Every method below is required, and the code calls each as declared (no fallback). `update`
(reinforce.py) also takes a bare torch module, which it wraps in `BareModel`: the notebooks and
the loss tests train one.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, ContextManager, Protocol, runtime_checkable

import torch


@runtime_checkable
class Roles(Protocol):
    model: torch.nn.Module  # the weights both roles share
    tokenizer: Any
    plan: Any               # the memory plan (memplan.MemoryPlan), None without one
    adapters: Any           # (designer, agent) adapter names with --separate-adapters, else None

    def generate(self, chats: list[list[dict]], max_new_tokens: int, temperature: float | None = None,
                 tools: list[dict] | None = None) -> list: ...

    def continue_chats(self, chats: list[list[dict]], max_new_tokens: int, temperature: float | None = None,
                       keys: list | None = None) -> list: ...

    def generate_until(self, chats: list[list[dict]], max_new_tokens: int, temperature: float | None = None,
                       until=None, when: str | None = None) -> list: ...

    def count_tokens(self, text: str) -> int: ...

    def prompt_ids(self, chat: list[dict], tools: list[dict] | None = None) -> list[int]: ...

    def acting_as(self, role: str) -> ContextManager: ...

    def compute(self) -> ContextManager: ...

    def forget_chats(self) -> None: ...


@dataclass
class BareModel:
    """A torch module with no policy around it, as `update` trains it: no plan, one set of
    weights, float32 compute, nothing cached."""
    model: torch.nn.Module
    tokenizer: Any = None
    plan: Any = None
    adapters: Any = None

    def compute(self) -> ContextManager:
        return contextlib.nullcontext()

    def acting_as(self, role: str) -> ContextManager:
        return contextlib.nullcontext()

    def forget_chats(self) -> None:
        pass
