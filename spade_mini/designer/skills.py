"""The skills the designer targets, and which ones each iteration asks for.

A skill is a named ability ("logical_deduction", "error_recovery") in one of two settings,
games and tool use; each design targets one, and the designer reward is centred per skill.
These are the reference's skill lists, with one-line descriptions.
Omitted on purpose: difficulty levels per skill.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Skill:
    setting: str  # "games" | "tool_use"
    key: str  # e.g. "logical_deduction"
    name: str  # e.g. "Logical Deduction"
    description: str


def _skills(setting: str, rows: list[tuple[str, str]]) -> tuple[Skill, ...]:
    return tuple(Skill(setting, key, key.replace("_", " ").title().replace("Api", "API"), desc) for key, desc in rows)


SKILLS: dict[str, tuple[Skill, ...]] = {
    "games": _skills("games", [
        ("pattern_recognition", "identifying patterns in sequences, numbers, or text"),
        ("logical_deduction", "drawing conclusions from given premises and rules"),
        ("strategic_planning", "multi-step planning and resource management"),
        ("mathematical_reasoning", "solving mathematical problems and equations"),
        ("spatial_reasoning", "understanding spatial relationships and mental rotation"),
        ("causal_inference", "understanding cause-effect relationships"),
        ("memory_recall", "remembering and using information from earlier turns"),
        ("optimization", "finding optimal solutions under constraints"),
        ("language_understanding", "understanding and manipulating language")]),
    "tool_use": _skills("tool_use", [
        ("api_orchestration", "chaining several state-changing API calls toward one goal"),
        ("data_retrieval", "querying for the needed data first, then acting on it"),
        ("state_modification", "making dependent changes whose final state is checked"),
        ("error_recovery", "noticing failed calls and recovering, e.g. by retrying or fixing arguments"),
        ("tool_selection", "choosing the right tool among similar alternatives"),
        ("multi_step_workflows", "completing ordered steps where each depends on the last")]),
}


class SkillError(ValueError):
    """An unknown setting or skill key; the message lists the valid ones."""


def skills_for(setting: str, active: list[str] | None = None) -> list[Skill]:
    """The skills of a setting ("games", "tool_use" or "mix"), optionally only the `active` keys."""
    if setting == "mix":  # interleave so a round robin alternates the two settings
        games, tools = SKILLS["games"], SKILLS["tool_use"]
        pool = [s for pair in zip(games, tools) for s in pair] + list(games[len(tools):])
    elif setting in SKILLS:
        pool = list(SKILLS[setting])
    else:
        raise SkillError(f"Unknown setting {setting!r}; use games, tool_use or mix.")
    if not active:
        return pool
    by_key = {s.key: s for s in pool}
    unknown = [key for key in active if key not in by_key]
    if unknown:
        raise SkillError(f"Unknown skill(s) {', '.join(unknown)} for setting {setting}; "
                         f"choose from: {', '.join(by_key)}.")
    return [by_key[key] for key in active]


def skill_schedule(skills: list[Skill], iteration: int, n: int, group: int = 1) -> list[Skill]:
    """`n` skills for this iteration, round robin over `skills`; each repeated `group` times in a
    row so the per-skill baseline of the designer reward has more than one design to average."""
    slots = -(-n // group)  # distinct skills this iteration
    start = iteration * slots
    picked = [skills[(start + i) % len(skills)] for i in range(slots)]
    return [skill for skill in picked for _ in range(group)][:n]
