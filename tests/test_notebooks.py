"""The teaching notebooks: each runs top to bottom on this environment's kernel, in a temporary
working directory, within a time limit, and ends in its visible check; the committed copies hold
no outputs."""
import os
import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 300  # one cell
NOTEBOOK_LIMIT_S = 300  # the whole notebook, kernel start included
PROBE = "import os, sys\nprint(sys.prefix)\nprint(os.getcwd())"


def test_the_six_notebooks_are_there():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06"], NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebook_has_no_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "a notebook without code cells"
    dirty = [i for i, c in enumerate(code) if c.outputs or c.execution_count is not None]
    assert not dirty, f"{path.name}: code cells {dirty} hold outputs; strip them before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom(path, tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")  # no display: figures render off screen
    if "OMP_NUM_THREADS" not in os.environ:
        # On a small CPU shared with other jobs, one thread per process avoids OpenMP
        # oversubscription, which can slow token-by-token generation several-fold.
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(PROBE))  # which interpreter, which directory
    listing = sorted(p.name for p in NOTEBOOK_DIR.iterdir())
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    start = time.monotonic()
    client.execute()  # raises CellExecutionError, with the failing cell, if any cell fails
    elapsed = time.monotonic() - start

    prefix, cwd = "".join(o.get("text", "") for o in nb.cells[0].outputs).split()
    assert prefix == sys.prefix, f"the kernel ran {prefix}, not this environment ({sys.prefix})"
    assert Path(cwd).resolve() == tmp_path.resolve()
    last = [c for c in nb.cells if c.cell_type == "code"][-1]
    printed = "".join(o.get("text", "") for o in last.outputs)
    assert printed.startswith("OK:"), f"the final check printed {printed!r}"
    assert elapsed < NOTEBOOK_LIMIT_S, f"{path.name} took {elapsed:.0f} s (limit {NOTEBOOK_LIMIT_S} s)"
    assert sorted(p.name for p in NOTEBOOK_DIR.iterdir()) == listing, "the notebook wrote into the repo"
    print(f"{path.name}: {elapsed:.1f} s")
