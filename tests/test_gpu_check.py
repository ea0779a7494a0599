"""bench/gpu_check.py runs end to end at its reduced size on the CPU, through the memory plan, and
reports every phase with its planned and measured peak."""
import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parent.parent / "bench" / "gpu_check.py"


def test_gpu_check_runs_reduced_on_cpu():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(SCRIPT), "--reduced", "--device", "cpu"], capture_output=True,
                         text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    phases = {m.group(1): m for m in (re.match(r"\s+(design|play|update)\s+([\d.]+) s\s+([\d.]+) .*peak planned\s+"
                                               r"([\d.]+) GB, measured\s+([\d.]+) GB", line)
                                      for line in lines) if m}
    assert set(phases) == {"design", "play", "update"}
    assert all(float(m.group(3)) > 0 for m in phases.values())  # tokens per second
    assert all(float(m.group(4)) > 0 and float(m.group(5)) > 0 for m in phases.values())  # planned, measured
    assert "memory plan: " in out.stdout and "out-of-memory retries: 0" in out.stdout
    reused = re.search(r"reused (\d+) prompt tokens", out.stdout)
    assert reused and int(reused.group(1)) > 0  # the second turn continued from the first
    assert re.search(r"seconds per iteration .*: [\d.]+", out.stdout)
    assert "not run: 4-bit NF4" in out.stdout
