"""``reliacal evaluate`` on parquet files and folders, read batch by batch."""

from __future__ import annotations

import io
import sys
import tracemalloc

import numpy as np
import pandas as pd
import pytest

from reliacal.cli import main
from reliacal.io._parquet import stream_parquet
from reliacal.metrics import calibration_report, report_columns, softmax

pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")


STREAMABLE_COLUMNS = report_columns(streamable_only=True)


def _data(n_samples, n_classes=4, seed=0):
    rng = np.random.default_rng(seed)
    probs = softmax(rng.normal(scale=2.0, size=(n_samples, n_classes)))
    labels = rng.integers(0, n_classes, size=n_samples)
    return labels, probs


def _write(path, labels, probs, row_group_size=250, columns=None):
    columns = columns or [f"p{k}" for k in range(probs.shape[1])]
    frame = pd.DataFrame(probs, columns=columns).assign(label=labels)
    pq.write_table(
        pa.Table.from_pandas(frame, preserve_index=False), path, row_group_size=row_group_size
    )
    return path


def _evaluate(capsys, *args):
    status = main(["evaluate", *map(str, args), "--format", "csv"])
    captured = capsys.readouterr()
    table = pd.read_csv(io.StringIO(captured.out), index_col="model") if status == 0 else None
    return status, table, captured.err.strip().splitlines()


def test_a_file_of_many_row_groups_equals_the_in_memory_report(capsys, tmp_path):
    labels, probs = _data(2000)
    path = _write(tmp_path / "preds.parquet", labels, probs)
    assert pq.ParquetFile(path).metadata.num_row_groups == 8
    status, table, err = _evaluate(capsys, path)
    assert status == 0
    assert err == [
        "reliacal: preds.parquet: probabilities from 4 columns (p0, p1, p2, ...), labels from "
        "column 'label'"
    ]
    expected = calibration_report(labels, {"preds": probs})
    assert list(table.columns) == list(expected.columns)
    np.testing.assert_allclose(table.to_numpy(), expected.to_numpy(), rtol=1e-12, atol=1e-15)


def test_a_folder_is_its_files_in_name_order(capsys, tmp_path):
    labels, probs = _data(1500, seed=1)
    folder = tmp_path / "parts"
    (folder / "sub").mkdir(parents=True)
    _write(folder / "a.parquet", labels[:700], probs[:700])
    _write(folder / "sub" / "b.parquet", labels[700:701], probs[700:701])
    _write(folder / "c.parquet", labels[701:], probs[701:])
    (folder / "_SUCCESS").write_text("")
    status, table, _ = _evaluate(capsys, folder, "--n-bins", "10")
    assert status == 0 and list(table.index) == ["parts"]
    expected = calibration_report(labels, {"parts": probs}, n_bins=10)
    np.testing.assert_allclose(table.to_numpy(), expected.to_numpy(), rtol=1e-12, atol=1e-15)


def test_streamable_only_reports_the_sums_metrics(capsys, tmp_path):
    labels, probs = _data(900, seed=2)
    path = _write(tmp_path / "preds.parquet", labels, probs)
    status, table, _ = _evaluate(capsys, path, "--streamable-only")
    assert status == 0 and list(table.columns) == list(STREAMABLE_COLUMNS)
    assert "smooth_ece" not in table.columns and "ks_error" not in table.columns
    expected = calibration_report(labels, {"preds": probs})[list(STREAMABLE_COLUMNS)]
    np.testing.assert_allclose(table.to_numpy(), expected.to_numpy(), rtol=1e-12, atol=1e-15)
    # The same option on an in-memory format.
    np.savez(tmp_path / "preds.npz", probs=probs, labels=labels)
    status, from_npz, _ = _evaluate(capsys, tmp_path / "preds.npz", "--streamable-only")
    assert status == 0 and list(from_npz.columns) == list(STREAMABLE_COLUMNS)


