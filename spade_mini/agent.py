"""The agent: play environments turn by turn, all episodes in lockstep.

`play_episodes(policy, jobs, settings)` starts one sandboxed environment per job, and then, each
turn, puts every live episode's chat into ONE batched `continue_chats` call (finished episodes
drop out; within the call each row stops at its EOS and each episode reuses the keys and values
of its previous turn). Batching is the main speed lever even on a CPU. A job names the
environment source, the seed, the level and the arm: `no_hint` (trained) or `hint` (the
privileged hint, read beforehand outside the children that play, is appended to the first
observation; never trained). A `Playable` (an environment an iteration plays) makes its jobs:
fresh seeds for the no-hint arm, or the same seeds in both arms, so regret is a paired
difference, and a child that plays is asked the same calls in either arm: it cannot tell which
arm it is in. `PlaySettings` are the rules every play follows (training, the curve, evaluation).

The children of a turn are reset and stepped at once (sandbox.reset_envs / step_envs), so a
turn waits for its slowest child, not for the sum; and each design has `design_budget_s`
seconds of environment time over its whole play (a turn charges a design its slowest reply).
A design that uses it up is cut: its live episodes end as crashed in step(), which makes the
design invalid (stage `play`), so one slow design costs the batch at most its budget.

Actions: in games the agent answers `\\boxed{...}`; the last box is passed to `step` re-wrapped
as `\\boxed{x}`. In tool use the first `<tool_call>...</tool_call>` or `<answer>...</answer>`
block is passed on. Without either, the raw text (truncated) is passed, and the environment
decides what that means. A `SandboxError` ends only its own episode, with the reason recorded.
Omitted: rewards for the designer (reward/) and anything about training (reinforce.py).
"""
from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field

from spade_mini.config import DEFAULTS
from spade_mini.envs.actions import RAW_ACTION_CHARS, extract_action, last_boxed  # noqa: F401  (the agent's face)
from spade_mini.policy import PLAIN, Sampling
from spade_mini.reward import episode_return
from spade_mini.sandbox import (EnvTimeout, SandboxedEnv, SandboxError, SandboxLimits, reset_envs,
                                start_envs, step_envs)

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
DESIGN_BUDGET_S = 10.0  # environment time one design may make a batch of play wait, in all


@dataclass
class Job:
    source: str
    seed: int
    arm: str = "no_hint"           # "no_hint" | "hint"
    hint: str | None = None        # the hint shown in the hint arm (None: the arm plays unhinted)
    design_id: str = ""
    level: int = 0                 # the environment's difficulty level (reset's options={"level": n})

    @property
    def group(self) -> str:
        """The baseline group of its returns: one environment at one level."""
        return self.design_id if self.level == 0 else f"{self.design_id}@{self.level}"


@dataclass
class Playable:
    """An environment the agent plays this iteration: a new design, or one of the pool's."""
    id: str
    skill: str
    setting: str
    source: str
    design: object | None = None   # the Design, when the designer wrote it this iteration
    plays: int = 0                 # its no-hint episodes this iteration
    level: int = 0                 # the difficulty level it is played at
    levels: int = 1                # how many it has

    def jobs(self, rng: random.Random) -> list[Job]:
        """Its `plays` no-hint episodes, each on a fresh seed from `rng`, at its level."""
        return [Job(self.source, rng.randrange(2**31), "no_hint", None, self.id, self.level) for _ in range(self.plays)]

    def paired_jobs(self, seeds: list[int], hints: list[str | None]) -> list[Job]:
        """Both arms on the same seeds (a seed without a hint plays the no-hint arm only)."""
        jobs = []
        for seed, hint in zip(seeds, hints):
            jobs.append(Job(self.source, seed, "no_hint", None, self.id, self.level))
            if hint is not None:
                jobs.append(Job(self.source, seed, "hint", hint, self.id, self.level))
        return jobs


