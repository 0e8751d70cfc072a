"""The ``reliacal`` command: evaluate and calibrate on the CIFAR records, and user errors."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest
import torch
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax
from torchmetrics.functional.classification import multiclass_calibration_error

import reliacal
from reliacal.cli import main
from reliacal.metrics import calibration_report

DATA = Path(__file__).parent / "data"


def run(capsys, *args):
    """Run the command in-process; return (status, stdout, stderr lines)."""
    status = main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err.strip().splitlines()


def assert_one_line_error(status, out, err, *fragments):
    """Status 1, one error line last (after any progress lines), no traceback."""
    assert status == 1
    assert out == ""
    assert all(line.startswith("reliacal: ") for line in err), err
    assert [line for line in err if line.startswith("reliacal: error: ")] == err[-1:], err
    for fragment in fragments:
        assert fragment in err[-1], err[-1]


def write_split(folder, probs, labels, calibration, evaluation):
    """Write ``cal.npz`` and ``eval.npz``: the rows ``calibration`` and ``evaluation``."""
    np.savez(folder / "cal.npz", probs=probs[calibration], labels=labels[calibration])
    np.savez(folder / "eval.npz", probs=probs[evaluation], labels=labels[evaluation])
    return folder


def write_tempered_logits(folder, n_rows, n_classes):
    """Write halves of seeded logits to ``cal.npz`` / ``eval.npz``; return ``(logits, labels)``.

    The labels are drawn from ``softmax(logits / 3)``: the calibrated temperature is near 3.
    """
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(n_rows, n_classes)) * 4.0
    labels = np.array(
        [rng.choice(n_classes, p=row) for row in np.exp(log_softmax(logits / 3.0, axis=1))]
    )
    half = n_rows // 2
    np.savez(folder / "cal.npz", logits=logits[:half], labels=labels[:half])
    np.savez(folder / "eval.npz", logits=logits[half:], labels=labels[half:])
    return logits, labels


def calibrate(capsys, folder, *options):
    """Run ``calibrate`` on the ``cal.npz``/``eval.npz`` pair in ``folder``."""
    return run(capsys, "calibrate", folder / "cal.npz", folder / "eval.npz", *options)


def torchmetrics_ece(probs, labels):
    return float(
        multiclass_calibration_error(
            torch.from_numpy(probs), torch.from_numpy(labels), num_classes=probs.shape[1], n_bins=15
        )
    )


def test_evaluate_each_record_as_csv(capsys, record_name, load_record):
    name = record_name
    status, out, err = run(capsys, "evaluate", DATA / f"{name}.npz", "--format", "csv")
    assert status == 0
    assert err == [
        f"reliacal: {name}.npz: probabilities from key 'predictions', "
        "labels from key 'ground_truth'"
    ]
    table = pd.read_csv(io.StringIO(out), index_col="model")
    assert list(table.index) == [name]
    probs, labels = load_record(name)
    # The ECE against an independent implementation (float32 there: 1e-5).
    assert table.loc[name, "ece"] == pytest.approx(torchmetrics_ece(probs, labels), abs=1e-5)
    expected = calibration_report(labels, {name: probs})
    pd.testing.assert_frame_equal(table, expected, check_exact=False, rtol=1e-9)


def test_evaluate_table_and_json(capsys, tmp_path, load_record):
    path = DATA / "wideresnet-16-4-cifar-100.npz"
    status, out, _ = run(capsys, "evaluate", path, "--name", "WRN")
    assert status == 0
    header, row = out.splitlines()[0], out.splitlines()[-1]
    assert "ece" in header and "nll" in header and row.startswith("WRN")
    status, out, _ = run(capsys, "evaluate", path, "--format", "json", "--n-bins", "10")
    assert status == 0
    report = json.loads(out)
    probs, labels = load_record("wideresnet-16-4-cifar-100")
    expected = calibration_report(labels, {"x": probs}, n_bins=10).loc["x"]
    assert report["wideresnet-16-4-cifar-100"]["ece"] == pytest.approx(expected["ece"])


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_evaluate_writes_a_diagram(capsys, tmp_path, strategy):
    plot = tmp_path / "figures" / "diagram.png"
    status, _, err = run(
        capsys, "evaluate", DATA / "lenet-5-cifar-10.npz", "--plot", plot, "--strategy", strategy
    )
    assert status == 0 and err[-1] == f"reliacal: wrote {plot}"
    image = matplotlib.image.imread(plot)
    assert image.shape[0] > 200 and image.shape[1] > 200


def test_evaluate_npy_pair_and_table(capsys, tmp_path, load_record):
    probs, labels = load_record("lenet-5-cifar-10")
    np.save(tmp_path / "probs.npy", probs)
    np.save(tmp_path / "labels.npy", labels)
    status, out, _ = run(
        capsys,
        "evaluate",
        tmp_path / "probs.npy",
        "--labels",
        tmp_path / "labels.npy",
        "--format",
        "csv",
    )
    assert status == 0
    from_npy = pd.read_csv(io.StringIO(out), index_col="model")
    frame = pd.DataFrame(probs, columns=[f"class_{k}" for k in range(10)]).assign(label=labels)
    frame.to_parquet(tmp_path / "preds.parquet")
    status, out, err = run(capsys, "evaluate", tmp_path / "preds.parquet", "--format", "csv")
    assert status == 0 and "labels from column 'label'" in err[0]
    from_table = pd.read_csv(io.StringIO(out), index_col="model")
    # The table holds float64 copies of the float32 record: equal up to float32 rounding.
    np.testing.assert_allclose(from_npy.to_numpy(), from_table.to_numpy(), rtol=1e-7)


def test_evaluate_logits_only_when_named(capsys, tmp_path, load_record):
    probs, labels = load_record("lenet-5-cifar-10")
    logits = np.log(probs.astype(np.float64)) + 3.0  # logits up to a per-row constant
    np.savez(tmp_path / "as_probs.npz", probs=logits, labels=labels)
    status, out, err = run(capsys, "evaluate", tmp_path / "as_probs.npz")
    assert_one_line_error(status, out, err, "as_probs.npz", "--logits")
    status, out, err = run(capsys, "evaluate", tmp_path / "as_probs.npz", "--logits")
    assert status == 0 and "(softmax applied)" in err[0]
    np.savez(tmp_path / "named.npz", logits=logits, labels=labels)
    status, out, err = run(capsys, "evaluate", tmp_path / "named.npz", "--format", "csv")
    assert status == 0 and "logits from key 'logits'" in err[0]
    table = pd.read_csv(io.StringIO(out), index_col="model")
    assert table["ece"].iloc[0] == pytest.approx(torchmetrics_ece(probs, labels), abs=1e-5)


def bad_files(tmp_path, load_record):
    probs, labels = load_record("lenet-5-cifar-10")
    nan_probs = probs.copy()
    nan_probs[17, 3] = np.nan
    np.savez(tmp_path / "nan.npz", probs=nan_probs, labels=labels)
    np.savez(tmp_path / "short.npz", probs=probs, labels=labels[:-5])
    np.savez(tmp_path / "nolabels.npz", probs=probs)
    np.savez(tmp_path / "outside.npz", probs=probs, labels=labels + 20)
    (tmp_path / "corrupt.npz").write_bytes(b"not a zip file")
    (tmp_path / "notes.txt").write_text("hello")
    names = np.array([f"class{k}" for k in range(10)])
    np.savez(tmp_path / "strings.npz", probs=probs, labels=names[labels])
    return [
        (["evaluate", tmp_path / "missing.npz"], ["missing.npz", "no such file"]),
        (["evaluate", DATA / "lenet-5-cifar-10.npz", "--probs-key", "scores"], ["'scores'"]),
        (["evaluate", DATA / "lenet-5-cifar-10.npz", "--labels-key", "y"], ["'y'"]),
        (["evaluate", tmp_path / "nan.npz"], ["nan.npz"]),
        (["evaluate", tmp_path / "short.npz"], ["short.npz"]),
        (["evaluate", tmp_path / "nolabels.npz"], ["no labels"]),
        (["evaluate", tmp_path / "outside.npz"], ["outside.npz"]),
        (["evaluate", tmp_path / "corrupt.npz"], ["corrupt.npz is not a valid .npz file"]),
        (
            ["evaluate", DATA / "lenet-5-cifar-10.npz", "--plot", tmp_path / "notes.txt" / "a.png"],
            ["notes.txt is a file, not a folder"],
        ),
        (["evaluate", tmp_path / "strings.npz"], ["--classes"]),
        (["evaluate", tmp_path / "strings.npz", "--classes", "a,b,c"], ["strings.npz"]),
        (["evaluate", tmp_path / "notes.txt"], [".txt"]),
        (
            ["evaluate", DATA / "lenet-5-cifar-10.npz", "--labels", tmp_path / "none.npy"],
            ["none.npy"],
        ),
        (
            ["calibrate", DATA / "lenet-5-cifar-10.npz", DATA / "lenet-5-cifar-100.npz"],
            ["number of classes", "10", "100"],
        ),
        (
            ["calibrate", *[DATA / "lenet-5-cifar-10.npz"] * 2, "--reg-bias", "1"],
            ["vector and matrix only"],
        ),
    ]


def test_user_mistakes_give_one_line_and_status_1(capsys, tmp_path, load_record):
    for arguments, fragments in bad_files(tmp_path, load_record):
        status, out, err = run(capsys, *arguments)
        assert_one_line_error(status, out, err, *fragments)
        assert "pickle" not in err[-1] and "Errno" not in err[-1], err[-1]


def test_usage_errors_exit_with_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["calibrate", "a.npz", "b.npz", "--method", "magic"])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "a.npz", "--n-bins", "0"])
    assert exit_info.value.code == 2
    assert "--n-bins: must be an integer >= 1, got '0'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["calibrate", "a.npz", "b.npz", "--reg-bias", "-1"])
    assert exit_info.value.code == 2
    for classes in ("a", "a,,b", "a,b,a"):
        with pytest.raises(SystemExit) as exit_info:
            main(["evaluate", "a.npz", "--classes", classes])
        assert exit_info.value.code == 2


def test_installed_command_prints_no_traceback(tmp_path):
    command = Path(sys.executable).parent / "reliacal"
    result = subprocess.run(
        [command, "evaluate", tmp_path / "missing.npz"], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"reliacal: error: {tmp_path / 'missing.npz'}: no such file"
    ]


# ------------------------------------------------------------------------- calibrate


@pytest.fixture(scope="module")
def cifar100_halves(tmp_path_factory, load_record):
    """The split of ``docs/methods.md``: default_rng(0) permutation, first half calibrates."""
    folder = tmp_path_factory.mktemp("halves")
    probs, labels = load_record("wideresnet-16-4-cifar-100")
    order = np.random.default_rng(0).permutation(len(labels))
    calibration, evaluation = order[:5000], order[5000:]
    write_split(folder, probs, labels, calibration, evaluation)
    return folder, probs, labels, calibration, evaluation


def exact_temperature(probs, labels):
    """The NLL-optimal temperature of log-probabilities, by a bracketing 1-D solver in float64."""
    log_probs = np.log(np.clip(probs.astype(np.float64), 1e-300, None))

    def nll(log_temperature):
        scaled = log_softmax(log_probs / np.exp(log_temperature), axis=1)
        return -np.mean(scaled[np.arange(len(labels)), labels])

    solution = minimize_scalar(nll, bracket=(-1.0, 1.0), tol=1e-12)
    return float(np.exp(solution.x))


def test_calibrate_temperature_matches_the_exact_optimum(capsys, cifar100_halves):
    folder, probs, labels, calibration, evaluation = cifar100_halves
    out_file = folder / "calibrated.npz"
    model_file = folder / "ts.zip"
    status, out, err = calibrate(
        capsys,
        folder,
        *["--method", "temperature", "--format", "csv"],
        *["--out", out_file, "--save-model", model_file],
    )
    assert status == 0, err
    temperature = float(next(line for line in err if "temperature_" in line).split("= ")[1])
    expected = exact_temperature(probs[calibration], labels[calibration])
    assert temperature == pytest.approx(expected, abs=1e-4)
    assert temperature == pytest.approx(1.12, abs=0.005)  # docs/methods.md

    table = pd.read_csv(io.StringIO(out), index_col="model")
    assert list(table.index) == ["uncalibrated", "TemperatureScaling"]
    # docs/methods.md: ECE 5.65% -> 4.25% on this split.
    assert table.loc["uncalibrated", "ece"] == pytest.approx(0.0565, abs=5e-5)
    assert table.loc["TemperatureScaling", "ece"] == pytest.approx(0.0425, abs=5e-5)
    assert table.loc["TemperatureScaling", "nll"] < table.loc["uncalibrated", "nll"]
    assert table.loc["TemperatureScaling", "accuracy"] == table.loc["uncalibrated", "accuracy"]

    with np.load(out_file) as saved:
        np.testing.assert_array_equal(saved["labels"], labels[evaluation])
        calibrated = saved["probs"]
    log_probs = np.log(np.clip(probs[evaluation].astype(np.float64), 1e-300, None))
    oracle = np.exp(log_softmax(log_probs / expected, axis=1))
    np.testing.assert_allclose(calibrated, oracle, atol=1e-5)
    model = reliacal.load(model_file)
    np.testing.assert_array_equal(model.predict_proba(probs[evaluation]), calibrated)

    # The written file is a prediction file itself.
    status, out, _ = run(capsys, "evaluate", out_file, "--format", "csv")
    assert status == 0
    again = pd.read_csv(io.StringIO(out), index_col="model")
    assert again["ece"].iloc[0] == pytest.approx(table.loc["TemperatureScaling", "ece"])


@pytest.mark.parametrize(
    ("method", "regularisation"),
    [
        ("vector", ["--reg-bias", "0.1"]),
        ("matrix", ["--reg-off-diagonal", "1", "--reg-bias", "1"]),
    ],
)
def test_calibrate_vector_and_matrix(capsys, tmp_path, method, regularisation, load_record):
    probs, labels = load_record("wideresnet-16-4-cifar-10")
    write_split(tmp_path, probs, labels, slice(2000), slice(2000, 4000))
    plot = tmp_path / "before_after.png"
    status, out, err = calibrate(
        capsys, tmp_path, "--method", method, "--format", "csv", "--plot", plot, *regularisation
    )
    assert status == 0, err
    table = pd.read_csv(io.StringIO(out), index_col="model")
    name = {"vector": "VectorScaling", "matrix": "MatrixScaling"}[method]
    assert list(table.index) == ["uncalibrated", name]
    # WRN-16-4 on CIFAR-10 is over-confident (ECE about 5%); both maps fix most of it.
    assert table.loc[name, "ece"] < 0.5 * table.loc["uncalibrated", "ece"]
    assert table.loc[name, "nll"] < table.loc["uncalibrated", "nll"]
    assert matplotlib.image.imread(plot).shape[1] > 400


def test_calibrate_uses_logits_when_both_files_hold_them(capsys, tmp_path):
    logits, labels = write_tempered_logits(tmp_path, 600, 4)
    status, out, err = calibrate(capsys, tmp_path, "--format", "csv")
    assert status == 0, err
    temperature = float(next(line for line in err if "temperature_" in line).split("= ")[1])
    probs = np.exp(log_softmax(logits[:300], axis=1))
    assert temperature == pytest.approx(exact_temperature(probs, labels[:300]), abs=1e-4)
    assert temperature == pytest.approx(3.0, rel=0.3)


def test_string_labels_with_classes(capsys, tmp_path, load_record):
    probs, labels = load_record("wideresnet-16-4-cifar-10")
    names = np.array([f"c{k}" for k in range(10)])
    # Names deliberately not in sorted order of the labels' strings: c9 first.
    order = np.array([9, 0, 1, 2, 3, 4, 5, 6, 7, 8])
    np.savez(tmp_path / "cal.npz", probs=probs[:2000, order], labels=names[labels[:2000]])
    np.savez(tmp_path / "eval.npz", probs=probs[2000:4000, order], labels=names[labels[2000:4000]])
    classes = ",".join(names[order])
    status, out, err = run(
        capsys, "evaluate", tmp_path / "eval.npz", "--classes", classes, "--format", "csv"
    )
    assert status == 0, err
    table = pd.read_csv(io.StringIO(out), index_col="model")
    expected = calibration_report(labels[2000:4000], {"eval": probs[2000:4000]})
    np.testing.assert_allclose(table.to_numpy(), expected.to_numpy(), rtol=1e-6)

    model_file = tmp_path / "ts.zip"
    status, out, err = calibrate(
        capsys, tmp_path, "--classes", classes, "--format", "csv", "--save-model", model_file
    )
    assert status == 0, err
    model = reliacal.load(model_file)
    np.testing.assert_array_equal(model.classes_, names[order])
    predicted = model.predict(probs[2000:4000, order])
    np.testing.assert_array_equal(predicted, names[np.argmax(probs[2000:4000], axis=1)])


@pytest.mark.parametrize("method", ["vector", "matrix"])
def test_calibrate_without_regularisation_chooses_it_by_cross_validation(
    capsys, tmp_path, method, load_record
):
    from sklearn.model_selection import GridSearchCV

    from reliacal.calibrators import MatrixScaling, VectorScaling

    probs, labels = load_record("lenet-5-cifar-10")
    write_split(tmp_path, probs, labels, slice(1000), slice(1000, 2000))
    model_file = tmp_path / "model.zip"
    status, out, err = calibrate(
        capsys, tmp_path, "--method", method, "--format", "csv", "--save-model", model_file
    )
    assert status == 0, err
    # Oracle: the same search written with sklearn's own log-loss scorer.
    if method == "vector":
        estimator, grid = VectorScaling(input="probs"), {"reg_bias": [0.1, 1.0, 10.0]}
    else:
        estimator = MatrixScaling(input="probs")
        values = (0.1, 1.0, 10.0, 100.0, 1000.0)
        grid = [{"reg_off_diagonal": [v], "reg_bias": [v]} for v in values]
    search = GridSearchCV(estimator, grid, scoring="neg_log_loss", cv=3)
    best = search.fit(probs[:1000], labels[:1000]).best_params_
    chosen = ", ".join(f"{key} = {value:g}" for key, value in best.items())
    name = type(estimator).__name__
    assert f"reliacal: {name}: {chosen} (chosen by 3-fold cross-validated NLL)" in err
    model = reliacal.load(model_file)
    assert type(model) is type(estimator)
    assert {key: model.get_params()[key] for key in best} == best
    table = pd.read_csv(io.StringIO(out), index_col="model")
    assert list(table.index) == ["uncalibrated", name]
    assert table.loc[name, "nll"] < table.loc["uncalibrated", "nll"]


# ------------------------------------------------ tables: columns named by class (issue 16)


def evaluate_csv(capsys, *args):
    status, out, err = run(capsys, "evaluate", *args, "--format", "csv")
    assert status == 0, err
    return pd.read_csv(io.StringIO(out), index_col="model").iloc[0]


def test_evaluate_reads_the_class_of_each_column_from_its_name(capsys, tmp_path):
    # Binary, hand-computed: p(class 1) = 0.8 on every row, 7 of 10 labels are 1, so the
    # confidence is 0.8, the accuracy 0.7 and the ECE (one bin) 0.1. Columns in the order
    # p_1, p_0: read by position, class 0 would get 0.8 and the ECE would be 0.5.
    path = tmp_path / "swapped.csv"
    labels = [1] * 7 + [0] * 3
    pd.DataFrame({"p_1": [0.8] * 10, "p_0": [0.2] * 10, "label": labels}).to_csv(path, index=False)
    row = evaluate_csv(capsys, path)
    assert row["accuracy"] == pytest.approx(0.7, abs=1e-12)
    assert row["ece"] == pytest.approx(0.1, abs=1e-12)

    # Twelve classes in the string order p0, p1, p10, p11, p2, ..., p9. Each row puts 0.89
    # on its class and 0.01 on the eleven others; 8 of the 10 rows per class are right:
    # confidence 0.89, accuracy 0.8, ECE 0.09.
    k = 12
    predicted = np.repeat(np.arange(k), 10)
    probs = np.full((len(predicted), k), 0.01)
    probs[np.arange(len(predicted)), predicted] = 0.89
    labels = np.where(np.tile(np.arange(10), k) < 8, predicted, (predicted + 1) % k)
    frame = pd.DataFrame(probs, columns=[f"p{c}" for c in range(k)])
    path = tmp_path / "twelve.csv"
    frame[sorted(frame.columns)].assign(label=labels).to_csv(path, index=False)
    row = evaluate_csv(capsys, path)
    assert row["accuracy"] == pytest.approx(0.8, abs=1e-12)
    assert row["ece"] == pytest.approx(0.09, abs=1e-12)


def test_wrong_number_of_class_names_is_named(capsys, tmp_path):
    np.savez(tmp_path / "four.npz", probs=np.full((4, 4), 0.25), labels=np.arange(4))
    status, out, err = run(capsys, "evaluate", tmp_path / "four.npz", "--classes", "a,b")
    assert_one_line_error(status, out, err, "four.npz", "2 class names", "4 prediction columns")


# ------------------------------------------------------------- output files (issue 16)


@pytest.fixture
def halves(tmp_path, load_record):
    probs, labels = load_record("lenet-5-cifar-10")
    return write_split(tmp_path, probs, labels, slice(1000), slice(1000, 2000))


def test_outputs_never_overwrite_an_input(capsys, halves):
    before = (halves / "eval.npz").read_bytes()
    for option in ("--out", "--plot", "--save-model"):
        target = halves / "eval.npz"
        if option == "--plot":  # an image extension, so that the input is the only problem
            target = halves / "cal_link.png"
            target.symlink_to(halves / "cal.npz")
        status, out, err = calibrate(capsys, halves, option, target, "--force")
        assert_one_line_error(status, out, err, option, "is an input of this command")
    assert (halves / "eval.npz").read_bytes() == before


def test_save_model_writes_the_pickle_free_format(capsys, halves, monkeypatch):
    import pickle
    import zipfile

    def refuse(*args, **kwargs):
        raise AssertionError("pickle was used")

    for name in ("dump", "dumps", "load", "loads", "Pickler", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    target = halves / "model.zip"
    out_file = halves / "calibrated.npz"
    status, out, err = calibrate(capsys, halves, "--save-model", target, "--out", out_file)
    assert status == 0, err
    with zipfile.ZipFile(target) as bundle:
        assert sorted(bundle.namelist()) == ["arrays.npz", "manifest.json"]
        manifest = json.loads(bundle.read("manifest.json"))
    assert manifest["class"] == "reliacal.calibrators.temperature.TemperatureScaling"
    model = reliacal.load(target)
    with np.load(halves / "eval.npz") as evaluation:
        probs = evaluation["probs"]
    with np.load(out_file) as written:
        np.testing.assert_array_equal(model.predict_proba(probs), written["probs"])


@pytest.mark.parametrize("option", ["--out", "--plot", "--save-model"])
def test_an_existing_output_needs_force(capsys, halves, option):
    target = halves / {"--out": "out.npz", "--plot": "plot.png", "--save-model": "m.zip"}[option]
    target.write_bytes(b"keep me")
    arguments = ["calibrate", halves / "cal.npz", halves / "eval.npz", option, target]
    status, out, err = run(capsys, *arguments)
    assert_one_line_error(status, out, err, f"{option} {target} exists", "--force")
    assert target.read_bytes() == b"keep me"
    status, out, err = run(capsys, *arguments, "--force")
    assert status == 0, err
    assert err[-1] == f"reliacal: wrote {target}"
    assert target.read_bytes() != b"keep me"
    assert [path.name for path in halves.iterdir() if ".partial-" in path.name] == []


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".npz"])
def test_out_writes_the_format_its_extension_names(capsys, halves, suffix):
    target = halves / f"calibrated{suffix}"
    status, out, err = calibrate(capsys, halves, "--out", target, "--format", "csv")
    assert status == 0, err
    assert err[-1] == f"reliacal: wrote {target}"
    assert sorted(path.name for path in halves.iterdir()) == sorted(
        ["cal.npz", "eval.npz", target.name]
    )
    table = pd.read_csv(io.StringIO(out), index_col="model")
    if suffix == ".csv":
        frame = pd.read_csv(target)
        assert list(frame.columns) == [str(k) for k in range(10)] + ["label"]
    elif suffix == ".parquet":
        frame = pd.read_parquet(target)
    else:
        with np.load(target) as saved:
            frame = pd.DataFrame(saved["probs"]).assign(label=saved["labels"])
    # The written file is the calibrated predictions: evaluated again, the same ECE.
    ece = calibration_report(frame["label"], {"x": frame.iloc[:, :10].to_numpy()})["ece"]
    assert ece.iloc[0] == pytest.approx(table.loc["TemperatureScaling", "ece"], rel=1e-6)
    assert evaluate_csv(capsys, target)["ece"] == pytest.approx(ece.iloc[0], rel=1e-9)


@pytest.mark.parametrize(
    ("arguments", "fragments"),
    [
        (["--out", "calibrated.txt"], ["--out", ".npz, .csv, .parquet", "'.txt'"]),
        (["--out", "calibrated"], ["--out", "'none'"]),
        (["--plot", "diagram.txt"], ["--plot", ".png", "'.txt'"]),
        (["--out", "same.npz", "--save-model", "same.npz"], ["--out and --save-model", "same"]),
    ],
)
def test_bad_outputs_are_refused_before_any_work(capsys, halves, arguments, fragments):
    # File names go into the test's folder; options stay as they are.
    arguments = [text if text.startswith("--") else halves / text for text in arguments]
    status, out, err = calibrate(capsys, halves, *arguments)
    # Nothing was read: no progress line, no report on stdout.
    assert_one_line_error(status, out, err, *fragments)
    assert len(err) == 1
    assert sorted(path.name for path in halves.iterdir()) == ["cal.npz", "eval.npz"]
    status, out, err = run(capsys, "evaluate", halves / "eval.npz", "--plot", halves / "x.txt")
    assert_one_line_error(status, out, err, "--plot", "'.txt'")
    assert len(err) == 1


# ------------------------------------------------------ library errors become one line


def test_a_bound_on_n_bins_is_a_usage_error(capsys, monkeypatch):
    import reliacal._validation

    original = reliacal._validation.check_n_bins

    def bounded(n_bins):  # the bound the metrics may set, as a ValueError
        if n_bins > 10_000:
            raise ValueError(f"n_bins must be at most 10000, got {n_bins}")
        return original(n_bins)

    monkeypatch.setattr(reliacal._validation, "check_n_bins", bounded)
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "a.npz", "--n-bins", "1000000000"])
    assert exit_info.value.code == 2
    assert "--n-bins: n_bins must be at most 10000, got 1000000000" in capsys.readouterr().err


def test_a_calibrator_refusal_inside_the_search_is_one_line(capsys, halves, monkeypatch):
    from reliacal.calibrators import MatrixScaling

    def refuse(self, X, y, **kwargs):  # the guard a calibrator raises on too many classes
        raise ValueError("MatrixScaling: too many parameters; use vector scaling")

    monkeypatch.setattr(MatrixScaling, "fit", refuse)
    status, out, err = calibrate(capsys, halves, "--method", "matrix")
    assert_one_line_error(status, out, err)
    assert err[-1] == "reliacal: error: MatrixScaling: too many parameters; use vector scaling"
    assert not [line for line in err if "warning" in line], err


def test_matrix_scaling_of_thousands_of_classes_is_refused_before_the_search(
    capsys, tmp_path, monkeypatch
):
    from sklearn.model_selection import GridSearchCV

    def no_search(self, *args, **kwargs):  # the size check must come before any fold
        raise AssertionError("the penalty search ran")

    monkeypatch.setattr(GridSearchCV, "fit", no_search)
    rng = np.random.default_rng(0)
    n_classes = 3162  # 3162^2 + 3162 parameters, over the default budget of 10^7
    probs = rng.dirichlet(np.ones(n_classes), size=40).astype(np.float32)
    labels = rng.integers(0, n_classes, size=40)
    folder = write_split(tmp_path, probs, labels, slice(20), slice(20, 40))
    status, out, err = calibrate(capsys, folder, "--method", "matrix")
    assert_one_line_error(status, out, err, "10,001,406 parameters", "--method vector")


@pytest.mark.slow
def test_evaluate_adds_at_most_the_file_size_in_memory(tmp_path):
    """Peak resident memory of ``evaluate`` beyond its imports: at most twice the file."""
    if not Path("/proc/self/status").exists():
        pytest.skip("reads the peak resident set size from /proc")
    rng = np.random.default_rng(0)
    n = 2_000_000
    path = tmp_path / "large.npz"
    np.savez(
        path,
        probs=rng.dirichlet(np.ones(10), size=n).astype(np.float32),
        labels=rng.integers(0, 10, size=n),
    )
    # VmHWM is the peak of this process image only (ru_maxrss would carry pytest's peak
    # across the exec).
    script = (
        "import contextlib, io, sys\n"
        "import pandas, scipy.special, reliacal.cli, reliacal.io, reliacal.metrics\n"
        "def peak():\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith('VmHWM:'):\n"
        "            return int(line.split()[1]) * 1024\n"
        "before = peak()\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    status = reliacal.cli.main(['evaluate', sys.argv[1]])\n"
        "print(status, peak() - before)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True
    )
    status, added = map(int, result.stdout.split())
    assert status == 0
    assert added <= 2 * path.stat().st_size, (added, path.stat().st_size)


def test_running_out_of_memory_is_one_line(capsys, monkeypatch):
    import reliacal.io

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(reliacal.io, "load_prediction_file", exhausted)
    status, out, err = run(capsys, "evaluate", DATA / "lenet-5-cifar-10.npz")
    assert_one_line_error(status, out, err, "out of memory")


def test_calibrate_auto_reports_its_choice(capsys, tmp_path, load_record):
    probs, labels = load_record("wideresnet-16-4-cifar-10")
    write_split(tmp_path, probs, labels, slice(2000), slice(2000, 4000))
    model_file = tmp_path / "auto.zip"
    status, out, err = calibrate(
        capsys, tmp_path, "--method", "auto", "--format", "csv", "--save-model", model_file
    )
    assert status == 0, err
    model = reliacal.load(model_file)
    said = next(line for line in err if line.startswith("reliacal: AutoCalibrator: chose"))
    assert f"chose {model.best_name_!r}" in said and model.reason_ in said
    table = pd.read_csv(io.StringIO(out), index_col="model")
    assert list(table.index) == ["uncalibrated", "AutoCalibrator"]
    # WRN-16-4 on CIFAR-10 is over-confident: a candidate beats the identity, and the
    # held-out half confirms it.
    assert model.best_name_ != "identity"
    assert table.loc["AutoCalibrator", "nll"] < table.loc["uncalibrated", "nll"]
    status, out, err = calibrate(capsys, tmp_path, "--method", "auto", "--reg-bias", "1")
    assert_one_line_error(status, out, err, "vector and matrix only")


@pytest.mark.parametrize(
    ("method", "name"),
    [
        ("platt", "PlattScaling"),
        ("isotonic", "IsotonicCalibration"),
        ("beta", "BetaCalibration"),
        ("histogram", "HistogramBinning"),
        ("ets", "EnsembleTemperatureScaling"),
    ],
)
def test_calibrate_with_the_classic_calibrators(capsys, tmp_path, method, name, load_record):
    from reliacal import calibrators

    probs, labels = load_record("wideresnet-16-4-cifar-10")
    write_split(tmp_path, probs, labels, slice(1000), slice(1000, 2000))
    out_file, model_file = tmp_path / "calibrated.npz", tmp_path / "model.zip"
    status, out, err = calibrate(
        capsys,
        tmp_path,
        *["--method", method, "--format", "csv", "--out", out_file, "--save-model", model_file],
    )
    assert status == 0, err
    table = pd.read_csv(io.StringIO(out), index_col="model")
    assert list(table.index) == ["uncalibrated", name]
    # The command's predictions are the calibrator's, fitted through the library.
    direct = getattr(calibrators, name)(input="probs").fit(probs[:1000], labels[:1000])
    expected = direct.predict_proba(probs[1000:2000])
    with np.load(out_file) as saved:
        np.testing.assert_allclose(saved["probs"], expected, atol=1e-6)
    assert type(reliacal.load(model_file)).__name__ == name
    # WRN-16-4 on CIFAR-10 is over-confident (ECE about 5%): each map lowers the ECE.
    assert table.loc[name, "ece"] < table.loc["uncalibrated", "ece"]
    status, out, err = calibrate(capsys, tmp_path, "--method", method, "--reg-bias", "1")
    assert_one_line_error(status, out, err, "vector and matrix only")


def test_calibrate_adaptive_is_seeded(capsys, tmp_path):
    from reliacal.calibrators import AdaptiveTS

    logits, labels = write_tempered_logits(tmp_path, 400, 3)
    out_file = tmp_path / "calibrated.npz"
    status, out, err = calibrate(
        capsys, tmp_path, "--method", "adaptive", "--format", "csv", "--out", out_file
    )
    assert status == 0, err
    assert list(pd.read_csv(io.StringIO(out), index_col="model").index) == [
        "uncalibrated",
        "AdaptiveTS",
    ]
    direct = AdaptiveTS(random_state=0, classes=np.arange(3)).fit(logits[:200], labels[:200])
    with np.load(out_file) as saved:
        np.testing.assert_allclose(saved["probs"], direct.predict_proba(logits[200:]), atol=1e-6)


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_flag_prints_the_package_version(flag, capsys):
    with pytest.raises(SystemExit) as exited:
        main([flag])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"reliacal {reliacal.__version__}"


# ------------------------------------------- files as a new user writes them (issues 30, 33)


def test_string_class_columns_are_matched_by_name_and_kept_on_output(capsys, tmp_path):
    # Hand-computed, as the swapped binary case above: p(cat) = 0.8 on every row, 7 of 10
    # rows are cats: accuracy 0.7, ECE (one bin) 0.1. The columns come dog first.
    labels = ["cat"] * 7 + ["dog"] * 3
    frame = pd.DataFrame({"p_dog": [0.2] * 10, "p_cat": [0.8] * 10, "label": labels})
    frame.to_csv(tmp_path / "cal.csv", index=False)
    frame.to_csv(tmp_path / "eval.csv", index=False)
    row = evaluate_csv(capsys, tmp_path / "eval.csv")
    assert row["accuracy"] == pytest.approx(0.7, abs=1e-12)
    assert row["ece"] == pytest.approx(0.1, abs=1e-12)

    out_file = tmp_path / "calibrated.csv"
    status, out, err = run(
        capsys, "calibrate", tmp_path / "cal.csv", tmp_path / "eval.csv", "--out", out_file
    )
    assert status == 0, err
    written = pd.read_csv(out_file)
    assert list(written.columns) == ["p_dog", "p_cat", "label"]
    # Temperature scaling keeps the argmax: every row still predicts cat.
    assert (written["p_cat"] > written["p_dog"]).all()
    assert list(written["label"]) == labels


def test_out_keeps_the_prefix_of_numbered_columns(capsys, halves, load_record):
    probs, labels = load_record("lenet-5-cifar-10")
    # Class-numbered columns in string order (p_0, p_1, p_10, ...) would be shuffled by a
    # positional reader; ten classes written in reverse order here.
    for name, rows in (("cal", slice(1000)), ("eval", slice(1000, 2000))):
        frame = pd.DataFrame(probs[rows, ::-1], columns=[f"p_{k}" for k in range(9, -1, -1)])
        frame.assign(label=labels[rows]).to_csv(halves / f"{name}.csv", index=False)
    out_file = halves / "calibrated.csv"
    status, out, err = run(
        capsys,
        *["calibrate", halves / "cal.csv", halves / "eval.csv", "--format", "csv"],
        *["--out", out_file],
    )
    assert status == 0, err
    written = pd.read_csv(out_file)
    assert list(written.columns) == [f"p_{k}" for k in range(10)] + ["label"]
    # The same calibration from the .npz pair of the same rows: the same probabilities.
    status, _, err = calibrate(capsys, halves, "--out", halves / "from_npz.npz")
    assert status == 0, err
    with np.load(halves / "from_npz.npz") as saved:
        np.testing.assert_allclose(written.iloc[:, :10].to_numpy(), saved["probs"], atol=1e-6)


def test_logit_columns_are_logits_and_the_output_is_named_by_class(capsys, tmp_path):
    logits, labels = write_tempered_logits(tmp_path, 600, 4)
    for name, rows in (("cal", slice(300)), ("eval", slice(300, 600))):
        frame = pd.DataFrame(logits[rows], columns=[f"logit_{k}" for k in range(4)])
        frame.assign(label=labels[rows]).to_csv(tmp_path / f"{name}.csv", index=False)
    out_file = tmp_path / "calibrated.csv"
    status, out, err = run(
        capsys, "calibrate", tmp_path / "cal.csv", tmp_path / "eval.csv", "--out", out_file
    )
    assert status == 0, err
    assert "cal.csv: logits from 4 columns (logit_0, logit_1, logit_2, ...)" in err[0]
    temperature = float(next(line for line in err if "temperature_" in line).split("= ")[1])
    probs = np.exp(log_softmax(logits[:300], axis=1))
    assert temperature == pytest.approx(exact_temperature(probs, labels[:300]), abs=1e-4)
    # Probabilities out: columns named logit_k would be read back as logits.
    written = pd.read_csv(out_file)
    assert list(written.columns) == ["0", "1", "2", "3", "label"]
    oracle = np.exp(log_softmax(logits[300:] / temperature, axis=1))
    np.testing.assert_allclose(written.iloc[:, :4].to_numpy(), oracle, atol=1e-5)


def test_one_column_is_one_column(capsys, tmp_path):
    path = tmp_path / "binary.csv"
    pd.DataFrame({"score": [0.9, 0.2, 0.6], "label": [1, 0, 1]}).to_csv(path, index=False)
    status, out, err = run(capsys, "evaluate", path)
    assert status == 0, err
    assert err == [
        "reliacal: binary.csv: probabilities from 1 column (score), labels from column 'label'"
    ]


def test_evaluate_reports_every_key_that_a_pattern_matches(capsys, tmp_path, load_record):
    # The demo's predictions.npz: one probs_<method> key per method and the labels.
    probs, labels = load_record("lenet-5-cifar-10")
    ts = TemperatureScalingOracle(probs[:1000], labels[:1000])
    path = tmp_path / "predictions.npz"
    np.savez(path, probs_uncalibrated=probs, probs_ts=ts(probs), labels=labels)
    status, out, err = run(capsys, "evaluate", path)
    assert_one_line_error(status, out, err, "--probs-key 'probs_*'")
    plot = tmp_path / "both.png"
    status, out, err = run(
        capsys, "evaluate", path, "--probs-key", "probs_*", "--format", "csv", "--plot", plot
    )
    assert status == 0, err
    assert err[:2] == [
        "reliacal: predictions.npz: probabilities from key 'probs_uncalibrated', labels from "
        "key 'labels'",
        "reliacal: predictions.npz: probabilities from key 'probs_ts', labels from key 'labels'",
    ]
    table = pd.read_csv(io.StringIO(out), index_col="model")
    expected = calibration_report(labels, {"probs_uncalibrated": probs, "probs_ts": ts(probs)})
    pd.testing.assert_frame_equal(table, expected, check_exact=False, rtol=1e-9)
    assert table.loc["probs_uncalibrated", "ece"] == pytest.approx(
        torchmetrics_ece(probs, labels), abs=1e-5
    )
    # Two diagrams side by side: twice as wide as one.
    one = tmp_path / "one.png"
    assert run(capsys, "evaluate", path, "--probs-key", "probs_ts", "--plot", one)[0] == 0
    assert matplotlib.image.imread(plot).shape[1] > 1.5 * matplotlib.image.imread(one).shape[1]

    status, out, err = run(capsys, "evaluate", path, "--probs-key", "probs_*", "--name", "x")
    assert_one_line_error(status, out, err, "--name names one model", "probs_uncalibrated")
    status, out, err = run(capsys, "evaluate", path, "--probs-key", "logits_*")
    assert_one_line_error(status, out, err, "no key matches 'logits_*'")
    status, out, err = calibrate(capsys, tmp_path, "--probs-key", "probs_*")
    assert status == 1


class TemperatureScalingOracle:
    """Log-probabilities divided by the exact NLL-optimal temperature (the oracle above)."""

    def __init__(self, probs, labels):
        self.temperature = exact_temperature(probs, labels)

    def __call__(self, probs):
        log_probs = np.log(np.clip(probs.astype(np.float64), 1e-300, None))
        return np.exp(log_softmax(log_probs / self.temperature, axis=1))


def test_calibrate_help_promises_no_folder_and_a_folder_is_refused(capsys, tmp_path):
    for command, folder_promised in (("evaluate", True), ("calibrate", False)):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert ("or a folder of .parquet files" in text) is folder_promised, text
    assert "a folder of parquet files is read by evaluate only" in text
    folder = tmp_path / "parts"
    folder.mkdir()
    pd.DataFrame({"p0": [0.9], "p1": [0.1], "label": [0]}).to_parquet(folder / "a.parquet")
    status, out, err = run(capsys, "calibrate", folder, folder / "a.parquet")
    assert_one_line_error(status, out, err, f"CAL_FILE {folder} is a folder", "read_parquet")


@pytest.mark.parametrize("name", ["OUT.NPZ", "Out.Npz", "OUT.CSV", "OUT.PARQUET"])
def test_out_extensions_in_any_case(capsys, halves, name):
    target = halves / name
    status, out, err = calibrate(capsys, halves, "--out", target)
    assert status == 0, err
    assert err[-1] == f"reliacal: wrote {target}"
    assert sorted(path.name for path in halves.iterdir()) == sorted(["cal.npz", "eval.npz", name])
    # Read back: the calibrated predictions of the same rows as an .npz written in lower case.
    assert calibrate(capsys, halves, "--out", halves / "lower.npz")[0] == 0
    status, out, err = run(capsys, "evaluate", target, "--format", "csv")
    assert status == 0, err
    again = pd.read_csv(io.StringIO(out), index_col="model")
    assert again["ece"].iloc[0] == pytest.approx(evaluate_csv(capsys, halves / "lower.npz")["ece"])


@pytest.mark.parametrize("suffix", [".npz", ".csv"])
def test_a_failure_mid_write_leaves_no_partial_file(capsys, halves, monkeypatch, suffix):
    def half_then_fail(target):  # a disk that fills up after half the file
        target = target if isinstance(target, (str, Path)) else target.name
        Path(target).write_bytes(b"half a file")
        raise OSError("No space left on device")

    monkeypatch.setattr(np, "savez_compressed", lambda file, **arrays: half_then_fail(file))
    monkeypatch.setattr(pd.DataFrame, "to_csv", lambda self, path, **_: half_then_fail(path))
    target = halves / f"calibrated{suffix}"
    status, out, err = calibrate(capsys, halves, "--out", target)
    assert status == 1  # after the report: the write is the last step
    assert err[-1] == f"reliacal: error: cannot write {target}: No space left on device"
    assert sorted(path.name for path in halves.iterdir()) == ["cal.npz", "eval.npz"]


def test_an_interrupted_write_leaves_no_partial_file(tmp_path):
    from reliacal.cli._outputs import write_atomically

    def interrupted(temporary):
        temporary.write_bytes(b"half a file")
        (temporary.parent / "side-file.tmp").write_bytes(b"a writer's own temporary")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomically(tmp_path / "model.zip", interrupted)
    assert list(tmp_path.iterdir()) == []


class FakeTerminal(io.StringIO):
    """A stderr that says it is a terminal, as a shell's is."""

    def isatty(self):
        return True


