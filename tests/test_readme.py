"""The README's Python blocks run as written, so the quick start cannot rot."""

import re
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
    exec(compile(RUNNABLE[index], f"README block {index}", "exec"), namespace)
    if index == 0:
        assert abs(namespace["ts"].temperature_ - 3.0) < 0.3
    else:
        assert namespace["temperatures"].shape == (600,)
        assert (namespace["per_sample_scale"] > 0).all()
        assert (namespace["scores"].to_numpy() >= 0).all()