def test_logits_and_numbered_columns_out_of_order(capsys, tmp_path):
    labels, probs = _data(600, n_classes=3, seed=3)
    logits = np.log(probs) + 2.0
    # Columns written as class 2, 0, 1: the names put them back in class order.
    path = _write(
        tmp_path / "logits.parquet", labels, logits[:, [2, 0, 1]], columns=["p2", "p0", "p1"]
    )
    status, table, err = _evaluate(capsys, path, "--logits")
    assert status == 0 and "(softmax applied)" in err[0] and "class numbers" in err[0]
    expected = calibration_report(labels, {"logits": probs})
    np.testing.assert_allclose(table.to_numpy(), expected.to_numpy(), rtol=1e-9, atol=1e-12)


def test_logit_columns_need_no_flag(capsys, tmp_path):
    labels, probs = _data(500, n_classes=3, seed=7)
    logits = np.log(probs) + 1.5  # logits up to a per-row constant
    columns = ["logit_1", "logit_2", "logit_0"]
    path = _write(tmp_path / "scores.parquet", labels, logits[:, [1, 2, 0]], columns=columns)
    status, table, err = _evaluate(capsys, path)
    assert status == 0, err
    assert err == [
        "reliacal: scores.parquet: logits from 3 columns (logit_0, logit_1, logit_2) put in the "
        "order of the class numbers in their names (softmax applied), labels from column 'label'"
    ]
    expected = calibration_report(labels, {"scores": probs})
    np.testing.assert_allclose(table.to_numpy(), expected.to_numpy(), rtol=1e-9, atol=1e-12)


def test_a_folder_is_read_one_file_open_at_a_time(monkeypatch, tmp_path):
    # A Spark or Dask folder can hold more parts than the process may open at once.
    labels, probs = _data(600, seed=5)
    folder = tmp_path / "parts"
    folder.mkdir()
    for part in range(30):
        rows = slice(20 * part, 20 * (part + 1))
        _write(folder / f"part-{part:03d}.parquet", labels[rows], probs[rows])
    open_now, most_open = [0], [0]

    class CountingParquetFile(pq.ParquetFile):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            open_now[0] += 1
            most_open[0] = max(most_open[0], open_now[0])

        def close(self, *args, **kwargs):
            if not self.closed:
                open_now[0] -= 1
            super().close(*args, **kwargs)

    monkeypatch.setattr(pq, "ParquetFile", CountingParquetFile)
    state, _ = stream_parquet(folder, batch_rows=50)
    assert state.n_samples == 600
    assert most_open[0] == 1 and open_now[0] == 0


def test_progress_bar_counts_the_rows(tmp_path):
    labels, probs = _data(900, seed=4)
    path = _write(tmp_path / "preds.parquet", labels, probs)
    bar = io.StringIO()
    state, _ = stream_parquet(path, batch_rows=100, progress=bar)
    assert state.n_samples == 900
    assert "900/900" in bar.getvalue() and "preds.parquet" in bar.getvalue()


@pytest.mark.parametrize("quiet", [False, True])
def test_the_command_shows_the_bar_on_a_terminal_unless_quiet(capsys, monkeypatch, tmp_path, quiet):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    labels, probs = _data(900, seed=4)
    path = _write(tmp_path / "preds.parquet", labels, probs)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["evaluate", str(path), "--format", "csv"] + ["--quiet"] * quiet) == 0
    assert ("/900 [" in terminal.getvalue()) is not quiet, terminal.getvalue()  # 900 rows
    assert "reliacal: preds.parquet: probabilities from 4 columns" in terminal.getvalue()


