"""BinnedCalibrationError: a torchmetrics Metric of per-bin sums, against torchmetrics."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

from reliacal.metrics import expected_calibration_error, softmax

torch = pytest.importorskip("torch")
pytest.importorskip("torchmetrics")
from torchmetrics.classification import MulticlassCalibrationError  # noqa: E402

from reliacal.metrics.torchmetrics import BinnedCalibrationError  # noqa: E402


def _batches(n_batches=4, size=500, n_classes=6, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(n_batches):
        probs = softmax(rng.normal(scale=2.0, size=(size, n_classes)))
        yield torch.from_numpy(probs), torch.from_numpy(rng.integers(0, n_classes, size=size))


@pytest.mark.parametrize("norm", ["l1", "l2", "max"])
@pytest.mark.parametrize("n_bins", [10, 15])
def test_equals_torchmetrics_away_from_bin_edges(norm, n_bins):
    ours = BinnedCalibrationError(n_bins=n_bins, norm=norm)
    theirs = MulticlassCalibrationError(num_classes=6, n_bins=n_bins, norm=norm)
    all_probs, all_labels = [], []
    for probs, labels in _batches():
        # Continuous data: no confidence on an edge b / n_bins (in float32 or float64) or at 1.
        scaled = probs.max(dim=1).values.float().double() * n_bins
        assert not bool((scaled == scaled.round()).any())
        ours.update(probs, labels)
        theirs.update(probs, labels)
        all_probs.append(probs.numpy())
        all_labels.append(labels.numpy())
    # torchmetrics works in float32: agreement to its rounding.
    assert float(ours.compute()) == pytest.approx(float(theirs.compute()), abs=2e-6)
    # In float64 it is reliacal's metric exactly.
    expected = expected_calibration_error(
        np.concatenate(all_labels), np.concatenate(all_probs), n_bins=n_bins, norm=norm
    )
    assert float(ours.compute()) == pytest.approx(expected, rel=1e-12)


def test_confidences_on_edges_follow_reliacal_not_torchmetrics():
    # Four bins. A: confidence 0.75 (an edge), correct; B: 0.7, wrong; C: 1.0, correct.
    probs = torch.tensor([[0.75, 0.25, 0.0], [0.7, 0.3, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    labels = torch.tensor([0, 1, 0])
    ours = BinnedCalibrationError(n_bins=4)
    ours.update(probs, labels)
    # Right-closed bins: A and B share (0.5, 0.75]: mean confidence 0.725, accuracy 0.5,
    # gap 0.225 on 2/3 of the mass; C alone in (0.75, 1] has gap 0.
    assert float(ours.compute()) == pytest.approx(0.225 * 2 / 3, rel=1e-12)
    assert float(ours.compute()) == pytest.approx(
        expected_calibration_error(labels.numpy(), probs.numpy(), n_bins=4), rel=1e-12
    )
    # torchmetrics' left-closed bins put A in [0.75, 1) (gap 0.25) apart from B (gap 0.7)
    # and C in a bin of its own for 1.0: (0.7 + 0.25 + 0) / 3.
    theirs = MulticlassCalibrationError(num_classes=3, n_bins=4)
    theirs.update(probs, labels)
    assert float(theirs.compute()) == pytest.approx(0.95 / 3, abs=1e-6)


def test_states_merge_as_ranks_do_and_stay_constant_size():
    batches = list(_batches(n_batches=6, seed=1))
    whole, first, second = (BinnedCalibrationError() for _ in range(3))
    for index, (probs, labels) in enumerate(batches):
        whole.update(probs, labels)
        (first if index % 2 == 0 else second).update(probs, labels)
    # merge_state applies the states' reductions (sums), as a DDP synchronisation does.
    first.merge_state(second)
    assert float(first.compute()) == pytest.approx(float(whole.compute()), rel=1e-12)
    for name in ("counts", "sum_confidence", "sum_correct"):
        assert getattr(whole, name).shape == (15,)
    assert float(whole.counts.sum()) == 6 * 500
    whole.reset()
    assert float(whole.counts.sum()) == 0


@pytest.mark.parametrize(
    ("probs", "labels", "message"),
    [
        (torch.tensor([[2.0, -1.0]]), torch.tensor([0]), "logits"),
        (torch.tensor([[float("nan"), 0.5]]), torch.tensor([0]), "NaN"),
        (torch.tensor([[0.6, 0.6]]), torch.tensor([0]), "sum to 1"),
        (torch.tensor([[0.5, 0.5]]), torch.tensor([2]), r"target must lie in \[0, 2\)"),
        (torch.tensor([[0.5, 0.5]]), torch.tensor([0, 1]), "shape"),
        (torch.tensor([0.5, 0.5]), torch.tensor([0, 1]), "shape"),
        (torch.tensor([[0.5, 0.5]]), torch.tensor([0.0]), "integer"),
    ],
)
def test_bad_input_raises(probs, labels, message):
    with pytest.raises(ValueError, match=message):
        BinnedCalibrationError().update(probs, labels)


def test_bad_arguments_and_empty_state_raise():
    with pytest.raises(ValueError, match="norm"):
        BinnedCalibrationError(norm="l3")
    with pytest.raises(ValueError, match="n_bins"):
        BinnedCalibrationError(n_bins=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchmetrics warns of compute() before update()
        with pytest.raises(ValueError, match="no samples"):
            BinnedCalibrationError().compute()


def test_missing_torchmetrics_says_how_to_install():
    code = (
        "import sys; sys.modules['torchmetrics'] = None\n"
        "try:\n    import reliacal.metrics.torchmetrics\n"
        "except ImportError as error:\n    print(error)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "pip install torchmetrics" in result.stdout, result.stderr


def _ddp_rank(rank, world_size, init_file, out_dir):
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        metric = BinnedCalibrationError(n_bins=10)
        # Each rank sees every other batch; compute() sums the states over the ranks.
        for index, (probs, labels) in enumerate(_batches(n_batches=4, seed=7)):
            if index % world_size == rank:
                metric.update(probs, labels)
        value = float(metric.compute())
        torch.save(
            {"ece": value, "local_count": float(metric.counts.sum())}, f"{out_dir}/{rank}.pt"
        )
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_ddp_ranks_synchronise_the_sums(tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_ddp_rank, args=(2, tmp_path / "init", tmp_path), nprocs=2, join=True)
    probs, labels = zip(*_batches(n_batches=4, seed=7), strict=True)
    expected = expected_calibration_error(
        torch.cat(labels).numpy(), torch.cat(probs).numpy(), n_bins=10
    )
    for rank in range(2):
        result = torch.load(tmp_path / f"{rank}.pt")
        assert result["ece"] == pytest.approx(expected, rel=1e-12)
        # Each rank kept its own two batches: only compute() saw the summed state.
        assert result["local_count"] == 2 * 500


def test_batches_of_different_class_counts_are_refused():
    # The bins of a 3-class and a 10-class problem do not add up to one ECE.
    three = (torch.tensor([[0.7, 0.2, 0.1]]), torch.tensor([0]))
    ten = (torch.full((1, 10), 0.1), torch.tensor([3]))
    metric = BinnedCalibrationError()
    metric.update(*three)
    with pytest.raises(ValueError, match="batch has 10 classes but the metric has 3"):
        metric.update(*ten)
    unchecked = BinnedCalibrationError(validate_args=False)
    unchecked.update(*three)
    with pytest.raises(ValueError, match="10 classes"):
        unchecked.update(*ten)
    # forward() resets before its batch: the merge of the batch into the total refuses it.
    stepped = BinnedCalibrationError()
    stepped(*three)
    with pytest.raises(ValueError, match="different numbers of classes"):
        stepped(*ten)
    # So do merged states (as DDP ranks' are) ...
    other = BinnedCalibrationError()
    other.update(*ten)
    first = BinnedCalibrationError()
    first.update(*three)
    with pytest.raises(ValueError, match=r"different numbers of classes \[3, 10\]"):
        first.merge_state(other)
    # ... and a merged-into empty metric keeps the class count it received.
    empty = BinnedCalibrationError()
    empty.merge_state(other)
    with pytest.raises(ValueError, match="the metric has 10"):
        empty.update(*three)
    # reset() starts a new problem.
    metric.reset()
    metric.update(*ten)
    assert float(metric.compute()) == pytest.approx(0.1, rel=1e-6)  # confidence 0.1, wrong
