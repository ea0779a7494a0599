"""spade_mini's environments for TRL: an exported suite as GRPOTrainer's `environment_factory`.

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from spade_mini.adapters.trl_env import SuiteEnv, prepare_tokenizer, suite_rows, turn_limit

    suite = "suite/"                                   # python -m spade_mini.adapters.export runs/<name> --out suite/
    trainer = GRPOTrainer(
        model=model, processing_class=prepare_tokenizer(tokenizer),
        train_dataset=Dataset.from_list(suite_rows(suite, rows=256)),
        environment_factory=lambda: SuiteEnv(suite),
        args=GRPOConfig(max_tool_calling_iterations=turn_limit(suite), ...))

What TRL does with it (trl 1.16): one `SuiteEnv` per rollout, pooled and reused; before each
rollout `reset(**row)` gets the row's columns (env_id, seed, level, prompt) and its text is
appended to the prompt; every other public method is a tool the model calls (here only `act`,
with the type hints and docstring TRL builds its schema from); `get_reward()` joins the reward
functions, logged as `rewards/SuiteEnv/...`. Each row is repeated for a whole group, so a group
shares one seed and so one start state.

What runs where: each episode's environment runs in spade_mini's sandboxed child process (a new
one per episode, about 60 ms to start), never in the trainer's. The child ends when the episode
is scored (`get_reward`), when the next `reset` replaces the episode, and at exit (if the trainer
is killed, the sandbox's parent-death signal ends it).

The protocol gap: TRL's model acts through tool calls, spade_mini's agent writes `\\boxed{}`.
`act(answer)` passes a game's answer on as the agent's box would be (a bare `7` becomes
`\\boxed{7}`), and a tool-use environment's `<tool_call>`/`<answer>` markup as it is (a bare
answer becomes `<answer>...</answer>`). TRL cannot end an episode from the environment: after
the game is over, `act` says so and refuses further calls (TRL shows the model the error), and an
episode is cut at `max_tool_calling_iterations`, which `turn_limit(suite)` sets to the longest
turn cap of the suite. The chat template must render tool calls and TRL must be able to parse
them: `prepare_tokenizer` accepts a template TRL knows and gives a ChatML tokenizer (SmolLM2,
Qwen2.5-Coder) TRL's Qwen2.5 template; anything else gets one sentence.

Rewards: the episode's return as spade_mini computes it (`return_mode` "last": the last reward
of an episode that ended, 0 for one cut by the turn cap); a crash of the environment ends the
episode with `crash_reward` (-1) and a tool message that says so; an environment that does not
start gives 0 and a first message that says so; neither stops the trainer. An episode the model
leaves unfinished (it answers without calling `act`, or runs past TRL's length cap) returns
`unfinished_reward` (-1): declining to play must never pay more than a loss.
Omitted: the hint arm and regret (TRL trains one policy on returns; the designer stays in train.py).
"""
from __future__ import annotations

import atexit
import random
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from spade_mini.config import DEFAULTS
from spade_mini.envs.actions import extract_action
from spade_mini.pool import weight
from spade_mini.adapters.registration import read_suite, turn_cap
from spade_mini.reward import episode_return
from spade_mini.sandbox import SandboxedEnv, SandboxError, SandboxLimits

GAME_TASK = ("You are playing a language game. Make valid actions to win. Each turn, call the "
             "`act` tool with your action; it answers with what the game says next. When the game "
             "says it is over, reply without calling a tool. You have {turns} turn(s).\n\n"
             "Observation: {obs}")
TOOL_TASK = ("You are solving a task with tools. Each turn, call the `act` tool with one call of "
             'the task\'s own tools written as <tool_call>{{"name": "...", "arguments": {{...}}}}'
             "</tool_call>, or with <answer>...</answer> to finish. The task's tools: {tools}\n"
             "When the task says it is over, reply without calling a tool. You have {turns} "
             "turn(s).\n\nTask: {obs}")
OVER = "The game is over: {how} (return {ret:+.2f}). Do not call act again; reply with a short final message."
EMPTY_PROMPT = [{"role": "user", "content": ""}]
_LIVE: "weakref.WeakSet[SuiteEnv]" = weakref.WeakSet()


@dataclass
class Play:
    """One episode as SuiteEnv keeps it."""
    env_id: str
    seed: int
    level: int
    cap: int                   # the environment's turn cap
    observation: str = ""      # the first one
    tool_use: bool = False
    started: bool = False      # its child started and reset
    rewards: list = field(default_factory=list)
    over: bool = False
    terminated: bool = False
    end: str | None = None     # how it ended (None: not over)


