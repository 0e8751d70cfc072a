"""Shared fixtures of the whole suite: the bundled CIFAR records, tiny transformers, the ONNX
round trip, the oracles' L-BFGS minimiser and the CUDA skip.

Tests take these as pytest fixtures (never ``from conftest import``); a test
that needs a CUDA device is marked ``@pytest.mark.gpu`` and is skipped here
when none is present.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

DATA_DIR = Path(__file__).parent / "data"
RECORD_NAMES = (
    "lenet-5-cifar-10",
    "wideresnet-16-4-cifar-10",
    "lenet-5-cifar-100",
    "wideresnet-16-4-cifar-100",
)


def _load_record(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(probabilities, labels)`` of one bundled CIFAR record."""
    with np.load(DATA_DIR / f"{name}.npz") as record:
        return record["predictions"], record["ground_truth"]


def _post_hoc_table() -> dict[str, tuple[str, dict]]:
    """Name -> (class name, parameters) of each post-hoc calibrator, sized to fit in seconds.

    The one table of the tests that run every calibrator (export, persistence). Built afresh
    on each call: AutoCalibrator's candidates are estimators, never shared between fits.
    """
    from reliacal.calibrators import IsotonicCalibration, TemperatureScaling

    return {
        "temperature": ("TemperatureScaling", {}),
        "vector": ("VectorScaling", {}),
        "dirichlet": ("MatrixScaling", {"reg_off_diagonal": 1.0, "reg_bias": 1.0}),
        "ets": ("EnsembleTemperatureScaling", {}),
        "adaptive": (
            "AdaptiveTS",
            {
                "hidden_layer_sizes": (16,),
                "temperature_hidden_sizes": (8,),
                "max_epochs": 2,
                "random_state": 0,
            },
        ),
        "platt": ("PlattScaling", {}),
        "beta": ("BetaCalibration", {}),
        "isotonic": ("IsotonicCalibration", {}),
        "histogram": ("HistogramBinning", {}),
        "histogram-top-label": ("HistogramBinning", {"mode": "top-label"}),
        "svs": ("StructuredVectorScaling", {}),
        "sms": ("StructuredMatrixScaling", {}),
        "quadratic": ("QuadraticScaling", {}),
        "venn-abers": ("VennAbersCalibration", {}),
        "venn-abers-cross": ("VennAbersCalibration", {"inductive": False, "n_splits": 3}),
        "cir": ("CenteredIsotonicCalibration", {}),
        "spline": ("SplineCalibration", {"reg_param_grid": [1.0]}),  # one lambda: no search
        "auto": (
            "AutoCalibrator",
            {
                "candidates": {
                    "isotonic": IsotonicCalibration(),
                    "temperature": TemperatureScaling(),
                },
                "cv": 2,
            },
        ),
    }


def _post_hoc_calibrator(name: str, **params):
    import reliacal.calibrators

    class_name, settings = _post_hoc_table()[name]
    calibrator_class = getattr(reliacal.calibrators, class_name)
    return calibrator_class(input="probs", **{**settings, **params})


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "slow_post_hoc(*names): mark the post_hoc_name cases of these calibrators slow",
    )


def pytest_generate_tests(metafunc):
    """Run a test that takes ``post_hoc_name`` once per post-hoc calibrator of the table.

    A test marked ``@pytest.mark.slow_post_hoc("dirichlet", ...)`` gets its cases of those
    calibrators marked ``slow``.
    """
    if "post_hoc_name" not in metafunc.fixturenames:
        return
    slow = set()
    for marker in metafunc.definition.iter_markers("slow_post_hoc"):
        slow.update(marker.args)
    unknown = slow - set(_post_hoc_table())
    if unknown:
        raise ValueError(f"slow_post_hoc names no calibrator of the table: {sorted(unknown)}")
    metafunc.parametrize(
        "post_hoc_name",
        [
            pytest.param(name, marks=pytest.mark.slow) if name in slow else name
            for name in _post_hoc_table()
        ],
    )


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def load_record():
    """The loader of the bundled records: ``load_record(name) -> (probabilities, labels)``."""
    return _load_record


@pytest.fixture(params=RECORD_NAMES)
def record_name(request):
    """Each bundled CIFAR record's name in turn."""
    return request.param


@pytest.fixture
def cifar_record(record_name):
    """Each CIFAR record in turn, as ``(name, probabilities, labels)``."""
    probs, labels = _load_record(record_name)
    return record_name, probs, labels


@pytest.fixture
def device_paths_on_cpu(monkeypatch):
    """Run the metrics' and calibrators' tensor paths on CPU tensors too (a GPU's code)."""
    from reliacal import _validation

    monkeypatch.setattr(_validation, "_DEVICE_PATHS_ON_CPU", True)


