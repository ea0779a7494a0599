"""The agent: play environments turn by turn, all episodes in lockstep.

`play_episodes(policy, jobs, ...)` starts one sandboxed environment per job, and then, each
turn, puts every live episode's chat into ONE batched `continue_chats` call (finished episodes
drop out; within the call each row stops at its EOS and each episode reuses the keys and values
of its previous turn; a policy without that method gets `generate`). Batching is the main speed
lever even on a CPU. A job names the environment source, the
seed, and the arm: `no_hint` (trained) or `hint` (the privileged hint is appended to the first
observation; never trained). The same seeds are played in both arms, so regret is a paired
difference.

Actions: in games the agent answers `\\boxed{...}`; the last box is passed to `step` re-wrapped
as `\\boxed{x}`. In tool use the first `<tool_call>...</tool_call>` or `<answer>...</answer>`
block is passed on. Without either, the raw text (truncated) is passed, and the environment
decides what that means. A `SandboxError` ends only its own episode, with the reason recorded.
Omitted: rewards for the designer (reward/) and anything about training (reinforce.py).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from spade_mini.config import DEFAULTS
from spade_mini.policy import PLAIN, Sampling, acting_as, continue_chats
from spade_mini.reward import episode_return
from spade_mini.sandbox import SandboxedEnv, SandboxError, SandboxLimits, start_envs

# The paper's game prompt ("reasoning"), and a short one for small models ("answer"): asked to
# reason first, the 135M embedded model rarely ends a turn within a CPU-sized token budget.
GAME_TEMPLATES = {
    "reasoning": ("You are playing a language game. Make valid actions to win.\nObservation: {obs}\n"
                  "Please reason step by step, and put your final answer within \\boxed{{}}."),
    "answer": ("You are playing a language game. Make valid actions to win.\nObservation: {obs}\n"
               "Reply with your action only, inside \\boxed{{}}."),
}
TOOL_TEMPLATE = ("You can use these tools:\n{tools}\n\nCall one tool per turn as "
                 '<tool_call>{{"name": "...", "arguments": {{...}}}}</tool_call>, and finish with '
                 "<answer>...</answer>.\n\nTask: {obs}")
RAW_ACTION_CHARS = 2000  # an action without a box or tag is passed on truncated to this


@dataclass
class Job:
    source: str
    seed: int
    arm: str = "no_hint"           # "no_hint" | "hint"
    hint: str | None = None        # hint text; None in the hint arm means: ask the env's hint()
    design_id: str = ""


@dataclass
class Turn:
    prompt_ids: list[int]          # the chat so far, as the model saw it
    completion_ids: list[int]      # what the agent generated (the only tokens that are trained)
    action: str                    # what was passed to step()
    reward: float
    sampling: Sampling = PLAIN     # how completion_ids were drawn (the update's log-probs use it)
    finished: bool = True          # the turn ended with EOS (else it was cut at the budget)


@dataclass
class Episode:
    job: Job
    turns: list[Turn] = field(default_factory=list)
    messages: list[dict] = field(default_factory=list)  # the readable transcript
    terminated: bool = False
    end_reason: str = ""           # won/lost, turn_cap, truncated, no_eos, context, or the error
    ret: float = 0.0
    tools: list[dict] | None = None
    notes: list[str] = field(default_factory=list)  # what went wrong without ending the episode
    hint_shown: bool = False       # a hint was shown (hint arm, and a hint existed)
    crashed: str | None = None     # "reset" or "step" when the environment failed, else None

    @property
    def rewards(self) -> list[float]:
        return [t.reward for t in self.turns]

    @property
    def completion_mask(self) -> list[list[int]]:
        """Per turn, 1 for every generated token: prompt, observation and hint tokens are never
        in `completion_ids`, so they are never trained."""
        return [[1] * len(t.completion_ids) for t in self.turns]

    def transcript(self) -> str:
        lines = [f"[note] {n}" for n in self.notes] + [f"[{m['role']}] {m['content']}" for m in self.messages]
        return "\n".join(lines + [f"[end] {self.end_reason}, return {self.ret:+.2f}"])


def extract_action(text: str, tool_use: bool) -> str:
    """The action to pass to step(): a tool call or answer block, else the last \\boxed{}, else
    the raw text (truncated)."""
    if tool_use:
        m = re.search(r"<(tool_call|answer)>(.*?)</\1>", text, re.DOTALL)
        if m:
            return m.group(0).strip()
    box = last_boxed(text)
    if box is not None:
        return f"\\boxed{{{box}}}"
    return text.strip()[:RAW_ACTION_CHARS]


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...}, with nested braces matched."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j].strip()
    return None  # unclosed box: no answer


def first_message(obs: str, tools: list[dict] | None, hint: str | None,
                  template: str = DEFAULTS.agent_template) -> str:
    """The episode's first user message: the template around the first observation (and hint)."""
    if hint:
        obs = f"{obs}\n\nHINT: {hint}"
    if tools:
        return TOOL_TEMPLATE.format(tools=json.dumps(tools, indent=None), obs=obs)
    return GAME_TEMPLATES[template].format(obs=obs)


