"""train.py with the scripted roles of tests/scripted.py around the tiny model: the whole run
(its flags, checkpoints, --resume, signals) as users run it, with a designer whose games the
agent wins about half the time, so the active pool fills (`--scripted-levels`: games with 4 levels). Used by tests/test_pool.py."""
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).parent)]

import spade_mini.policy  # noqa: E402
from scripted import parity_roles  # noqa: E402

real_load = spade_mini.policy.load_policy
LEVELS = "--scripted-levels" in sys.argv  # the designer's parity games have 4 levels
spade_mini.policy.load_policy = lambda cfg, verbose=True: parity_roles(real_load(cfg, verbose=verbose), levels=LEVELS)
sys.argv = [str(ROOT / "train.py"), *[a for a in sys.argv[1:] if a != "--scripted-levels"]]
runpy.run_path(str(ROOT / "train.py"), run_name="__main__")