@dataclass(frozen=True)
class PlaySettings:
    """How every episode is played (settings.play_settings builds it from a Config): training,
    the curve and held-out evaluation play under the same rules."""
    max_turns: int = DEFAULTS.max_turns
    max_new_tokens: int = DEFAULTS.turn_max_new_tokens  # tokens of one agent turn
    max_context_tokens: int = DEFAULTS.max_context_tokens
    limits: SandboxLimits | None = None
    return_mode: str = DEFAULTS.return_mode
    crash_reward: float = DEFAULTS.crash_reward
    template: str = DEFAULTS.agent_template
    temperature: float | None = None  # None: the policy's own
    design_budget_s: float = DESIGN_BUDGET_S


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


def first_message(obs: str, tools: list[dict] | None, hint: str | None,
                  template: str = DEFAULTS.agent_template) -> str:
    """The episode's first user message: the template around the first observation (and hint)."""
    if hint:
        obs = f"{obs}\n\nHINT: {hint}"
    if tools:
        return TOOL_TEMPLATE.format(tools=json.dumps(tools, indent=None), obs=obs)
    return GAME_TEMPLATES[template].format(obs=obs)


def play_episodes(policy, jobs: list[Job], settings: PlaySettings = PlaySettings(), on_turn=None) -> list[Episode]:
    """Play every job to its end, advancing all live episodes one turn per batched call;
    `on_turn(turn, live)` after each turn."""
    episodes = [Episode(job=j) for j in jobs]
    envs: list[SandboxedEnv | None] = [None] * len(jobs)
    clock = Budget(settings.design_budget_s, (settings.limits or SandboxLimits()).call_timeout_s)
    try:
        live = _start(episodes, envs, clock, settings)
        for turn in range(settings.max_turns):
            prompts = {i: policy.prompt_ids(episodes[i].messages) for i in live}
            for i in [i for i in live if len(prompts[i]) + settings.max_new_tokens > settings.max_context_tokens]:
                _end(episodes[i], "context")  # the next turn could not fit: truncated
                live.remove(i)
            if not live:
                break
            with policy.acting_as("agent"):
                outs = policy.continue_chats([episodes[i].messages for i in live], settings.max_new_tokens,
                                             temperature=settings.temperature, keys=[id(episodes[i]) for i in live])
            acting = []
            for i, out in zip(live, outs):
                ep = episodes[i]
                ep.messages.append({"role": "assistant", "content": out.text})
                action = extract_action(out.text, tool_use=ep.tools is not None)
                ep.turns.append(Turn(prompts[i], out.completion_ids, action, 0.0, out.sampling, out.finished))
                if out.finished:
                    acting.append(i)
                else:  # a turn that never stopped is cut: nothing reaches the environment
                    _end(ep, "no_eos")
            live = _step(episodes, envs, clock, acting, last=turn == settings.max_turns - 1, settings=settings)
            if on_turn:
                on_turn(turn, len(live))
    finally:
        for env in envs:
            if env is not None:
                env.close()
    for ep in episodes:
        if ep.crashed is None:
            ep.ret = episode_return(ep.rewards, ep.terminated, mode=settings.return_mode)
    return episodes


