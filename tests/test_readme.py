"""The README's Python blocks run as written, so the quick start cannot rot."""

import importlib.util
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
# The Dask blocks start a cluster: the search's needs a real address
# (tests/calibrators/test_search.py covers that path), the evaluation's runs as a script below.
RUNNABLE = [block for block in BLOCKS if "Client(" not in block]
(DASK_EVALUATION,) = [block for block in BLOCKS if "read_parquet" in block]
_NUMBER = re.compile(r"-?\d+\.\d+(?:e[-+]\d+)?")


def test_readme_has_python_blocks():
    assert len(RUNNABLE) >= 2


@pytest.mark.parametrize("index", range(len(RUNNABLE)))
def test_readme_block_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(RUNNABLE[index], f"README block {index}", "exec"), namespace)
    if "SMOKE EXAMPLE" in RUNNABLE[index]:
        # The README says its fine-tuning lines learn nothing and that fit warns so. Which
        # of the two fits warns depends on one validation prediction either side of the
        # majority class, so at least one, not both.
        chance = [w for w in caught if "never rose above chance" in str(w.message)]
        assert chance
        held_out = slice(1000, 1300)
        for name in ("calattn", "director"):
            model = namespace[name]
            predicted = model.predict(namespace["images"][held_out])
            accuracy = (predicted == namespace["digits"][held_out]).mean()
            assert accuracy < 0.2, (name, accuracy)
    if index == 0:
        assert abs(namespace["ts"].temperature_ - 3.0) < 0.3
    else:
        assert namespace["temperatures"].shape == (600,)
        assert (namespace["per_sample_scale"] > 0).all()
        assert (namespace["scores"].to_numpy() >= 0).all()


@pytest.mark.slow
def test_readme_dask_evaluation_runs_as_a_script_on_a_parquet_folder(tmp_path):
    # As the block says: a script (LocalCluster's worker processes import it) and a folder
    # of parquet files with a label column and p0..p9, ten files, so that Dask reads the
    # label column alone in fewer partitions than the probabilities.
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    pytest.importorskip("distributed")
    from reliacal.metrics import calibration_report, softmax

    rng = np.random.default_rng(11)
    probs = softmax(rng.normal(scale=2.0, size=(3000, 10)))
    labels = rng.integers(0, 10, size=3000)
    (tmp_path / "predictions").mkdir()
    for index, rows in enumerate(np.array_split(np.arange(3000), 10)):
        frame = pd.DataFrame(probs[rows], columns=[f"p{k}" for k in range(10)])
        frame.assign(label=labels[rows]).to_parquet(tmp_path / "predictions" / f"{index}.parquet")
    script = tmp_path / "evaluate.py"
    script.write_text(DASK_EVALUATION)
    root = str(README.parent)
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": root, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    printed = result.stdout
    expected = repr(calibration_report(labels, {"model": probs}))
    # The same table: its words as printed, and its numbers up to the printed digits.
    assert _NUMBER.sub("#", printed).split() == _NUMBER.sub("#", expected).split()
    np.testing.assert_allclose(
        [float(x) for x in _NUMBER.findall(printed)],
        [float(x) for x in _NUMBER.findall(expected)],
        rtol=1e-5,
        atol=1e-9,
    )


def _layout_rows() -> dict[str, int]:
    """Unit -> layer, from the table of the README's Layout section."""
    layout = README.read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in layout.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if line.startswith("| ") and cells[0].isdigit():
            for name in re.findall(r"`([\w]+)(?:\.py|/)`", cells[1]):
                rows[name] = int(cells[0])
    return rows


def test_layout_section_is_the_architecture_tests_layers():
    spec = importlib.util.spec_from_file_location(
        "architecture", Path(__file__).with_name("test_architecture.py")
    )
    architecture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(architecture)
    assert _layout_rows() == architecture.LAYER_OF