def play_settings(cfg) -> dict:
    """The keyword arguments of `play_episodes` that a Config sets: training, the fixed-set curve
    and held-out evaluation play under the same rules."""
    return dict(max_turns=cfg.max_turns, max_new_tokens=cfg.turn_max_new_tokens,
                max_context_tokens=cfg.max_context_tokens, limits=SandboxLimits(call_timeout_s=cfg.step_timeout_s),
                return_mode=cfg.return_mode, crash_reward=cfg.crash_reward, template=cfg.agent_template)


def play_episodes(policy, jobs: list[Job], *, max_turns: int = DEFAULTS.max_turns,
                  max_new_tokens: int = DEFAULTS.turn_max_new_tokens,
                  max_context_tokens: int = DEFAULTS.max_context_tokens, limits: SandboxLimits | None = None,
                  return_mode: str = DEFAULTS.return_mode, crash_reward: float = DEFAULTS.crash_reward,
                  temperature: float | None = None, on_turn=None,
                  template: str = DEFAULTS.agent_template) -> list[Episode]:
    """Play every job to its end, advancing all live episodes one turn per batched call."""
    episodes = [Episode(job=j) for j in jobs]
    envs: list[SandboxedEnv | None] = [None] * len(jobs)
    live: list[int] = []
    try:
        started = start_envs([ep.job.source for ep in episodes], limits=limits)  # load in parallel
        envs = [env if isinstance(env, SandboxedEnv) else None for env in started]
        for i, ep in enumerate(episodes):
            try:
                if envs[i] is None:
                    raise started[i]  # it did not start: recorded like a failed reset
                obs, info = envs[i].reset(seed=ep.job.seed)
                hint = ep.job.hint if ep.job.arm == "hint" else None  # the trained arm never sees it
                if ep.job.arm == "hint" and hint is None and envs[i].has_hint:
                    try:
                        hint = envs[i].hint()
                    except SandboxError as e:  # a broken hint() must not end the episode at -1
                        ep.notes.append(f"hint failed: {type(e).__name__}: {e}")
                        obs, info = envs[i].reset(seed=ep.job.seed)  # the error recycled the child
                # without a hint, the hint arm plays unhinted (and measures no regret)
                ep.hint_shown = bool(hint)
                ep.tools = info.get("tools") or None
                ep.messages.append({"role": "user", "content": first_message(obs, ep.tools, hint, template)})
                live.append(i)
            except SandboxError as e:
                _end(ep, f"reset failed: {type(e).__name__}: {e}", crash="reset", crash_reward=crash_reward)
        for turn in range(max_turns):
            if not live:
                break
            prompts = {i: policy.prompt_ids(episodes[i].messages) for i in live}
            for i in [i for i in live if len(prompts[i]) + max_new_tokens > max_context_tokens]:
                _end(episodes[i], "context")  # the next turn could not fit: truncated
                live.remove(i)
            if not live:
                break
            with acting_as(policy, "agent"):
                outs = continue_chats(policy, [episodes[i].messages for i in live], max_new_tokens,
                                      temperature=temperature, keys=[id(episodes[i]) for i in live])
            still = []
            for i, out in zip(live, outs):
                ep = episodes[i]
                ep.messages.append({"role": "assistant", "content": out.text})
                action = extract_action(out.text, tool_use=ep.tools is not None)
                ep.turns.append(Turn(prompts[i], out.completion_ids, action, 0.0, out.sampling,
                                     out.finished))
                if not out.finished:  # a turn that never stopped is cut: nothing reaches the env
                    _end(ep, "no_eos")
                    continue
                try:
                    obs, reward, terminated, truncated, _ = envs[i].step(action)
                except SandboxError as e:
                    _end(ep, f"step failed: {type(e).__name__}: {e}", crash="step", crash_reward=crash_reward)
                    continue
                ep.turns[-1].reward = reward
                if terminated or truncated:
                    ep.messages.append({"role": "user", "content": obs})
                    _end(ep, ("won" if reward > 0 else "lost") if terminated else "truncated",
                         terminated=terminated)
                elif turn == max_turns - 1:
                    _end(ep, "turn_cap")
                else:
                    ep.messages.append({"role": "user", "content": obs})
                    still.append(i)
            live = still
            if on_turn:
                on_turn(turn, len(live))
    finally:
        for env in envs:
            if env is not None:
                env.close()
    for ep in episodes:
        if ep.crashed is None:
            ep.ret = episode_return(ep.rewards, ep.terminated, mode=return_mode)
    return episodes


def _end(ep: Episode, reason: str, *, terminated: bool = False, crash: str | None = None,
         crash_reward: float = DEFAULTS.crash_reward) -> None:
    ep.end_reason, ep.terminated = reason, terminated
    if crash:
        ep.crashed, ep.ret = crash, crash_reward
        ep.messages.append({"role": "user", "content": f"[environment error] {reason}"})
