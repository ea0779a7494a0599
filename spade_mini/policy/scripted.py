"""The one set of stand-ins for the `Roles` protocol (protocol.py), for tests and notebooks: a
scripted designer and a scripted player, each around a real policy (the tiny model in the tests),
which supplies the tokens, the weights, the plan and everything the update needs. Each
implements every method of the protocol, so the library asks no fallback of them.

    ScriptedDesigner(policy, replies)          designer prompts get `replies` (a list taken in
                                               order, or a function of the chat); agent turns are
                                               the model's own
    ScriptedPlayer(policy, act, replies=())    and agent turns get `act` (one reply, or a
                                               function of the chat)

A designer chat is one with a system message (the designer's and the hint prompts);
an agent's chat has none. A reply that is None goes to the model (its prompt tokenized, its
reply sampled: the real generate path). With `model_when_greedy`, greedy `generate` calls (the
drift probe's) are the model's own: a script that draws random numbers then draws nothing at a
resume's probe, so a resumed run draws what the uninterrupted one drew.
"""
from __future__ import annotations

from spade_mini.policy.logprobs import PLAIN
from spade_mini.policy.policy import Completion


def is_designer(chat: list[dict]) -> bool:
    """A designer's chat (a system message first: design or hint); not an agent's."""
    return bool(chat) and chat[0]["role"] == "system"


class ScriptedDesigner:
    """Designer prompts get `replies` (a list in order, or a function of the chat; None: the
    model writes it), each ended (`cut`: each cut at the token budget instead); `calls` keeps
    every designer batch as (chats, max_new_tokens, temperature), `turns` every agent call's
    completions, and `sampling` says how each role's scripted replies were drawn."""

    def __init__(self, policy, replies=(), cut: bool = False, model_when_greedy: bool = False):
        self.policy, self.calls, self.turns, self.cut = policy, [], [], cut
        self.model_when_greedy = model_when_greedy
        self.replies = replies if callable(replies) else list(replies)
        self.sampling = {"designer": PLAIN, "agent": PLAIN}

    # --- the protocol's attributes: the policy's ---------------------------------------------------
    model = property(lambda self: self.policy.model)
    tokenizer = property(lambda self: self.policy.tokenizer)
    plan = property(lambda self: self.policy.plan, lambda self, plan: setattr(self.policy, "plan", plan))
    adapters = property(lambda self: self.policy.adapters)

    def __getattr__(self, name):  # counters and the rest of a Policy (pad_id, tokens_generated, ...)
        return getattr(self.policy, name)

    # --- the script --------------------------------------------------------------------------------
    def design(self, chat: list[dict]) -> str | None:
        return self.replies(chat) if callable(self.replies) else self.replies.pop(0)

    def act(self, chat: list[dict]) -> str | None:
        return None  # the model plays

    def reply(self, chat: list[dict], text: str) -> Completion:
        ids = self.policy.tokenizer(text, add_special_tokens=False)["input_ids"]
        sampling = self.sampling["designer" if is_designer(chat) else "agent"]
        if self.cut and is_designer(chat):
            return Completion(text, self.policy.prompt_ids(chat), ids, False, sampling)
        return Completion(text, self.policy.prompt_ids(chat), ids + [self.policy.pad_id], True, sampling)

    def _answer(self, chats, script, model_call) -> list[Completion]:
        """Each chat's scripted reply; the rows the script leaves to the model (None) in one call
        of `model_call(their row numbers)`."""
        texts = [script(c) for c in chats]
        rows = [i for i, t in enumerate(texts) if t is None]
        by_model = iter(model_call(rows) if rows else [])
        return [next(by_model) if t is None else self.reply(c, t) for c, t in zip(chats, texts)]

    # --- the protocol ------------------------------------------------------------------------------
    def generate(self, chats, max_new_tokens, temperature=None, tools=None):
        if temperature == 0 and self.model_when_greedy:
            return self.policy.generate(chats, max_new_tokens, temperature, tools)
        designer = [c for c in chats if is_designer(c)]
        if designer:
            self.calls.append((designer, max_new_tokens, temperature))
        def model(rows):
            return self.policy.generate([chats[i] for i in rows], max_new_tokens, temperature, tools)
        return self._answer(chats, lambda c: self.design(c) if is_designer(c) else self.act(c), model)

    def generate_until(self, chats, max_new_tokens, temperature=None, until=None, when=None):
        return self.generate(chats, max_new_tokens, temperature)

    def continue_chats(self, chats, max_new_tokens, temperature=None, keys=None):
        def model(rows):  # each episode's keys and values kept between its turns, as the Policy keeps them
            return self.policy.continue_chats([chats[i] for i in rows], max_new_tokens, temperature,
                                              keys=None if keys is None else [keys[i] for i in rows])
        self.turns.append(self.agent_turns(self._answer(chats, self.act, model)))
        return self.turns[-1]

    def agent_turns(self, completions: list[Completion]) -> list[Completion]:
        return completions

    def prompt_ids(self, chat, tools=None):
        return self.policy.prompt_ids(chat, tools)

    def count_tokens(self, text):
        return self.policy.count_tokens(text)

    def acting_as(self, role):
        return self.policy.acting_as(role)

    def compute(self):
        return self.policy.compute()

    def forget_chats(self):
        self.policy.forget_chats()


class ScriptedPlayer(ScriptedDesigner):
    """And agent turns get `act`: one fixed reply, or a function of the chat (None: the model).
    `finished` True or False marks every agent turn so (None: as written; a scripted one ends)."""

    def __init__(self, policy, act, replies=(), finished: bool | None = None, model_when_greedy: bool = False):
        super().__init__(policy, replies, model_when_greedy=model_when_greedy)
        self._act, self.finished = act, finished

    def act(self, chat):
        return self._act(chat) if callable(self._act) else self._act

    def agent_turns(self, completions):
        for c in completions:
            c.finished = c.finished if self.finished is None else self.finished
        return completions
