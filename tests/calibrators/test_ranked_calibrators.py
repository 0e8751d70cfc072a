"""The contract shared by the calibrators that CalArena ranks first: SMS, SVS, quadratic
scaling, Venn-Abers, centered isotonic regression and spline calibration.

Each method's oracles (exact solvers, reference packages, hand-computed cases) are in its
own test module; this one checks what every one of them owes the estimator contract.
"""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
from scipy.special import expit, softmax
from sklearn.base import clone
from sklearn.utils.estimator_checks import parametrize_with_checks

import reliacal
from reliacal.calibrators import (
    CenteredIsotonicCalibration,
    QuadraticScaling,
    SplineCalibration,
    StructuredMatrixScaling,
    StructuredVectorScaling,
    VennAbersCalibration,
)

RANKED = [
    StructuredMatrixScaling(),
    StructuredVectorScaling(),
    QuadraticScaling(),
    VennAbersCalibration(),
    VennAbersCalibration(inductive=False, n_splits=3),
    CenteredIsotonicCalibration(),
    CenteredIsotonicCalibration(scale="probability"),
    SplineCalibration(reg_param_grid=[0.01, 1.0], cv=3),
]
NAMES = [
    "StructuredMatrixScaling",
    "StructuredVectorScaling",
    "QuadraticScaling",
    "VennAbersCalibration",
    "VennAbersCalibration-cross",
    "CenteredIsotonicCalibration",
    "CenteredIsotonicCalibration-probability",
    "SplineCalibration",
]


@parametrize_with_checks(RANKED, expected_failed_checks=lambda e: e._expected_failed_checks())
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


def _problem(seed, n=400, n_classes=4):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n)
    logits = 2.0 * (np.eye(n_classes)[y] + rng.normal(size=(n, n_classes)))
    return logits, y


@pytest.fixture(params=range(len(RANKED)), ids=NAMES)
def ranked(request):
    return clone(RANKED[request.param])


@pytest.mark.parametrize("n_classes", [2, 4])
def test_pickle_and_save_load_round_trip(ranked, n_classes, tmp_path, no_pickle):
    logits, y = _problem(0, n_classes=n_classes)
    model = ranked.fit(logits[:300], y[:300])
    expected = model.predict_proba(logits[300:])
    path = tmp_path / "model.zip"
    model.save(path)
    loaded = reliacal.load(path)
    assert type(loaded) is type(model)
    np.testing.assert_array_equal(loaded.predict_proba(logits[300:]), expected)
    np.testing.assert_array_equal(loaded.predict(logits[300:]), model.predict(logits[300:]))


def test_pickle_round_trip(ranked):
    logits, y = _problem(1)
    model = ranked.fit(logits[:300], y[:300])
    restored = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(
        restored.predict_proba(logits[300:]), model.predict_proba(logits[300:])
    )


@pytest.mark.parametrize("n_classes", [2, 4])
def test_torch_map_equals_predict_proba_and_traces(ranked, n_classes):
    torch = pytest.importorskip("torch")
    logits, y = _problem(2, n_classes=n_classes)
    model = ranked.fit(logits[:300], y[:300])
    module = model._torch_map()
    test = torch.as_tensor(logits[300:], dtype=torch.float64)
    with torch.no_grad():
        out = module(test).numpy()
        traced = torch.jit.trace(module, test[:7])
        out_traced = traced(test).numpy()
    np.testing.assert_allclose(out, model.predict_proba(logits[300:]), rtol=0, atol=1e-12)
    np.testing.assert_allclose(out_traced, out, rtol=0, atol=1e-12)


@pytest.mark.parametrize("n_classes", [2, 4])
def test_to_torch_scripts_and_exports_to_onnx(ranked, n_classes, onnx_outputs):
    torch = pytest.importorskip("torch")
    logits, y = _problem(7, n_classes=n_classes)
    model = ranked.fit(logits[:300], y[:300])
    expected = model.predict_proba(logits[300:])
    module = model.to_torch()
    test = torch.as_tensor(logits[300:])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit's deprecation notices
        scripted = torch.jit.script(module)
    with torch.no_grad():
        np.testing.assert_allclose(module(test).numpy(), expected, rtol=0, atol=1e-12)
        np.testing.assert_allclose(scripted(test).numpy(), expected, rtol=0, atol=1e-12)
    onnx_out = onnx_outputs(module, test[:8], logits[300:])
    np.testing.assert_allclose(onnx_out, expected, rtol=0, atol=1e-12)


