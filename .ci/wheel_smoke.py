"""Smoke test of an installed reliacal wheel, run by .ci/check_wheel from outside the source tree.

It imports the package, runs the command (``--version``, ``calibrate`` with
``--save-model``, ``evaluate``) on a small prediction file, and loads the
saved model back; every step must work from the installed files alone.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import reliacal


def run(*arguments: str) -> str:
    result = subprocess.run(
        [str(Path(sys.executable).with_name("reliacal")), *arguments],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"reliacal {' '.join(arguments)} failed:\n{result.stderr}")
    return result.stdout + result.stderr


def main(source_tree: str) -> None:
    installed = Path(reliacal.__file__).resolve()
    if Path(source_tree).resolve() in installed.parents:
        raise SystemExit(f"reliacal was imported from the source tree ({installed})")
    print(f"reliacal {reliacal.__version__} from {installed.parent}")

    version = run("--version").strip()
    if version != f"reliacal {reliacal.__version__}":
        raise SystemExit(f"--version printed {version!r}")

    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        rng = np.random.default_rng(0)
        for name in ("cal", "test"):
            logits = 3.0 * rng.normal(size=(400, 4))
            scaled = np.exp(logits / 3.0)
            probabilities = scaled / scaled.sum(axis=1, keepdims=True)
            labels = np.array([rng.choice(4, p=row) for row in probabilities])
            np.savez(folder / f"{name}.npz", logits=logits, labels=labels)
        model = folder / "model.zip"
        out = folder / "calibrated.npz"
        run(
            "calibrate",
            str(folder / "cal.npz"),
            str(folder / "test.npz"),
            "--method",
            "temperature",
            "--save-model",
            str(model),
            "--out",
            str(out),
        )
        print(run("evaluate", str(out)))
        loaded = reliacal.load(model)
        with np.load(folder / "test.npz") as data:
            probabilities = loaded.predict_proba(data["logits"])
        if not np.allclose(probabilities.sum(axis=1), 1.0):
            raise SystemExit("the loaded model's probabilities do not sum to 1")
        print(f"loaded {type(loaded).__name__} with T = {loaded.temperature_:.3f}")


if __name__ == "__main__":
    main(sys.argv[1])
