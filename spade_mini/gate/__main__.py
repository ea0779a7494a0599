"""python -m spade_mini.gate: play the bundled environments' players again into
gate/bundled_profiles.json (after a bundled environment changed; tests/test_gate.py checks it)."""
from spade_mini.gate.novelty import BUNDLED_PROFILES, Archive

print(f"{Archive.bundled().write_bundled_profiles()} profiles written to {BUNDLED_PROFILES}")
