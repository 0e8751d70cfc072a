"""What importing a module costs: the numpy-only paths must not load PyTorch."""

from __future__ import annotations

import os
import subprocess
import sys

import reliacal.calibrators


def test_fitting_and_pickling_calibrators_on_numpy_logits_leaves_torch_unloaded(
    torch_modules_after,
):
    loaded = torch_modules_after(
        """
        import pickle
        import warnings
        import numpy as np
        import pandas as pd
        from reliacal.calibrators import MatrixScaling, TemperatureScaling, VectorScaling

        rng = np.random.default_rng(0)
        logits = rng.normal(size=(200, 3)) * 3.0
        labels = np.where(rng.uniform(size=200) < 0.8, logits.argmax(axis=1), 0)
        models = (
            TemperatureScaling(),
            TemperatureScaling(objective="ece"),
            VectorScaling(),
            MatrixScaling(),
        )
        for model in models:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.fit(pd.DataFrame(logits), labels)
            assert model.predict_proba(logits).shape == (200, 3)
            assert 0 <= model.score(logits, labels) <= 1
            restored = pickle.loads(pickle.dumps(model))  # joblib and GridSearchCV pickle
            assert restored.predict(logits).shape == (200,)
        """
    )
    assert loaded == []


def test_metrics_and_the_package_leave_torch_unloaded(torch_modules_after):
    loaded = torch_modules_after(
        """
        import numpy as np
        import reliacal
        from reliacal.metrics import calibration_report

        calibration_report([0, 1], {"m": np.array([[0.8, 0.2], [0.4, 0.6]])})
        """
    )
    assert loaded == []


def test_every_calibrator_name_is_still_importable():
    for name in reliacal.calibrators.__all__:
        assert getattr(reliacal.calibrators, name).__name__ == name
    assert set(dir(reliacal.calibrators)) >= {"AdaptiveTS", "TemperatureScaling"}


def test_every_private_module_of_the_training_loop_imports_on_its_own():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for module in ("results", "loop", "checkpoint", "guard", "randomness", "state", "selection"):
        result = subprocess.run(
            [sys.executable, "-c", f"import reliacal.training._{module}"],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": root},
        )
        assert result.returncode == 0, f"reliacal.training._{module}: {result.stderr[-500:]}"
