"""The suite's own rules (tests/conftest.py): what a run of `make test` says about the machine it
ran on. Kept out of the sandbox test files, which an unprivileged user also runs without torch."""
from pathlib import Path

import pytest


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_a_machine_without_a_promised_layer_fails_the_suite_unless_accepted(pytester, monkeypatch, workers):
    """tests/conftest.py: a session that ran sandbox tests on a machine lacking a layer of the
    README's table names it in the summary and fails; SPADE_ALLOW_MISSING_LAYERS=1 accepts it.
    Also as `make test` runs it, on pytest-xdist's workers (the controller collects no test, and a
    layer's test that skips still counts)."""
    here = Path(__file__).resolve().parent
    pytester.makeconftest(f"import sys\nsys.path.insert(0, {str(here)!r})\n"
                          f"exec(open({str(here / 'conftest.py')!r}).read())\n"
                          "import spade_mini.sandbox\nspade_mini.sandbox.available_layers = lambda: ('rlimits', 'uid')\n")
    pytester.makepyfile(test_sandbox_probe="import pytest\n\n@pytest.mark.skip(reason='no layer')\ndef test_skipped():\n    pass\n")
    monkeypatch.delenv("SPADE_ALLOW_MISSING_LAYERS", raising=False)
    failed = pytester.runpytest_subprocess("-p", "no:cacheprovider", *workers)
    assert failed.ret == 1 and "lacks the sandbox layers netns, ipcns" in failed.stdout.str()
    monkeypatch.setenv("SPADE_ALLOW_MISSING_LAYERS", "1")
    accepted = pytester.runpytest_subprocess("-p", "no:cacheprovider", *workers)
    assert accepted.ret == 0 and "Accepted (SPADE_ALLOW_MISSING_LAYERS=1)" in accepted.stdout.str()
