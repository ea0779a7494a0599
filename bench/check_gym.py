"""Every registered spade_mini id as a gymnasium user meets it: gym.make, check_env, seeding.

    python bench/check_gym.py [SUITE_FOLDER ...]

For each id that importing spade_mini registers (and those of any suite folder written by
`python -m spade_mini.adapters.export`, registered with `register_suite`), it builds the environment with
`gym.make`, runs gymnasium's `check_env` on it with every gymnasium warning turned into a failure,
and checks that `reset(seed=123)` then two `reset()` calls give the same observations in a second,
fresh instance. It prints one row per id (pass or the first failure, max_episode_steps, seconds)
and a count; it exits 1 when any id fails.
"""
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gymnasium as gym  # noqa: E402
from gymnasium.utils.env_checker import check_env  # noqa: E402

import spade_mini  # noqa: E402  (registers the bundled ids)


def stream(env_id: str) -> list[str]:
    with gym.make(env_id) as env:
        return [env.reset(seed=123)[0]] + [env.reset()[0] for _ in range(2)]


def check(env_id: str) -> str:
    """'pass', or the first failure in one line."""
    try:
        with gym.make(env_id) as env, warnings.catch_warnings():
            warnings.simplefilter("error")
            check_env(env.unwrapped)
        if stream(env_id) != stream(env_id):
            return "FAIL: reset(seed=123), reset(), reset() differ between two instances"
        return "pass"
    except Exception as exc:  # any failure of check_env or of the environment is a row here
        return f"FAIL: {type(exc).__name__}: {str(exc).splitlines()[0][:90] if str(exc) else ''}"


def main(folders: list[str]) -> int:
    for folder in folders:
        spade_mini.register_suite(folder)
    ids = sorted(k for k in gym.registry if k.split("/")[0].startswith("spade_mini"))
    width = max(map(len, ids))
    print(f"{'id':<{width}}  {'result':<6}  steps  seconds   (gymnasium {gym.__version__})")
    failed = 0
    for env_id in ids:
        start = time.perf_counter()
        result = check(env_id)
        failed += result != "pass"
        print(f"{env_id:<{width}}  {result:<6}  {gym.spec(env_id).max_episode_steps:>5}  "
              f"{time.perf_counter() - start:7.2f}")
    print(f"{len(ids) - failed} of {len(ids)} ids pass check_env and the seeded reset stream")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
