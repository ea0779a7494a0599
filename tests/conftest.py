"""Shared fixtures: a tiny random policy (fast) and the embedded SmolLM2 policy (integration)."""
import pytest

from spade_mini.config import Config


@pytest.fixture(scope="session")
def tiny_policy():
    from spade_mini.model import load_policy
    return load_policy(Config(model="tiny", quantize="none", temperature=0.0, seed=0), verbose=False)


@pytest.fixture(scope="session")
def embedded_policy():
    """SmolLM2-135M-Instruct in 4-bit NF4 with a LoRA adapter, as the default config builds it."""
    from spade_mini.model import load_policy
    return load_policy(Config(model="embedded", quantize="4bit", temperature=0.0), verbose=False)