def _start(episodes: list[Episode], envs: list, clock: Budget, settings: PlaySettings) -> list[int]:
    """Load and reset every episode's environment at once (a failure ends only its episode);
    the episodes now live, each with its first message."""
    started = start_envs([ep.job.source for ep in episodes], limits=settings.limits)  # load in parallel
    envs[:] = [env if isinstance(env, SandboxedEnv) else None for env in started]
    loaded = [i for i in range(len(episodes)) if envs[i] is not None]
    for i in [i for i in range(len(episodes)) if envs[i] is None]:  # like a failed reset
        _end(episodes[i], f"reset failed: {type(started[i]).__name__}: {started[i]}", crash="reset",
             crash_reward=settings.crash_reward)
    replies = clock.run(episodes, loaded, lambda idx, ends: reset_envs(
        [envs[i] for i in idx], [episodes[i].job.seed for i in idx], ends, [episodes[i].job.level for i in idx]))
    live = []
    for i, out in zip(loaded, replies):
        ep = episodes[i]
        if isinstance(out, SandboxError):
            _end(ep, clock.reason("reset", ep, out), crash=clock.crash("reset", ep, out),
                 crash_reward=settings.crash_reward)
            continue
        obs, info = out
        hint = ep.job.hint if ep.job.arm == "hint" else None  # the trained arm never sees it
        ep.hint_shown = bool(hint)
        ep.tools = info.get("tools") or None
        ep.messages.append({"role": "user", "content": first_message(obs, ep.tools, hint, settings.template)})
        live.append(i)
    return live


def _step(episodes: list[Episode], envs: list, clock: Budget, acting: list[int], *, last: bool,
          settings: PlaySettings) -> list[int]:
    """Step the acting episodes' environments at once with their last actions; those still live."""
    replies = clock.run(episodes, acting, lambda idx, ends: step_envs(
        [envs[i] for i in idx], [episodes[i].turns[-1].action for i in idx], ends))
    still = []
    for i, out in zip(acting, replies):
        ep = episodes[i]
        if isinstance(out, SandboxError):
            _end(ep, clock.reason("step", ep, out), crash="step", crash_reward=settings.crash_reward)
            continue
        obs, reward, terminated, truncated, _ = out
        ep.turns[-1].reward = reward
        if terminated or truncated:
            ep.messages.append({"role": "user", "content": obs})
            _end(ep, ("won" if reward > 0 else "lost") if terminated else "truncated", terminated=terminated)
        elif last:
            _end(ep, "turn_cap")
        else:
            ep.messages.append({"role": "user", "content": obs})
            still.append(i)
    return still


class Budget:
    """Each design's environment time left in one play; a design with none left is cut."""

    def __init__(self, seconds: float, call_timeout_s: float):
        self.seconds, self.call_timeout_s = seconds, call_timeout_s
        self.left: dict[str, float] = {}
        self.cut: set[str] = set()

    def run(self, episodes: list[Episode], idx: list[int], call) -> list:
        """`call(idx, deadlines)` for these episodes at once, each deadline within what its
        design has left; then charge each design the time of its slowest reply."""
        start = time.monotonic()
        designs = [episodes[i].job.design_id for i in idx]
        values, took = call(idx, [start + max(0.0, self.left.setdefault(d, self.seconds))
                                  for d in designs])
        charge: dict[str, float] = {}
        for d, t, value in zip(designs, took, values):
            charge[d] = max(charge.get(d, 0.0), t)
            if isinstance(value, EnvTimeout) and self.left[d] < self.call_timeout_s:
                self.cut.add(d)
        for d, t in charge.items():
            self.left[d] -= t
        return values

    def over(self, ep: Episode) -> bool:
        return ep.job.design_id in self.cut or self.left.get(ep.job.design_id, 1.0) <= 0

    def reason(self, what: str, ep: Episode, exc: SandboxError) -> str:
        if self.over(ep):
            return (f"{what} failed: the design used up its {self.seconds:g} s of environment "
                    "time in this play")
        return f"{what} failed: {type(exc).__name__}: {exc}"

    def crash(self, what: str, ep: Episode, exc: SandboxError) -> str:
        """A reset cut by the budget is the design's fault (a crash in play), not a lost seed."""
        return "step" if self.over(ep) else what


def _end(ep: Episode, reason: str, *, terminated: bool = False, crash: str | None = None,
         crash_reward: float = DEFAULTS.crash_reward) -> None:
    ep.end_reason, ep.terminated = reason, terminated
    if crash:
        ep.crashed, ep.ret = crash, crash_reward
        ep.messages.append({"role": "user", "content": f"[environment error] {reason}"})