class SuiteEnv:
    """One rollout's environment for TRL: `reset` starts an episode of one environment of an
    exported suite in a sandboxed child, the tool `act` plays a turn, `get_reward` scores it.
    Every public method but `reset` and `get_reward` is a tool TRL shows the model: helpers
    here are private (a leading underscore)."""

    def __init__(self, suite: str | Path, *, return_mode: str = DEFAULTS.return_mode,
                 crash_reward: float = DEFAULTS.crash_reward, unfinished_reward: float = -1.0,
                 limits: SandboxLimits | None = None, record: list | None = None):
        """`suite`: a folder written by `python -m spade_mini.adapters.export`. `unfinished_reward`: the
        return of an episode the model left before it was over (it answered without calling
        `act`, or ran past TRL's length cap), so that declining to play never pays more than a
        loss. `record`: a list that gets one summary per scored episode (for tests and logs)."""
        self._env: SandboxedEnv | None = None
        self._play: Play | None = None
        self._entries = {e["name"]: e for e in read_suite(suite)[1]}
        self._sources: dict[str, tuple[str, int]] = {}  # env_id -> (source, turn cap), read once
        self._return_mode, self._crash_reward = return_mode, crash_reward
        self._unfinished_reward, self._limits = unfinished_reward, limits
        self.record = record
        _LIVE.add(self)

    def reset(self, env_id: str, seed: int | None = None, level: int | None = None, **row) -> str:
        """Start an episode of `env_id` (a name in the suite's manifest) at `seed` and `level`
        (None: the level the run's pool last played it at, else 0); return its first message.
        Other columns of the dataset row (the prompt) are ignored."""
        self._close()
        self._play = None
        if env_id not in self._entries:
            raise ValueError(f"env_id {env_id!r} is not in this suite; use a name from its "
                             f"manifest.json, e.g. {next(iter(self._entries), '(none)')!r}.")
        if env_id not in self._sources:
            source = Path(self._entries[env_id]["path"]).read_text(encoding="utf-8")
            self._sources[env_id] = source, turn_cap(source)
        source, cap = self._sources[env_id]
        level = pool_level(self._entries[env_id]) if level is None else level
        play = Play(env_id, random.randrange(2**31) if seed is None else int(seed), level, cap)
        try:
            self._env = SandboxedEnv(source, limits=self._limits)
            obs, info = self._env.reset(seed=play.seed, options={"level": level})
        except ValueError:  # a level the environment does not have: the dataset's mistake
            self._close()
            raise
        except SandboxError as exc:
            self._play = play
            self._finish(f"the environment did not start: {exc}")
            play.observation = (f"This environment failed to start ({exc}). There is nothing to "
                                "play; reply without calling a tool.")
            return play.observation
        self._play = play
        tools = info.get("tools")
        play.observation, play.tool_use, play.started = obs, tools is not None, True
        return (TOOL_TASK.format(tools=tools, turns=cap, obs=obs) if tools is not None
                else GAME_TASK.format(turns=cap, obs=obs))

    def act(self, answer: str) -> str:
        """Play one turn: send your action to the game and get its reply.

        Args:
            answer: Your action for this turn, e.g. the number or word the game asks for.

        Returns:
            What the game says next, and whether the game is over.
        """
        play = self._play
        if play is None:
            raise RuntimeError("no episode was started; the trainer calls reset() first.")
        if play.over:
            raise RuntimeError(f"the game is already over ({play.end}); do not call act again.")
        try:
            obs, reward, terminated, truncated, _ = self._env.step(as_action(str(answer), play.tool_use))
        except SandboxError as exc:
            play.rewards.append(self._crash_reward)
            self._finish(f"the environment crashed: {exc}", terminated=True)
            raise RuntimeError(f"the environment crashed ({exc}); the episode is over.") from None
        play.rewards.append(float(reward))
        if terminated or truncated or len(play.rewards) >= play.cap:
            how = ("it ended" if terminated else "it was cut short" if truncated
                   else f"no turns left after {len(play.rewards)}")
            self._finish(how, terminated=terminated)
            ret = self._return()
            return f"{obs}\n\n" + OVER.format(how=f"{how}, you {'won' if ret > 0 else 'did not win'}", ret=ret)
        return obs

    def get_reward(self) -> float:
        """The episode's return (TRL calls this once per rollout); ends the episode's child."""
        ret, play = self._return(), self._play
        if play is not None and self.record is not None:
            self.record.append({"env_id": play.env_id, "seed": play.seed, "level": play.level,
                                "observation": play.observation, "turns": len(play.rewards),
                                "return": ret, "end": play.end or "unfinished"})
        self._close()
        return ret

    def _return(self) -> float:
        play = self._play
        if play is None or (play.over and not play.started):
            return 0.0  # nothing was played: the environment did not start
        if not play.over:
            return self._unfinished_reward
        return episode_return(play.rewards, play.terminated, self._return_mode)

    def _finish(self, how: str, terminated: bool = False) -> None:
        self._play.over, self._play.end, self._play.terminated = True, how, terminated
        self._close()

    def _close(self) -> None:
        env, self._env = getattr(self, "_env", None), None
        if env is not None:
            env.close()

    def __del__(self):
        self._close()