@pytest.fixture
def no_host_copy(monkeypatch):
    """Make every way of bringing a torch tensor to numpy or to the CPU raise.

    For the tests that a tensor input is computed on its device: a metric or a
    calibrator that reads it on the host fails them.
    """

    def refuse(self, *args, **kwargs):
        raise AssertionError("a tensor was copied to the host")

    for name in ("numpy", "__array__", "cpu"):
        monkeypatch.setattr(torch.Tensor, name, refuse)


@pytest.fixture(scope="session")
def post_hoc_calibrator():
    """``post_hoc_calibrator(name, **params)``: a new unfitted post-hoc calibrator of the table.

    Each test that takes ``post_hoc_name`` runs once per name (``"temperature"``,
    ``"vector"``, ``"dirichlet"``, ``"ets"``, ``"adaptive"``, ``"platt"``, ``"beta"``,
    ``"isotonic"``, ``"histogram"``, ``"histogram-top-label"``, ``"svs"``, ``"sms"``,
    ``"quadratic"``, ``"venn-abers"``, ``"venn-abers-cross"``, ``"cir"``, ``"spline"``,
    ``"auto"``); ``params``
    replace the table's. Every calibrator reads probabilities (``input="probs"``).
    """
    return _post_hoc_calibrator


def _torch_modules_after(script: str) -> list[str]:
    probe = textwrap.dedent(script) + textwrap.dedent(
        """
        import sys
        print(",".join(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))))
        """
    )
    # The working tree first, so that a test of this checkout imports its own code.
    root = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": path},
    )
    last_line = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    return [name for name in last_line.split(",") if name]


@pytest.fixture(scope="session")
def torch_modules_after():
    """``torch_modules_after(script) -> list[str]``: the torch modules a script loads.

    The script (dedented) runs in a fresh interpreter that imports this checkout first; a
    failing script fails the test (``CalledProcessError``).
    """
    return _torch_modules_after


@contextlib.contextmanager
def _local_dask_client(*, processes: bool):
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, processes=processes, threads_per_worker=1, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


@pytest.fixture(scope="session")
def local_dask_client():
    """``with local_dask_client(processes=...) as client:`` a two-worker dask cluster.

    One thread per worker, no dashboard; ``processes=True`` makes the workers processes, so
    that what they exchange is pickled. Skips the test when ``distributed`` is missing.
    """
    return _local_dask_client


