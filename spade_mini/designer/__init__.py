"""Role 1, the designer, and what it reads: skills, a corpus, a memory of earlier environments.

Each iteration the policy writes N environments as Python source, one per scheduled skill,
grounded on a corpus document and shown references from its memory; the sources go to the
sandbox for validation (this folder never runs them) and, once played, back into the memory.

    skills.py    Skill, SKILLS, skills_for, skill_schedule: what each design targets
    prompts.py   designer_prompt, hint_prompt: the chats the policy reads
    corpus.py    Corpus, Document (+ corpus_data/): grounding documents
    memory.py    Memory, EnvRecord: earlier environments with their stats, and the references
    novelty.py   fingerprint: a copy of a known environment is a duplicate, not a design
    design.py    Design, DesignSettings, design_environments, design_record
    hints.py     generate_hints, episode_hints: each episode's hint, checked against its solution

Other folders use the names below; the files above import each other directly.
"""
from spade_mini.designer.corpus import Corpus, CorpusError, Document
from spade_mini.designer.design import (NO_CLASS, Design, DesignSettings, design_environments, design_record,
                                       extract_code)
from spade_mini.designer.hints import EpisodeHints, episode_hints, generate_hints
from spade_mini.designer.memory import EnvRecord, Memory, env_title
from spade_mini.gate.exact import fingerprint
from spade_mini.designer.prompts import designer_prompt, hint_prompt
from spade_mini.designer.skills import SKILLS, Skill, SkillError, skill_schedule, skills_for

__all__ = ["Skill", "SKILLS", "SkillError", "skills_for", "skill_schedule", "designer_prompt", "hint_prompt",
           "Corpus", "CorpusError", "Document", "Memory", "EnvRecord", "env_title", "fingerprint",
           "Design", "DesignSettings", "NO_CLASS", "design_environments", "design_record", "extract_code", "generate_hints",
           "EpisodeHints", "episode_hints"]