def test_binary_scores_equal_their_two_logit_columns(ranked):
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, size=300)
    scores = 3.0 * (2 * y - 1) + 2.0 * rng.normal(size=300)
    columns = np.column_stack([np.zeros_like(scores), scores])
    as_scores = clone(ranked).fit(scores, y)
    as_columns = clone(ranked).fit(columns, y)
    assert as_scores.n_features_in_ == 1
    np.testing.assert_allclose(
        as_scores.predict_proba(scores), as_columns.predict_proba(columns), atol=1e-12
    )
    as_probabilities = clone(ranked).set_params(input="probs").fit(expit(scores), y)
    np.testing.assert_allclose(
        as_probabilities.predict_proba(expit(scores)),
        as_columns.predict_proba(columns),
        atol=1e-7,
    )


def test_probabilities_input_equals_their_logs(ranked):
    logits, y = _problem(4)
    probabilities = softmax(logits, axis=1)
    on_probs = clone(ranked).set_params(input="probs").fit(probabilities, y)
    on_logs = clone(ranked).fit(np.log(probabilities), y)
    np.testing.assert_allclose(
        on_probs.predict_proba(probabilities),
        on_logs.predict_proba(np.log(probabilities)),
        atol=1e-10,
    )


def test_bad_inputs_get_clear_errors_and_warnings(ranked):
    logits, y = _problem(5, n=200, n_classes=2)
    with pytest.raises(ValueError, match="NaN or infinite"):
        clone(ranked).fit(np.where(logits > 3, np.nan, logits), y)
    with pytest.raises(ValueError, match=r"labels \[2\] are not column indices"):
        clone(ranked).fit(logits, np.where(y == 1, 2, y))
    with pytest.raises(ValueError, match="does not hold probabilities"):
        clone(ranked).set_params(input="probs").fit(logits, y)
    with pytest.raises(ValueError, match="0 sample"):
        clone(ranked).fit(np.empty((0, 2)), np.empty(0, dtype=int))
    with pytest.warns(UserWarning, match="y holds a single class"):
        clone(ranked).fit(logits, np.ones_like(y))
    with pytest.warns(UserWarning, match="every row of X holds the same scores"):
        clone(ranked).fit(np.tile([0.5, 1.5], (200, 1)), y)
    with pytest.warns(UserWarning, match="look like probabilities"):
        clone(ranked).fit(softmax(logits, axis=1), y)


def test_a_calibration_split_missing_a_class_keeps_its_column(ranked):
    logits, y = _problem(6, n=600, n_classes=4)
    present = y < 3
    with warnings.catch_warnings():
        # The absent class's map has no finite maximum-likelihood fit for some methods.
        warnings.simplefilter("ignore")
        model = clone(ranked).fit(logits[present], y[present])
    probabilities = model.predict_proba(logits)
    assert probabilities.shape == (600, 4)
    assert np.all(np.isfinite(probabilities))
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0)


def test_exported_from_both_public_tables():
    import reliacal.calibrators

    for name in NAMES:
        name = name.split("-")[0]
        assert getattr(reliacal.calibrators, name).__name__ == name
        assert getattr(reliacal, name) is getattr(reliacal.calibrators, name)


def test_fitting_them_on_numpy_logits_leaves_torch_unloaded(torch_modules_after):
    loaded = torch_modules_after(
        """
        import pickle
        import warnings
        import numpy as np
        from reliacal.calibrators import (
            CenteredIsotonicCalibration, QuadraticScaling, SplineCalibration,
            StructuredMatrixScaling, StructuredVectorScaling, VennAbersCalibration,
        )

        rng = np.random.default_rng(0)
        y = rng.integers(0, 3, size=200)
        logits = 2.0 * (np.eye(3)[y] + rng.normal(size=(200, 3)))
        for model in (StructuredMatrixScaling(), StructuredVectorScaling(), QuadraticScaling(),
                      VennAbersCalibration(), CenteredIsotonicCalibration(),
                      SplineCalibration(reg_param_grid=[1.0])):
            model.fit(logits, y)
            assert model.predict_proba(logits).shape == (200, 3)
            pickle.loads(pickle.dumps(model)).predict(logits)
        """
    )
    assert loaded == []
