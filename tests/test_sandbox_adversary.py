"""Environments as adversaries, at the sandbox (issue 25): what a child can learn about the host
and its siblings, whether validation looks like play, whether a seed is one episode, and the
shapes of what a reset hands to consumers. Each environment here passed validate_env before
its class was closed. Run as root and again as an unprivileged user
(tests/test_sandbox_unprivileged.py)."""
import os

import pytest
from hostile import FAST, SIMPLE, requires, step_once
from test_sandbox_solution import SOLVED

from spade_mini.envs import ENV_DIR, HELDOUT
from spade_mini.sandbox import EnvProtocolError, SandboxedEnv, validate_env


# ---- 2. no side channel through the file system: a child stats nothing of the host --------------

@requires("mntns")
def test_a_child_cannot_stat_host_pids_sibling_threads_or_file_sizes(sandbox):
    sibling = sandbox(SIMPLE)
    sibling.reset(seed=0)
    held_out = ENV_DIR / f"{HELDOUT[0].name}.py"
    targets = [f"/proc/{os.getpid()}", f"/proc/{sibling._child.env_pid}/task", "/proc/self",
               "/proc/1", str(held_out), str(ENV_DIR), "/etc/passwd", "/sys/kernel", "/var"]
    step = ('os = worker()["os"]\n'
            f'r = [attempt(lambda p: (os.stat(p).st_size, os.stat(p).st_nlink), p) for p in {targets!r}]\n'
            'return "|".join(r), 0.0, False, False, {}')
    outcomes = step_once(sandbox, step)[0].split("|")
    assert outcomes == ["FileNotFoundError"] * len(targets), list(zip(targets, outcomes))
    assert os.stat(held_out).st_size > 0 and os.path.isdir(f"/proc/{sibling._child.env_pid}/task")


# ---- 7. a consumer reads every field of info["tools"]: its shape is checked at the boundary ----

NO_PARAMETERS = '''
class PriceEnv:
    """Find the price of tea."""
    def reset(self, seed=None):
        self.price = 3 + (seed or 0) % 5
        tools = [{"type": "function", "function": {"name": "price", "description": "a price"}}]
        return "Find the price of tea.", {"tools": tools}
    def step(self, action):
        won = action == "<answer>%d</answer>" % self.price
        return ("Right." if won else "Wrong."), float(won), True, False, {}
'''


def test_tool_specs_without_parameters_are_refused_before_any_consumer_reads_them():
    result = validate_env(NO_PARAMETERS, limits=FAST, require_solution=False)
    assert result.stage == "reset" and "tool spec" in " ".join(result.reasons), result.reasons
    with SandboxedEnv(NO_PARAMETERS, limits=FAST) as env, pytest.raises(EnvProtocolError):
        env.reset(seed=0)
    many = NO_PARAMETERS.replace('"description": "a price"}}]',
                                 '"description": "x" * 9000, "parameters": {}}}]')
    assert "longer than" in " ".join(validate_env(many, limits=FAST, require_solution=False).reasons)
    with SandboxedEnv(SIMPLE, limits=FAST) as env:  # no tools: nothing to check
        env.reset(seed=0)


# ---- 3. validation looks like play: fresh children, drawn seeds, junk checked at every step ----

# Play resets a fresh child once; the old validation reset one child about ten times and
# junk-checked only the first step after a reset. Each of these passed it, then paid junk in play.
COUNTS_RESETS = SOLVED.replace("    def reset(self, seed=None):\n", """    resets = 0
    def reset(self, seed=None):
        self.resets += 1
""").replace("won = action.strip() ==", "won = self.resets == 1 or action.strip() ==")
PAYS_JUNK_LATER = SOLVED.replace(
    "won = action.strip() ==",
    "won = (self.turns > 1 and action.strip() in ('\\\\boxed{test}', '')) or action.strip() ==")


@pytest.mark.parametrize("source", [COUNTS_RESETS, PAYS_JUNK_LATER],
                         ids=["counts_resets", "pays_junk_from_its_second_step"])
def test_an_environment_that_pays_junk_only_in_play_fails_validation(source):
    assert source != SOLVED and validate_env(SOLVED, limits=FAST).ok
    v = validate_env(source, limits=FAST)
    assert v.stage in ("step", "episode") and any("must earn nothing" in r for r in v.reasons), \
        v.reasons


# ---- 4. paired seeds are paired: the probe episode is replayed in a fresh child ---------------

ENTROPY_IN_STEP = SOLVED.replace('return ("Correct." if won else "Wrong.")',
                                 'return ("Correct." if won else "Wrong. %.3f" % '
                                 'random.SystemRandom().random())')


def test_entropy_in_step_fails_validation_because_a_replay_differs():
    assert ENTROPY_IN_STEP != SOLVED
    v = validate_env(ENTROPY_IN_STEP, limits=FAST)
    assert v.stage == "episode" and any("replayed in a fresh child" in r for r in v.reasons), \
        v.reasons