@pytest.fixture
def no_pickle(monkeypatch):
    """Make every pickle entry point raise while the test runs (the guard of ``save``)."""

    def refuse(*args, **kwargs):
        raise AssertionError("pickle was used")

    for name in ("dump", "dumps", "load", "loads"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(pickle, "Pickler", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Run a module's torch code on one intra-op thread.

    The networks of the training tests are tiny: on a shared machine, thread start-up and
    contention cost more than their matrix products. A module opts in with
    ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# The builder's size names, as timm's constructors and Hugging Face's ViTConfig spell them.
SIZE_NAMES = {
    "image_size": ("img_size", "image_size"),
    "patch_size": ("patch_size", "patch_size"),
    "channels": ("in_chans", "num_channels"),
    "width": ("embed_dim", "hidden_size"),
    "depth": ("depth", "num_hidden_layers"),
    "heads": ("num_heads", "num_attention_heads"),
    "classes": ("num_classes", "num_labels"),
}


def _tiny_transformer(family, *, seed=0, **settings):
    missing = sorted(set(SIZE_NAMES) - set(settings))
    if missing:
        raise TypeError(f"tiny_transformer needs the sizes {missing}")
    hugging_face = family == "hf_vit"
    spelling = 1 if hugging_face else 0
    spelled = {SIZE_NAMES[name][spelling]: settings.pop(name) for name in SIZE_NAMES}
    # Seeding the global generator right before the constructor keeps the weights (and the
    # generator's state afterwards) exactly what the tests were written against.
    torch.manual_seed(seed)
    if hugging_face:
        from transformers import ViTConfig, ViTForImageClassification

        mlp = 2 * spelled["hidden_size"]
        return ViTForImageClassification(ViTConfig(**spelled, intermediate_size=mlp, **settings))
    from timm.models.deit import VisionTransformerDistilled
    from timm.models.swin_transformer import SwinTransformer
    from timm.models.vision_transformer import VisionTransformer

    if family == "swin":  # one depth per stage
        spelled["depths"] = spelled.pop("depth")
    timm_class = {
        "vit": VisionTransformer,
        "deit_distilled": VisionTransformerDistilled,
        "swin": SwinTransformer,
    }[family]
    return timm_class(**spelled, **settings)


@pytest.fixture(scope="session")
def tiny_transformer():
    """A builder of small randomly initialised transformers, seeded globally first.

    ``tiny_transformer(family, *, image_size, patch_size, channels, width, depth, heads,
    classes, seed=0, **extra)`` with ``family`` one of ``"vit"``, ``"deit_distilled"``,
    ``"swin"`` (timm; ``depth`` and ``heads`` per stage) or ``"hf_vit"`` (Hugging Face, MLP
    width ``2 * width``); ``extra`` goes to the constructor (the config for ``"hf_vit"``).
    """
    return _tiny_transformer


# The calibrator tests' miscalibrated logits, which the scaling families fit.
def _mixed_logits(seed, n=600, n_classes=4):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n)
    # Miscalibrated on purpose: over-confident, with a class bias and class mixing, so
    # that temperature scaling alone cannot fix it and the vector and matrix maps can.
    logits = 2.0 * np.eye(n_classes)[y] + 1.5 * rng.normal(size=(n, n_classes))
    logits = 1.5 * logits @ (np.eye(n_classes) + 0.3 * rng.random((n_classes, n_classes)))
    return logits + np.linspace(0.0, 1.5, n_classes), y


@pytest.fixture
def mixed_logits():
    """``mixed_logits(seed, n=600, n_classes=4) -> (logits, y)``: float64 logits, int labels."""
    return _mixed_logits


def _onnx_outputs(module, example, inputs):
    pytest.importorskip("onnx")
    onnxruntime = pytest.importorskip("onnxruntime")
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's deprecation and tracer notes
        torch.onnx.export(
            module,
            (example,),
            buffer,
            dynamo=False,
            input_names=["x"],
            output_names=["probabilities"],
            dynamic_axes={"x": {0: "n"}, "probabilities": {0: "n"}},
        )
    session = onnxruntime.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": inputs})[0]


@pytest.fixture
def onnx_outputs():
    """``onnx_outputs(module, example, inputs) -> ndarray``: ``module`` exported to ONNX.

    Traced on the tensor ``example`` with a free batch axis, then run by onnxruntime on the
    array ``inputs`` (the test is skipped when onnx or onnxruntime is missing).
    """
    return _onnx_outputs


def _lbfgs_minimum(objective, parameters, **tolerances):
    optimizer = torch.optim.LBFGS(parameters, lr=1.0, line_search_fn="strong_wolfe", **tolerances)

    def closure():
        optimizer.zero_grad()
        loss = objective()
        loss.backward()
        return loss

    optimizer.step(closure)
    with torch.no_grad():
        return float(objective())


@pytest.fixture
def lbfgs_minimum():
    """``lbfgs_minimum(objective, parameters, **tolerances) -> float``, for reference solvers.

    Minimises the scalar tensor ``objective()`` over the tensors ``parameters`` (which
    require grad, and end at the minimiser) by strong-Wolfe L-BFGS with unit step;
    ``tolerances`` are ``torch.optim.LBFGS``'s (``max_iter``, ``tolerance_grad``, ...).
    Returns ``objective()`` at the end.
    """
    return _lbfgs_minimum


def _scale_problem():
    rng = np.random.default_rng(15)
    y = rng.integers(0, 4, size=400)
    logits = rng.normal(size=(400, 4)) + 3.0 * np.eye(4)[y]
    return logits, np.where(rng.random(400) < 0.1, (y + 1) % 4, y)


@pytest.fixture
def scale_problem():
    """``(logits, y)``: 400 x 4 logits of unit scale, 10% of the labels moved; the
    extreme-scale cases of the scaling calibrators multiply them by a constant."""
    return _scale_problem()


class _CountingLogits(np.ndarray):
    """Logits that count the rows sliced (``[a:b]``) or gathered (``[rows]``) out of them."""

    def __array_finalize__(self, obj):
        self.counts = None  # views of the logits (the chunks) do not count

    def __getitem__(self, key):
        result = super().__getitem__(key)
        if self.counts is not None:
            kind = "sliced" if isinstance(key, slice) else "gathered"
            self.counts[kind] += len(result)
        return result


def _counting(logits):
    counting = np.asarray(logits).view(_CountingLogits)
    counting.counts = {"sliced": 0, "gathered": 0}
    return counting


@pytest.fixture
def counting_logits():
    """``counting_logits(logits)``: a view whose ``counts`` dict adds up the rows sliced
    (``"sliced"``: ``[a:b]``) and gathered (``"gathered"``: ``[rows]``) out of it: an
    independent count of a solver's passes over the logits."""
    return _counting