@pytest.mark.parametrize("quiet", [False, True])
def test_long_steps_show_progress_on_a_terminal(capsys, monkeypatch, halves, quiet):
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    arguments = ["calibrate", halves / "cal.npz", halves / "eval.npz", "--method", "auto"]
    arguments += ["--format", "csv", "--out", halves / "calibrated.npz"] + ["--quiet"] * quiet
    status = main([str(argument) for argument in arguments])
    assert status == 0, terminal.getvalue()
    shown = terminal.getvalue()
    steps = ["reading cal.npz", "fitting AutoCalibrator", "predicting", "writing calibrated.npz"]
    for step in steps:
        assert (f"reliacal: {step} [" in shown) is not quiet, shown
    # The command's own lines are all there, whole, and the report is on stdout alone.
    lines = [line for line in shown.replace("\r", "\n").splitlines() if "chose" in line]
    assert lines and lines[0].startswith("reliacal: AutoCalibrator: chose"), shown
    assert f"reliacal: wrote {halves / 'calibrated.npz'}" in shown
    out = capsys.readouterr().out
    assert list(pd.read_csv(io.StringIO(out), index_col="model").index) == [
        "uncalibrated",
        "AutoCalibrator",
    ]
    if quiet:
        assert "\r" not in shown and "\x1b" not in shown


def test_no_progress_when_stderr_is_not_a_terminal(capsys, halves):
    status, out, err = calibrate(capsys, halves, "--method", "auto")
    assert status == 0, err
    assert not [line for line in err if "fitting" in line or "[00:" in line], err
