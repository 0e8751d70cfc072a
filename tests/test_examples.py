"""The integration examples in examples/ run as scripts and report what they promise.

Each fine-tunes a tiny transformer with CalAttn (reliacal.nn) and prints, per reading of
the network, a line ``<name>: accuracy A  ECE E``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
LINE = re.compile(r"^\s*(?P<name>.+?): accuracy (?P<accuracy>[0-9.]+)\s+ECE (?P<ece>[0-9.]+)$")


def run_example(name: str) -> dict[str, tuple[float, float]]:
    """Run ``examples/<name>`` in a fresh interpreter; return ``{reading: (accuracy, ece)}``."""
    # The working tree first, so that the examples import this checkout's reliacal.
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    readings = {}
    for line in result.stdout.splitlines():
        match = LINE.match(line)
        if match:
            readings[match["name"]] = (float(match["accuracy"]), float(match["ece"]))
    return readings


def check_calattn_readings(readings, chance: float) -> None:
    calibrated_accuracy, calibrated_ece = readings["CalAttn z / s(x)"]
    raw_accuracy, raw_ece = readings["backbone logits z"]
    # Dividing by a positive per-sample scale never changes the predicted class.
    assert calibrated_accuracy == raw_accuracy
    assert calibrated_accuracy > 2 * chance  # it learned
    assert 0 <= calibrated_ece <= 1 and 0 <= raw_ece <= 1
    # The scale is what calibrates: z alone is read without it.
    assert calibrated_ece < raw_ece


@pytest.mark.slow
def test_plain_pytorch_loop_example():
    readings = run_example("calattn_plain_pytorch.py")
    check_calattn_readings(readings, chance=0.1)
    accuracy, ece = readings["CalAttn + temperature"]
    assert accuracy == readings["CalAttn z / s(x)"][0] and 0 <= ece <= 1


@pytest.mark.slow
def test_lightning_example():
    pytest.importorskip("lightning")
    check_calattn_readings(run_example("calattn_lightning.py"), chance=0.1)


@pytest.mark.slow
def test_hugging_face_trainer_example():
    pytest.importorskip("transformers")
    if importlib.util.find_spec("accelerate") is None:
        pytest.skip("the Hugging Face Trainer needs accelerate (in the dev extra)")
    check_calattn_readings(run_example("calattn_hf_trainer.py"), chance=1 / 3)


def test_every_example_script_is_tested_and_linked_from_the_readme():
    scripts = sorted(path.name for path in EXAMPLES.glob("*.py"))
    tested = Path(__file__).read_text()
    readme = (ROOT / "README.md").read_text()
    for script in scripts:
        assert f'"{script}"' in tested, script
        assert f"examples/{script}" in readme, script