def test_memory_is_bounded_by_a_batch(tmp_path):
    labels, probs = _data(400_000, n_classes=10, seed=5)
    path = _write(tmp_path / "big.parquet", labels, probs, row_group_size=50_000)
    matrix_bytes = probs.nbytes  # 32 MB
    del probs
    tracemalloc.start()
    try:
        state, _ = stream_parquet(path, streamable_only=True, progress=io.StringIO())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert state.n_samples == 400_000
    # A 65,536-row batch and its temporaries, not the file.
    assert peak < 0.25 * matrix_bytes


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("empty_folder", "holds no .parquet files"),
        ("other_columns", "b.parquet has other columns than a.parquet"),
        ("bad_second_file", "b.parquet: rows of y_prob"),
        ("extra_column", "column 'weight' is not a class probability"),
        ("folder_with_labels", "no --labels"),
        ("junk_file", "parts/sub/junk.parquet is not a readable parquet file"),
        ("empty_file", "parts/b.parquet is not a readable parquet file"),
    ],
)
def test_user_errors_are_one_line(capsys, tmp_path, setup, message):
    labels, probs = _data(300, seed=6)
    folder = tmp_path / "parts"
    folder.mkdir()
    extra = []
    if setup == "other_columns":
        _write(folder / "a.parquet", labels, probs)
        _write(folder / "b.parquet", labels, probs[:, :3] / probs[:, :3].sum(1, keepdims=True))
    elif setup == "bad_second_file":
        _write(folder / "a.parquet", labels, probs)
        _write(folder / "b.parquet", labels, probs * 0.5)
    elif setup == "extra_column":
        weighted = np.column_stack([probs, np.full(300, 3.0)])
        columns = ["a", "b", "c", "d", "weight"]
        _write(folder / "a.parquet", labels, weighted, columns=columns)
    elif setup in ("junk_file", "empty_file"):
        # A file that is not parquet among good ones: pyarrow's message does not name it.
        _write(folder / "a.parquet", labels, probs)
        (folder / "sub").mkdir()
        junk = folder / "sub" / "junk.parquet" if setup == "junk_file" else folder / "b.parquet"
        junk.write_bytes(b"" if setup == "empty_file" else b"these bytes are not parquet")
    elif setup == "folder_with_labels":
        _write(folder / "a.parquet", labels, probs)
        np.save(tmp_path / "labels.npy", labels)
        extra = ["--labels", tmp_path / "labels.npy"]
    status, _, err = _evaluate(capsys, folder, *extra)
    assert status == 1 and len(err) == 1 and err[0].startswith("reliacal: error: ")
    assert message in err[0], err


def test_the_full_report_reads_the_files_again_in_constant_memory(monkeypatch, tmp_path):
    # Two-decimal probabilities: buckets of several values at the quantile cuts, so the
    # sorted metrics need the second read.
    rng = np.random.default_rng(8)
    positive = np.round(rng.random(30_000), 2)
    labels = (rng.random(30_000) < positive).astype(int)
    probs = np.column_stack([1 - positive, positive])
    folder = tmp_path / "parts"
    folder.mkdir()
    for index, start in enumerate(range(0, 30_000, 10_000)):
        rows = slice(start, start + 10_000)
        _write(folder / f"part-{index}.parquet", labels[rows], probs[rows], row_group_size=4000)
    opened = []
    original = pq.ParquetFile

    class CountingParquetFile(original):
        def __init__(self, path, *args, **kwargs):
            opened.append(path.name)
            super().__init__(path, *args, **kwargs)

    monkeypatch.setattr(pq, "ParquetFile", CountingParquetFile)
    state, _ = stream_parquet(folder, progress=io.StringIO())
    assert opened == ["part-0.parquet", "part-1.parquet", "part-2.parquet"] * 2
    assert state.histogram and state._sums.confidences == []
    expected = calibration_report(labels, {"m": probs})
    values = state.compute(list(expected.columns))
    for name in expected.columns:
        assert values[name] == pytest.approx(expected.loc["m", name], rel=1e-12, abs=1e-12), name
    opened.clear()
    state, _ = stream_parquet(folder, streamable_only=True, progress=io.StringIO())
    assert len(opened) == 3 and not state.histogram
