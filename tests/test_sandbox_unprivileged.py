"""The hostile sandbox tests again, as a throw-away unprivileged user (CI runs the suite as root).

Without root there is no uid of its own per child: a user namespace, seccomp and landlock must
carry the same guarantees. The test copies what the inner run needs into a world-readable
folder (the package, the sandbox tests, the few site-packages they import), finds a Python of
this version that the user can execute, and runs pytest under `setpriv` with a uid that no
account uses. It skips, saying why, only where the machine cannot do this at all."""
import importlib.util
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ["test_sandbox.py", "test_sandbox_isolation.py", "test_sandbox_replies.py", "test_sandbox_adversary.py",
         "test_sandbox_validate.py", "test_sandbox_solution.py", "test_sandbox_layers.py"]
PACKAGES = ["gymnasium", "numpy", "cloudpickle", "farama_notifications", "typing_extensions",
            "pyseccomp", "pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py"]
# Where a kernel feature is missing the inner tests skip, saying which layer; these need no
# particular layer, so they must run and pass everywhere.
MUST_PASS = {"test_every_available_layer_is_active",
             "test_no_environment_can_change_the_trainers_limits_priority_or_scheduling",
             "test_a_sandbox_cannot_reach_its_sibling", "test_no_child_outlives_a_killed_trainer",
             "test_forged_reply_is_a_protocol_error", "test_write_and_read_share_one_deadline",
             "test_a_seed_gives_the_same_first_observation_in_six_fresh_children"}
UID = 1_899_999_999  # below the sandbox's own range; no account has it (checked below)
INNER_TIMEOUT_S = 900


def copy_readable(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
        shutil.copy2(src, dst)


def build_tree(top: Path) -> Path:
    """top/repo (the package and the sandbox tests) and top/site (their site-packages)."""
    repo, site = top / "repo", top / "site"
    copy_readable(ROOT / "spade_mini", repo / "spade_mini")
    (repo / "tests").mkdir(parents=True)
    for name in TESTS + ["hostile.py", "conftest.py"]:
        copy_readable(ROOT / "tests" / name, repo / "tests" / name)
    site.mkdir()
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None and not spec.submodule_search_locations:
            continue  # optional (e.g. `py` in newer pytest)
        path = Path(spec.submodule_search_locations[0] if spec.submodule_search_locations
                    else spec.origin)
        copy_readable(path, site / path.name)
        libs = path.parent / f"{name}.libs"  # vendored shared libraries of a wheel
        if libs.is_dir():
            copy_readable(libs, site / libs.name)
    for path in [top, *top.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return repo


def as_user(*cmd: str, env: dict, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups", *cmd],
                          env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


# It must import what the tests need, and start itself again (as every sandbox child does).
PYTHON_CHECK = ("import subprocess, sys, gymnasium, pytest, pyseccomp; "
                "subprocess.run([sys.executable, '-S', '-c', 'pass'], check=True)")


def runnable_python(env: dict, cwd: Path) -> str | None:
    """An interpreter of this Python version that the throw-away user can start."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (f"/usr/bin/{version}", f"/usr/local/bin/{version}", shutil.which(version),
                      sys.executable):
        if candidate and os.path.exists(candidate) and as_user(
                candidate, "-c", PYTHON_CHECK, env=env, cwd=cwd, timeout=60).returncode == 0:
            return candidate
    return None


def test_hostile_sandbox_tests_pass_as_an_unprivileged_user():
    if os.geteuid() != 0:
        pytest.skip("not root: this run of the suite is itself the unprivileged run")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed, so no user can be switched to")
    try:
        pwd.getpwuid(UID)
        pytest.skip(f"uid {UID} belongs to an account here; the test needs an unused one")
    except KeyError:
        pass
    top = Path(tempfile.mkdtemp(prefix="spade_unprivileged_"))  # pytest's own are 0700
    try:
        run_as_user(top)
    finally:
        shutil.rmtree(top)


def run_as_user(top: Path) -> None:
    repo = build_tree(top)
    work = top / "work"  # the one folder the user may write: pytest's own temp files
    work.mkdir()
    os.chown(work, UID, UID)
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(work), "USER": "sandboxtest",
           "PYTHONPATH": f"{repo}:{top / 'site'}", "PYTHONDONTWRITEBYTECODE": "1",
           "OMP_NUM_THREADS": "1", "SPADE_ALLOW_MISSING_LAYERS": "1"}  # the layers it lacks: asserted below
    python = runnable_python(env, work)
    if python is None:
        pytest.skip(f"no Python {sys.version_info.major}.{sys.version_info.minor} that an "
                    f"unprivileged user can run ({sys.executable} is in a private folder); "
                    "install the system python3 package of this version")
    out = as_user(python, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                  f"--basetemp={work / 'pytest'}", *[f"tests/{t}" for t in TESTS],
                  env=env, cwd=repo, timeout=INNER_TIMEOUT_S)
    tail = (out.stdout + out.stderr)[-6000:]
    assert out.returncode == 0, tail
    passed = set(re.findall(r"^PASSED \S+::(\w+)", out.stdout, re.MULTILINE))
    assert MUST_PASS <= passed, MUST_PASS - passed
    skipped = re.findall(r"^SKIPPED \[\d+\] (\S+): (.*)", out.stdout, re.MULTILINE)
    assert all("needs one of the layers" in why for _, why in skipped), skipped
    assert not re.search(r"^(FAILED|ERROR) ", out.stdout, re.MULTILINE), tail