def as_action(answer: str, tool_use: bool) -> str:
    """What `step` receives for `act(answer)`, as the agent's reply would give it: in a game the
    answer boxed (unless it is already), in tool use a tool call or answer block (a bare answer
    becomes `<answer>...</answer>`)."""
    text = answer.strip()
    if tool_use:
        return extract_action(text if text.startswith("<") else f"<answer>{text}</answer>", True)
    return extract_action(text if text.startswith("\\boxed{") else f"\\boxed{{{text}}}", False)


def close_environments() -> None:
    """End every SuiteEnv's child (also run at exit)."""
    for env in list(_LIVE):
        env._close()


atexit.register(close_environments)


def pool_level(entry: dict) -> int:
    """The level a suite environment is played at: its pool's last level, else 0."""
    level = (entry.get("pool") or {}).get("level")
    return level if type(level) is int and level >= 0 else 0


def learnability(entry: dict) -> float:
    """p(1 - p) of its recent no-hint rate in the run's pool, else of its design's rate (unknown:
    0.25), never under the pool's replay floor: the pool's own replay weight."""
    rate = (entry.get("pool") or {}).get("rate")
    if not isinstance(rate, (int, float)):
        rate = entry.get("no_hint_solve_rate")
    return weight(float(rate) if isinstance(rate, (int, float)) and 0 <= rate <= 1 else None)


def suite_rows(suite: str | Path, rows: int = 256, seed: int = 0) -> list[dict]:
    """`rows` dataset rows {env_id, seed, level, prompt} over a suite: one row per environment,
    the rest shared in proportion to learnability; every row has its own seed, in a shuffled order."""
    envs = read_suite(suite)[1]
    if not envs:
        raise ValueError(f"{suite} holds no environments; export a run that has valid ones.")
    if rows < len(envs):
        raise ValueError(f"rows={rows} is fewer than the suite's {len(envs)} environments (each gets "
                         "at least one); ask for more rows.")
    weights = [learnability(e) for e in envs]
    rest = rows - len(envs)  # one row each, the rest in proportion to learnability
    shares = [rest * w / sum(weights) for w in weights]
    counts = [1 + int(x) for x in shares]
    for i in sorted(range(len(envs)), key=lambda i: int(shares[i]) - shares[i])[: rows - sum(counts)]:
        counts[i] += 1  # the largest remainders
    rng = random.Random(seed)
    out = [{"env_id": e["name"], "seed": rng.randrange(2**31), "level": pool_level(e),
            "prompt": EMPTY_PROMPT} for e, n in zip(envs, counts) for _ in range(n)]
    rng.shuffle(out)
    return out


def turn_limit(suite: str | Path) -> int:
    """`max_tool_calling_iterations` for a suite: the longest turn cap of its environments."""
    return max(turn_cap(Path(e["path"]).read_text(encoding="utf-8")) for e in read_suite(suite)[1])


def prepare_tokenizer(tokenizer):
    """`tokenizer` made ready for TRL's tool calls: a template TRL knows as it is, a ChatML one
    (<|im_start|>/<|im_end|>) with TRL's Qwen2.5 template; else a ValueError that says why."""
    from trl.chat_template_utils import add_response_schema, qwen2_5_chat_template, supports_tool_calling
    if supports_tool_calling(tokenizer):
        try:
            return add_response_schema(tokenizer)
        except ValueError:
            pass  # it renders tools, but TRL cannot parse its replies: try the ChatML route
    vocab = tokenizer.get_vocab()
    if "<|im_start|>" not in vocab or "<|im_end|>" not in vocab:
        raise ValueError("this tokenizer's chat template is not one TRL can parse tool calls from, "
                         "and it is not ChatML; use a Qwen2.5/Qwen3, Llama 3.1 or SmolLM2 model.")
    tokenizer.chat_template = qwen2_5_chat_template
    return add_response_schema(tokenizer)
