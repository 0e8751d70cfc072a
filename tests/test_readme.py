"""The README's Python blocks run as written, so the quick start cannot rot."""

import importlib.util
import re
import warnings
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
# The Dask block needs a real cluster address; tests/calibrators/test_search.py covers that path.
RUNNABLE = [block for block in BLOCKS if "Client(" not in block]


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
