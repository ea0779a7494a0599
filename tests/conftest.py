"""Shared fixtures: a tiny random policy (fast), the embedded SmolLM2 policy in 4-bit and in
float32 (integration; each loaded once per session, and never stepped with a learning rate
above 0), and the `sandbox` fixture of the hostile sandbox tests (tests/hostile.py)."""
import os

# `make test` runs the suite on pytest-xdist's workers, one per core: each worker, and the
# train.py runs it starts, compute on one thread (set before torch is imported), since two workers
# of two threads each on two cores wait on each other's spinning threads.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"

import pytest  # noqa: E402
from hostile import sandbox  # noqa: F401,E402  (the fixture of the hostile sandbox tests)

from spade_mini.config import Config  # noqa: E402

pytest_plugins = ["pytester"]  # tests/test_suite.py runs an inner pytest session with it

# `--dtype auto` measures bf16 against float32 on CPUs with bf16 units (policy/dtypes.py), and the
# measurement is noisy; the tests' tolerances are float32's, so in-process tests see a CPU without
# those units unless a test patches this itself (tests/test_dtypes.py). Patched here, at import,
# because session-scoped policies are built before any function-scoped fixture could patch it.
try:
    from spade_mini.policy import dtypes
except ImportError:  # the unprivileged copy of the sandbox tests has no torch, and loads no model
    dtypes = None
else:
    dtypes.cpu_has_bf16 = lambda: False


@pytest.fixture(scope="session")
def tiny_policy():
    from spade_mini.policy import load_policy
    return load_policy(Config(model="tiny", quantize="none", temperature=0.0, seed=0), verbose=False)


@pytest.fixture(scope="session")
def embedded_policy():
    """SmolLM2-135M-Instruct in 4-bit NF4 with a LoRA adapter, as the default config builds it."""
    from spade_mini.policy import load_policy
    return load_policy(Config(model="embedded", quantize="4bit", temperature=0.0), verbose=False)


@pytest.fixture(scope="session")
def fp32_policy():
    """The embedded model unquantized and greedy: clear greedy choices (the tiny random model
    answers every chat with the same token), so equal transcripts mean something."""
    from spade_mini.policy import load_policy
    return load_policy(Config(model="embedded", quantize="none", temperature=0.0), verbose=False)


# --- a machine without a layer the README promises is said so, and fails ------------------------
# The README's sandbox table promises these layers on Linux (uid as root, userns for a user). A
# machine that lacks one skips that layer's tests, and a green suite would hide it: so the
# summary names what is missing and the run fails, unless SPADE_ALLOW_MISSING_LAYERS=1 accepts it.
PROMISED_LAYERS = ("rlimits", "netns", "ipcns", "pidns", "mntns", "pdeathsig", "no_new_privs", "landlock", "seccomp")
ALLOW_MISSING = "SPADE_ALLOW_MISSING_LAYERS"
SANDBOX_RAN: list[str] = []  # node ids of the sandbox tests this session ran or skipped


def missing_layers() -> list[str]:
    from spade_mini.sandbox import available_layers
    have = set(available_layers())
    return [name for name in PROMISED_LAYERS if name not in have] + \
        ([] if have & {"uid", "userns"} else ["uid or userns"])


def pytest_runtest_logreport(report):
    """Remembers that a sandbox test ran. Reports reach the process that prints the summary: this
    one, or under pytest-xdist (`make test`) the controller, whose own session collects nothing."""
    if report.when == "setup" and "sandbox" in report.nodeid:  # a skipped test has a setup too
        SANDBOX_RAN.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput") or exitstatus != 0 or not SANDBOX_RAN:
        return  # an xdist worker (its controller judges), failed already, or no sandbox test ran
    missing = missing_layers()
    session.config.stash[MISSING] = missing
    if missing and os.environ.get(ALLOW_MISSING) != "1":
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    missing = config.stash.get(MISSING, [])
    if missing:
        allowed = os.environ.get(ALLOW_MISSING) == "1"
        terminalreporter.write_sep("=", "sandbox layers", yellow=allowed, red=not allowed)
        terminalreporter.write_line(
            f"this machine lacks the sandbox layers {', '.join(missing)}, which the README promises; their "
            "tests were skipped. " + (f"Accepted ({ALLOW_MISSING}=1)." if allowed else "The run fails: fix the "
                                      f"kernel or its settings (docs/sandbox.md), or accept it with {ALLOW_MISSING}=1."))


MISSING = pytest.StashKey[list]()


# --- the reference: what an outside engineer runs to check an implementation against this one ---
# `pytest -m reference`: the golden cases, the wiring of samples to roles and baselines, the pool's
# rules, each band, and each sandbox layer alone (docs/testing.md). Under two minutes on 2 cores.
REFERENCE_FILES = {"test_regret.py", "test_reinforce.py", "test_wiring.py", "test_sandbox_layers.py"}
REFERENCE_TESTS = {
    "test_admission_takes_only_informative_plays", "test_one_level_environments_retire_at_both_edges_and_age_only_unjudged",
    "test_the_design_schedule_runs_every_r_iterations_or_when_short",
    "test_split_shares_the_budget_in_groups_drawn_by_p_times_1_minus_p", "test_refill_readmits_the_runs_own_in_band_designs_only",
    "test_the_pool_round_trips_through_json", "test_the_gated_blend_pays_nothing_from_regret_at_rate_0_or_1",
    "test_a_level_rises_at_the_top_falls_at_the_bottom_and_retires_at_both_ends",
    "test_no_skill_holds_more_than_half_of_the_pool", "test_score_playables_golden",
    "test_the_update_scores_every_valid_design_and_a_fraction_of_the_invalid_ones",
    "test_new_designs_are_admitted_and_replayed_without_a_hint_on_fresh_seeds",
}


# --- the slowest files start first ------------------------------------------------------------
# `make test` gives each xdist worker a whole file (`--dist loadfile`). xdist would queue the files
# with the most tests first, which leaves a one-test file of minutes (test_make_train.py) to run
# alone at the end; so the queue keeps collection order, and these files, the slowest measured
# (docs/tests-and-benchmarks.md), are collected first, slowest first.
SLOW_FIRST = ("test_make_train.py", "test_notebooks.py", "test_memplan.py", "test_sandbox_unprivileged.py",
              "test_curve.py", "test_loop.py", "test_pool.py", "test_robust_run.py", "test_install.py")


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist is installed
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order
    for item in items:
        if (item.get_closest_marker("golden") or item.path.name in REFERENCE_FILES
                or getattr(item, "originalname", item.name) in REFERENCE_TESTS):
            item.add_marker(pytest.mark.reference)
