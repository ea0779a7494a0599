"""Tool-use environments in one `step` interface: the base class environments subclass.

Available inside the sandbox as `from tooluse import ToolUseEnv` (and in the library as
`spade_mini.tooluse`). A subclass writes tools as `tool_<name>` methods with type hints and a
docstring; the base class turns them into JSON-schema function specs (returned by `reset` in
`info["tools"]`), parses the agent's action, dispatches the call and returns its result as the
next observation. Subclasses implement:

    _reset(self, rng: random.Random) -> str    build the simulated state, return the task text
                                               (at difficulty `self.level`, 0 to `levels` - 1)
    _check_answer(self, answer: str) -> bool   is the final answer correct?

Actions: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` or `<answer>...</answer>`.
A correct answer gives reward 1.0 and ends the episode; a wrong one gives 0.0 and also ends it
(set `end_on_wrong_answer = False` to allow retries). Tool exceptions become "Error: ..."
observations, so error recovery is part of the task. Omitted: parallel calls, nested schemas.
"""
import inspect
import json
import random
import re
import types
import typing

_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean",
               list: "array", tuple: "array", dict: "object"}
FORMAT_ERROR = ('Format error: reply with <tool_call>{"name": "<tool>", "arguments": {...}}'
                '</tool_call> or <answer>...</answer>.')


def _json_type(hint) -> str:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and args:
        return _json_type(args[0])  # Optional[int] and int | None are integers
    return _JSON_TYPES.get(typing.get_origin(hint) or hint, "string")


def tool_spec(method) -> dict:
    """The JSON-schema function spec of one `tool_<name>` method."""
    try:
        hints = typing.get_type_hints(method)
    except (NameError, TypeError):  # an annotation that does not resolve: describe as strings
        hints = {}
    properties, required = {}, []
    for name, param in inspect.signature(method).parameters.items():
        if name == "self":
            continue
        properties[name] = {"type": _json_type(hints.get(name, str))}
        if param.default is inspect.Parameter.empty:
            required.append(name)
    doc = inspect.getdoc(method) or ""
    return {"type": "function", "function": {
        "name": method.__name__[len("tool_"):],
        "description": doc.split("\n\n")[0].strip(),
        "parameters": {"type": "object", "properties": properties, "required": required}}}


class ToolUseEnv:
    """Base class: tools from `tool_<name>` methods, parsing and dispatch of the agent's calls."""

    max_turns = 25  # envs.MAX_TURNS: this file runs in the sandbox, which has no spade_mini (a test checks)
    end_on_wrong_answer = True
    levels = 1  # difficulty levels a subclass offers; reset(options={"level": n}) picks one

    def _reset(self, rng: random.Random) -> str:
        raise NotImplementedError

    def _check_answer(self, answer: str) -> bool:
        raise NotImplementedError

    @classmethod
    def tools(cls) -> list[dict]:
        return [tool_spec(getattr(cls, name)) for name in sorted(dir(cls))
                if name.startswith("tool_") and callable(getattr(cls, name))]

    def reset(self, seed=None, options=None):
        self.rng = random.Random(seed)
        self.turns = 0
        self.level = (options or {}).get("level", 0)
        return self._reset(self.rng), {"tools": self.tools()}

    def step(self, action: str):
        self.turns += 1
        truncated = self.turns >= self.max_turns
        answer = _ANSWER.search(action)
        if answer is not None:
            correct = bool(self._check_answer(answer.group(1).strip()))
            done = correct or self.end_on_wrong_answer
            obs = "Correct." if correct else "Incorrect."
            return obs, float(correct), done, truncated and not done, {}
        return self._call_tool(action), 0.0, False, truncated, {}

    def _call_tool(self, action: str) -> str:
        match = _TOOL_CALL.search(action)
        if match is None:
            return FORMAT_ERROR
        try:
            call = json.loads(match.group(1))
        except json.JSONDecodeError:
            return FORMAT_ERROR + " The tool call is not valid JSON."
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return FORMAT_ERROR + ' The tool call needs a "name".'
        arguments = call.get("arguments", {})
        if not isinstance(arguments, dict):
            return FORMAT_ERROR + ' "arguments" must be an object.'
        method = getattr(self, "tool_" + call["name"], None)
        if not callable(method):
            names = ", ".join(t["function"]["name"] for t in self.tools())
            return f"Error: unknown tool {call['name']!r}. Available tools: {names}."
        try:
            inspect.signature(method).bind(**arguments)
        except TypeError as exc:
            return f"Error: bad arguments for {call['name']}: {exc}"
        try:
            result = method(**arguments)
        except Exception as exc:  # the tool's failure is an observation, not a crash
            return f"Error: {type(exc).__name__}: {exc}"
        return result if isinstance(result, str) else json.dumps(result, default=str)
