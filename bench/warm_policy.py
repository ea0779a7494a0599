"""What a model bench shares: its own flags before `--`, train.py's flags after it (the preset
defaults to cpu-smoke), and the policy loaded, fitted to the memory plan and warm-started as
train.py does. `cpu_name` (policy/dtypes.py) names the CPU in the JSON a bench writes.

    args, cfg = bench_config(parser, "bench/x.py")
    policy = warm_policy(cfg)
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from spade_mini import warmstart  # noqa: E402
from spade_mini.cli import main_config  # noqa: E402
from spade_mini.designer import Corpus  # noqa: E402
from spade_mini.policy import load_policy  # noqa: E402
from spade_mini.policy.dtypes import cpu_name  # noqa: E402,F401 (the CPU's name, for the benches' JSON)
from spade_mini.run.planning import fit_plan  # noqa: E402


def bench_config(parser, prog: str, extra_flags=()):
    """(the bench's args, the run's Config): argv before `--` to `parser`, after it to train.py's,
    then `extra_flags` (a list, or a function of the bench's args that gives one)."""
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    flags = (extra if "--preset" in extra else ["--preset", "cpu-smoke", *extra]) + \
        list(extra_flags(args) if callable(extra_flags) else extra_flags)
    return args, main_config(flags, prog=prog)


def warm_policy(cfg):
    torch.manual_seed(cfg.seed)
    policy = load_policy(cfg)
    fit_plan(policy, cfg)
    if cfg.warm_start_steps > 0:
        warmstart.warm_start(policy, cfg, None if cfg.no_corpus else Corpus.load(cfg.corpus, cfg.corpus_max_words))
    return policy


