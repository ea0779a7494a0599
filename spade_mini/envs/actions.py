"""Actions: how a reply becomes what step() receives, the one path both play and validation use.

In games the agent answers `\\boxed{...}`; the last box is passed to step re-wrapped as
`\\boxed{x}` (its content stripped). In tool use the first `<tool_call>...</tool_call>` or
`<answer>...</answer>` block is passed on. Without either, the raw text (truncated). A
solution() action is what the agent should write: `as_played` is what step() then receives
(a bare answer is written boxed, as the agent is told to), so validation plays a solution
exactly as play would (sandbox/solution.py), and a design whose step() wants a bare `7` is
refused instead of validating and never being won. Pure text: no other part of the package.
"""
import re

RAW_ACTION_CHARS = 2000  # an action without a box or tag is passed on truncated to this


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


def as_written(action: str) -> str:
    """A solution action as the agent writes it: a game's bare answer inside a box; a box or a
    tool's markup as it is."""
    return action if action.lstrip().startswith(("\\boxed{", "<")) else f"\\boxed{{{action}}}"


def as_played(action: str, tool_use: bool) -> str:
    """What step() receives when the agent writes a solution action: `extract_action` of its
    written form."""
    return extract_action(as_written(action), tool_use)
