"""The notebooks run top to bottom (quick mode), so they cannot go stale.

Executed with nbclient on this interpreter's kernel; skipped where nbclient,
ipykernel or matplotlib are not installed (tools/test installs them, extra
"notebooks", for the normal interpreter only).  The free-threaded parts run
benchmarks/compare.py under $SEQLOCK_NOTEBOOK_FT_PYTHON when it is set.
"""

from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", ["why_a_seqlock.ipynb",
                                  "lock_free_reads_at_scale.ipynb"])
def test_notebook_runs_top_to_bottom(name, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("SEQLOCK_NOTEBOOK_QUICK", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=180, kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()  # raises CellExecutionError if any cell fails
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]


MACHINE_PATHS = ("/tmp/", "/root/", "/home/", "/work/", "/usr/local/")


@pytest.mark.parametrize("name", ["why_a_seqlock.ipynb",
                                  "lock_free_reads_at_scale.ipynb"])
def test_committed_notebook_outputs_name_no_path_of_the_machine_that_ran_them(name):
    import json
    nb = json.loads((NOTEBOOKS / name).read_text())
    texts = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            for value in [out.get("text", "")] + list(out.get("data", {}).values()):
                texts.append(value if isinstance(value, str) else "".join(value))
    leaks = [p for p in MACHINE_PATHS for t in texts if p in t]
    assert leaks == []


def cells_of_committed(name):
    import json
    nb = json.loads((NOTEBOOKS / name).read_text())
    return [("md" if c["cell_type"] == "markdown" else "code",
             c["source"] if isinstance(c["source"], str) else "".join(c["source"]))
            for c in nb["cells"]]


def test_committed_notebooks_match_their_source_in_make_notebooks():
    """tools/make_notebooks.py is the notebooks' source of truth: a cell
    edited in a notebook and not there (or the reverse) fails here."""
    import importlib.util
    path = NOTEBOOKS.parent / "tools" / "make_notebooks.py"
    spec = importlib.util.spec_from_file_location("make_notebooks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert set(module.NOTEBOOKS) == {p.name for p in NOTEBOOKS.glob("*.ipynb")}
    for name, cells in module.NOTEBOOKS.items():
        assert cells_of_committed(name) == [(kind, src) for kind, src in cells], name
