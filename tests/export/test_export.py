"""calibrator.to_torch(), attach, TorchScript and ONNX: the graphs equal predict_proba.

Every post-hoc calibrator is fitted on 2000 rows of each bundled CIFAR record
and its module, its traced TorchScript and its ONNX graph (run by
onnxruntime when installed) are compared with ``predict_proba`` on 300 other
rows, to 1e-6. Traces are made on 8 rows and run on 300, so the batch axis
stays free.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from scipy.special import softmax

from reliacal.calibrators import (
    AdaptiveTS,
    HistogramBinning,
    IsotonicCalibration,
    MatrixScaling,
    TemperatureScaling,
    VectorScaling,
    make_calibrator,
)
from reliacal.datasets import make_logits
from reliacal.export import attach, calibrator_module

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CALIBRATION = slice(0, 2000)
EVALUATION = slice(5000, 5300)
TOLERANCE = 1e-6


@pytest.fixture(scope="module")
def fitted(load_record, post_hoc_calibrator):
    """``fitted(record, name) -> (calibrator, evaluation probabilities)``, each fitted once."""
    cache = {}

    def get(record, name):
        if (record, name) not in cache:
            probs, labels = load_record(record)
            # float64: numpy's and torch's float32 logs differ in the last bit for ~4% of
            # entries, which a Dirichlet map on 100 classes amplifies to ~1e-6
            # (test_float32_probabilities_agree_to_float32_rounding covers float32).
            probs = probs.astype(np.float64)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # convergence of the classic maps
                calibrator = post_hoc_calibrator(name).fit(probs[CALIBRATION], labels[CALIBRATION])
            cache[record, name] = calibrator, probs[EVALUATION]
        return cache[record, name]

    return get


def small_temperature_scaling() -> TemperatureScaling:
    """Fitted on 10 rows, 8 of them labelled by their larger logit (a finite optimum)."""
    logits = np.array([[0.0, 2.0], [2.0, 0.0]] * 5)
    return TemperatureScaling().fit(logits, [1, 0, 1, 0, 0, 1, 1, 0, 1, 0])


def scripted(module: torch.nn.Module):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script's deprecation notice
        return torch.jit.script(module)


def traced(module: torch.nn.Module, example: torch.Tensor):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.trace's deprecation notice
        return torch.jit.trace(module, example)


# Dirichlet calibration fits K^2 + K parameters: ~12 s per 100-class record. The spline's
# and the cross Venn-Abers' 100 maps take longer to fit, script and export; every new
# calibrator's module is scripted and exported on 2 and 4 classes in
# tests/calibrators/test_ranked_calibrators.py.
@pytest.mark.slow_post_hoc("dirichlet", "spline", "venn-abers-cross")
def test_module_torchscript_and_onnx_equal_predict_proba(
    fitted, record_name, post_hoc_name, onnx_outputs
):
    name = post_hoc_name
    calibrator, probs = fitted(record_name, name)
    expected = calibrator.predict_proba(probs)
    module = calibrator.to_torch()
    inputs = torch.as_tensor(probs)
    with torch.no_grad():
        eager = module(inputs).numpy()
        trace = traced(module, inputs[:8])(inputs).numpy()
    assert eager.dtype == np.float64 and eager.shape == expected.shape
    np.testing.assert_allclose(eager, expected, rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(trace, expected, rtol=0, atol=TOLERANCE)
    if name != "adaptive":  # AdaTS's network has optional buffers: trace only
        with torch.no_grad():
            script = scripted(module)(inputs).numpy()
        np.testing.assert_allclose(script, expected, rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(
        onnx_outputs(module, inputs[:8], probs), expected, rtol=0, atol=TOLERANCE
    )


def test_float32_probabilities_agree_to_float32_rounding(load_record):
    # float32 probabilities are logged in float32, as predict_proba does; the two logs
    # may differ in the last bit, so the agreement is to float32 rounding of the logits.
    probs, labels = load_record("wideresnet-16-4-cifar-100")
    calibrator = VectorScaling(input="probs").fit(probs[CALIBRATION], labels[CALIBRATION])
    out = calibrator.to_torch()(torch.as_tensor(probs[EVALUATION])).numpy()
    np.testing.assert_allclose(
        out, calibrator.predict_proba(probs[EVALUATION]), rtol=0, atol=TOLERANCE
    )


def test_temperature_module_is_softmax_of_scaled_logits():
    # Oracle written out by hand: softmax(z / T) for T = 2.
    calibrator = small_temperature_scaling()
    calibrator.temperature_ = 2.0
    logits = np.array([[0.0, 2.0], [3.0, -1.0]])
    out = calibrator.to_torch()(torch.as_tensor(logits)).numpy()
    # z / 2 = [0, 1] and [1.5, -0.5]: p = [1, e] / (1 + e) and [e^2, 1] / (1 + e^2).
    e = np.e
    expected = [[1 / (1 + e), e / (1 + e)], [e**2 / (1 + e**2), 1 / (1 + e**2)]]
    np.testing.assert_allclose(out, expected, atol=1e-12)


def test_isotonic_lookup_interpolates_between_knots_and_clips_beyond():
    # Binary isotonic: one map on the positive class's log-odds s = z_1 - z_0.
    calibrator = IsotonicCalibration().fit(np.zeros((4, 2)) + [[0.0, -2.0]], [0, 0, 1, 1])
    calibrator.knots_ = [np.array([-1.0, 0.0, 1.0, 2.0])]
    calibrator.values_ = [np.array([0.1, 0.1, 0.5, 0.9])]
    scores = np.array([-5.0, -0.5, 0.5, 1.5, 9.0])
    logits = np.column_stack([np.zeros_like(scores), scores])
    # Hand-computed: clipped ends, flat run, then the lines through the knots.
    positive = np.array([0.1, 0.1, 0.3, 0.7, 0.9])
    out = calibrator.to_torch()(torch.as_tensor(logits)).numpy()
    np.testing.assert_allclose(out[:, 1], positive, atol=1e-12)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-12)


def test_binning_lookup_takes_the_bin_of_each_score():
    calibrator = HistogramBinning(n_bins=2).fit(np.zeros((4, 2)) + [[0.0, -2.0]], [0, 0, 1, 1])
    calibrator.edges_ = [np.array([0.0, 1.0])]
    calibrator.values_ = [np.array([0.2, 0.6, 0.8])]
    scores = np.array([-3.0, 0.0, 0.5, 1.0, 4.0])  # an edge belongs to the bin it starts
    logits = np.column_stack([np.zeros_like(scores), scores])
    out = calibrator.to_torch()(torch.as_tensor(logits)).numpy()
    np.testing.assert_allclose(out[:, 1], [0.2, 0.6, 0.6, 0.8, 0.8], atol=1e-12)


def test_adaptive_with_features_members_and_confidence_inputs(onnx_outputs):
    rng = np.random.default_rng(0)
    logits, y = make_logits(400, 3, scale=1.0, random_state=rng)
    logits *= 3.0  # over-confident
    features = rng.normal(size=(400, 5)) + y[:, None]
    X = np.column_stack([features, logits])
    calibrator = AdaptiveTS(
        n_logits=logits.shape[1],
        hidden_layer_sizes=(8,),
        temperature_hidden_sizes=(4,),
        max_epochs=2,
        n_members=2,
        confidence_inputs=True,
        random_state=0,
    ).fit(X, y)
    module = calibrator.to_torch()
    inputs = torch.as_tensor(X)
    with torch.no_grad():
        np.testing.assert_allclose(
            module(inputs).numpy(), calibrator.predict_proba(X), rtol=0, atol=TOLERANCE
        )
        script = traced(module, inputs[:8])(inputs).numpy()
    np.testing.assert_allclose(script, calibrator.predict_proba(X), rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(
        onnx_outputs(module, inputs[:8], X), calibrator.predict_proba(X), rtol=0, atol=TOLERANCE
    )
    with pytest.raises(ValueError, match="5 feature columns besides the logits"):
        attach(torch.nn.Identity(), calibrator)
    with pytest.raises(ValueError, match="n_draws=1"):
        calibrator.set_params(n_draws=4).to_torch()


def test_attach_runs_model_then_calibrator_and_exports(onnx_outputs):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    model = model.double()
    rng = np.random.default_rng(0)
    inputs = rng.normal(size=(500, 6))
    with torch.no_grad():
        logits = 5.0 * model(torch.as_tensor(inputs)).numpy()
    model[2].weight.data *= 5.0
    model[2].bias.data *= 5.0
    y = np.array([rng.choice(3, p=row) for row in softmax(logits / 5.0, axis=1)])
    calibrator = MatrixScaling().fit(logits, y)
    deployed = attach(model, calibrator)
    with torch.no_grad():
        out = deployed(torch.as_tensor(inputs)).numpy()
        script = traced(deployed, torch.as_tensor(inputs[:8]))(torch.as_tensor(inputs)).numpy()
    expected = calibrator.predict_proba(logits)
    np.testing.assert_allclose(out, expected, rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(script, expected, rtol=0, atol=TOLERANCE)
    exported = onnx_outputs(deployed, torch.as_tensor(inputs[:8]), inputs)
    np.testing.assert_allclose(exported, expected, rtol=0, atol=TOLERANCE)
    assert deployed.model is model


def test_attach_reads_logits_of_structured_outputs():
    class WithLogits(torch.nn.Module):
        def forward(self, x):
            return {"logits": x * 2.0}

    calibrator = small_temperature_scaling()
    x = torch.tensor([[0.0, 1.0], [2.0, 0.5]], dtype=torch.float64)
    out = attach(WithLogits(), calibrator)(x).numpy()
    np.testing.assert_allclose(out, calibrator.predict_proba(2.0 * x.numpy()), atol=1e-12)


def test_to_torch_refuses_unfitted_and_foreign_estimators():
    from sklearn.exceptions import NotFittedError
    from sklearn.linear_model import LogisticRegression

    with pytest.raises(NotFittedError):
        TemperatureScaling().to_torch()
    model = LogisticRegression().fit([[0.0], [1.0]], [0, 1])
    model.input = "logits"
    with pytest.raises(ValueError, match="LogisticRegression has no torch module"):
        calibrator_module(model)


# Inputs that predict_proba refuses ---------------------------------------------------------


# One method of the table of methods per map kind, with its defaults.
MAP_KINDS = ("temperature", "vector", "matrix", "ets", "platt", "beta", "isotonic", "histogram")


def four_class_calibrators():
    """One fitted calibrator of each map kind, on 4-class logits."""
    logits, y = make_logits(400, 4, random_state=0)
    calibrators = {name: make_calibrator(name) for name in MAP_KINDS}
    calibrators["histogram-top-label"] = make_calibrator("histogram", mode="top-label")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence of the classic maps
        for calibrator in calibrators.values():
            calibrator.fit(logits, y)
    return calibrators, logits


def test_a_module_refuses_another_number_of_columns():
    calibrators, logits = four_class_calibrators()
    for calibrator in calibrators.values():
        module = calibrator.to_torch()
        trace = traced(module, torch.as_tensor(logits[:8]))
        for columns in (1, 3, 5):
            wrong = torch.as_tensor(np.resize(logits[:6], (6, columns)))
            with pytest.raises(ValueError):
                calibrator.predict_proba(wrong.numpy())
            with pytest.raises(ValueError, match=f"{columns} columns.*fitted on 4"):
                module(wrong)
            # A traced graph keeps no Python check: its reshape refuses the other shape.
            with pytest.raises(RuntimeError):
                trace(wrong)
        scripted_module = scripted(module)
        with pytest.raises(Exception, match="fitted on 4"):
            scripted_module(torch.as_tensor(logits[:6, :3]))


def test_a_module_refuses_one_dimensional_input_clearly():
    calibrators, logits = four_class_calibrators()
    for calibrator in calibrators.values():
        with pytest.raises(ValueError, match=r"2-D.*\(n, 4\)"):
            calibrator.to_torch()(torch.as_tensor(logits[:, 0]))


def test_a_module_propagates_nan_rows():
    calibrators, logits = four_class_calibrators()
    x = logits[:6].copy()
    x[1, 2] = np.nan
    x[4, 0] = np.inf
    for name, calibrator in calibrators.items():
        module = calibrator.to_torch()
        for run in (module, traced(module, torch.as_tensor(logits[:8]))):
            out = run(torch.as_tensor(x)).numpy()
            assert np.isnan(out[[1, 4]]).all(), name
            clean = [0, 2, 3, 5]
            np.testing.assert_allclose(
                out[clean], calibrator.predict_proba(x[clean]), rtol=0, atol=TOLERANCE
            )


def probabilities_with_zeros(n=600, k=4, seed=0):
    logits, y = make_logits(n, k, random_state=seed)
    probs = softmax(logits, axis=1)
    probs[probs < 0.02] = 0.0  # exact zeros, as a saturated softmax gives
    return probs / probs.sum(axis=1, keepdims=True), y


def test_a_traced_module_takes_logs_in_the_precision_of_each_input():
    probs, y = probabilities_with_zeros()
    assert (probs == 0).mean() > 0.05
    calibrator = MatrixScaling(input="probs", reg_off_diagonal=1.0, reg_bias=1.0).fit(probs, y)
    module = calibrator.to_torch()
    as32 = torch.as_tensor(probs, dtype=torch.float32)
    as64 = torch.as_tensor(probs)
    expected64 = calibrator.predict_proba(probs)
    expected32 = calibrator.predict_proba(probs.astype(np.float32))
    assert np.abs(expected64 - expected32).max() > 1e-3  # the two precisions differ here
    for example in (as32[:8], as64[:8]):
        trace = traced(module, example)
        np.testing.assert_allclose(trace(as64).numpy(), expected64, rtol=0, atol=TOLERANCE)
        np.testing.assert_allclose(trace(as32).numpy(), expected32, rtol=0, atol=1e-5)


def test_attach_runs_a_text_model_through_its_adapter():
    pytest.importorskip("transformers")
    from reliacal.datasets import make_tiny_bert

    bert = make_tiny_bert(
        3, 40, max_length=32, hidden_size=16, intermediate_size=32, random_state=0
    ).eval()
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 40, (60, 8), generator=generator)
    for row in range(0, 60, 2):
        ids[row, 3 + row % 5 :] = 0  # padding, which the adapter masks
    y = np.arange(60) % 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a random model: T may run to its bound
        calibrator = TemperatureScaling(backbone=bert, device="cpu").fit(ids, y)
    expected = calibrator.predict_proba(ids)
    deployed = attach(bert, calibrator)
    with torch.no_grad():
        out = deployed(ids).numpy()
    np.testing.assert_allclose(out, expected, rtol=0, atol=TOLERANCE)
    assert deployed.model is bert


def test_export_reads_the_calibrator_not_its_class():
    # A calibrator export has never heard of: its own map is all export needs.
    from reliacal.calibrators import BaseCalibrator

    class HalfTemperature(BaseCalibrator):
        def _fit_core(self, features, logits, y_index, sample_weight):
            self.fitted_ = True

        def _calibrated_logits(self, features, logits):
            return np.asarray(logits, dtype=np.float64) / 2.0

        def _torch_map(self):
            from reliacal.export import TemperatureMap

            return TemperatureMap(2.0)

    logits, y = make_logits(50, 3, random_state=0)
    probs = softmax(logits, axis=1).astype(np.float32)
    for calibrator, X in (
        (HalfTemperature().fit(logits, y), logits),
        (HalfTemperature(input="probs").fit(probs, y), probs),
    ):
        with torch.no_grad():
            out = calibrator.to_torch()(torch.as_tensor(X)).numpy()
        np.testing.assert_allclose(out, calibrator.predict_proba(X), rtol=0, atol=1e-6)
