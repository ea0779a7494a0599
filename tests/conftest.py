"""Shared fixtures: a tiny random policy (fast), the embedded SmolLM2 policy in 4-bit and in
float32 (integration; each loaded once per session, and never stepped with a learning rate
above 0), and the `sandbox` fixture of the hostile sandbox tests (tests/hostile.py)."""
import pytest
from hostile import sandbox  # noqa: F401  (the fixture of the hostile sandbox tests)

from spade_mini.config import Config

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
