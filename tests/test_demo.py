"""``reliacal demo --quick`` end to end, and the method registry."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from scipy.special import softmax as scipy_softmax
from timm.models.vision_transformer import VisionTransformer

from reliacal.cli import main
from reliacal.demo import METHODS, DemoMethod, MethodOutput, post_hoc, run_demo
from reliacal.demo._report import slug
from reliacal.demo._run import _temperature_histogram
from reliacal.demo._summary import END_MARKER, START_MARKER, extract_block, summary_findings
from reliacal.metrics import expected_calibration_error, negative_log_likelihood

EXPECTED_FILES = {
    "report.md",
    "report.html",
    "reliability_diagrams.png",
    "training.png",
    "predictions.npz",
    "calibration_logits.npz",
    "test_logits.npz",
}


@pytest.fixture(scope="module")
def demo_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("demo") / "reliacal-demo"
    results = folder.parent / "results.md"
    assert main(["demo", "--quick", "--out", str(folder), "--results", str(results)]) == 0
    return folder


def test_demo_writes_the_report(demo_folder):
    assert EXPECTED_FILES <= {path.name for path in demo_folder.iterdir()}
    markdown = (demo_folder / "report.md").read_text()
    for method in METHODS:
        assert re.search(rf"^\| {re.escape(method.name)} \| 0\.\d{{4}} \|", markdown, re.M)
    for link in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown):
        assert (demo_folder / link).is_file(), link
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown)
    assert {"reliability_diagrams.png", "training.png"} <= set(images)
    page = (demo_folder / "report.html").read_text()
    assert page.count("data:image/png;base64,") == len(images)
    assert "<table" in page and all(method.name in page for method in METHODS)
    for name in ("reliability_diagrams.png", "training.png"):
        assert plt.imread(demo_folder / name).shape[0] > 200


def test_demo_predictions_match_the_report(demo_folder):
    with np.load(demo_folder / "predictions.npz") as predictions:
        arrays = dict(predictions)
    with np.load(demo_folder / "test_logits.npz") as test:
        logits, labels = test["logits"], test["labels"]
    np.testing.assert_array_equal(arrays["labels"], labels)
    assert len(labels) == 809
    np.testing.assert_allclose(
        arrays["probs_uncalibrated"], scipy_softmax(logits.astype(np.float64), axis=1), atol=1e-6
    )
    assert len(arrays) == 1 + len(METHODS)
    assert {
        "labels",
        "probs_uncalibrated",
        "probs_temperaturescaling",
        "probs_vectorscaling",
        "probs_matrixscaling-odir",
    } <= set(arrays)
    markdown = (demo_folder / "report.md").read_text()
    row = re.search(r"^\| TemperatureScaling \| ([\d.]+) \| ([\d.]+) \|", markdown, re.M)
    ece = expected_calibration_error(labels, arrays["probs_temperaturescaling"])
    assert float(row.group(2)) == pytest.approx(ece, abs=5e-5)


def test_report_says_whether_each_gain_over_uncalibrated_and_ts_is_significant(demo_folder):
    with np.load(demo_folder / "predictions.npz") as predictions:
        arrays = dict(predictions)
    labels = arrays["labels"]
    markdown = (demo_folder / "report.md").read_text()
    section = markdown.split("## Is the gain significant?", 1)[1].split("\n## ", 1)[0]
    header = re.search(r"^\| method \|(.*)\|$", section, re.M).group(1)
    assert [cell.strip() for cell in header.split("|")] == [
        "ECE vs Uncalibrated",
        "NLL vs Uncalibrated",
        "ECE vs TemperatureScaling",
        "NLL vs TemperatureScaling",
    ]
    row = re.search(r"^\| TemperatureScaling \| (\S+) \[(\S+), (\S+)\]( \*)? \|", section, re.M)
    # The point difference is the plain ECE difference, computed here independently.
    expected = expected_calibration_error(
        labels, arrays["probs_temperaturescaling"]
    ) - expected_calibration_error(labels, arrays["probs_uncalibrated"])
    difference, low, high = (float(value) for value in row.group(1, 2, 3))
    assert difference == pytest.approx(expected, abs=5e-5)
    assert low <= difference <= high
    assert (row.group(4) is not None) == (high < 0 or low > 0)  # * iff zero is outside
    # Against itself the difference is exactly zero and never significant.
    own = re.search(r"^\| Uncalibrated \| ([^|]+) \|", section, re.M).group(1).strip()
    assert own == "+0.0000 [+0.0000, +0.0000]"
    assert "Is the gain significant?" in (demo_folder / "report.html").read_text()


def test_evaluate_command_in_the_report_works(demo_folder, capsys, monkeypatch):
    markdown = (demo_folder / "report.md").read_text()
    command = re.search(r"^reliacal (evaluate .*)$", markdown, re.M).group(1).split()
    monkeypatch.chdir(demo_folder)
    assert main([*command, "--format", "csv"]) == 0
    output = capsys.readouterr().out.splitlines()
    ece = float(output[1].split(",")[2])
    # The report's command evaluates the last method of the registry.
    last = re.escape(METHODS[-1].name)
    row = re.search(rf"^\| {last} \| [\d.]+ \| ([\d.]+) \|", markdown, re.M)
    assert ece == pytest.approx(float(row.group(1)), abs=5e-5)
    assert (demo_folder / "diagram.png").is_file()


def test_calibrate_command_reproduces_the_temperature_row(demo_folder, capsys):
    out = demo_folder / "ts_again.npz"
    status = main(
        [
            "calibrate",
            str(demo_folder / "calibration_logits.npz"),
            str(demo_folder / "test_logits.npz"),
            "--out",
            str(out),
        ]
    )
    assert status == 0
    capsys.readouterr()
    with np.load(out) as again, np.load(demo_folder / "predictions.npz") as demo:
        np.testing.assert_allclose(again["probs"], demo["probs_temperaturescaling"], atol=1e-10)


def test_a_method_is_one_registry_entry(demo_folder, tmp_path):
    seen = {}

    def inspect_context(context):
        seen["context"] = context
        return MethodOutput(
            scipy_softmax(context.test_logits * 2.0, axis=1),
            figures={"Logit histogram": _histogram(context.test_logits)},
            details="logits doubled",
        )

    methods = [
        METHODS[0],
        DemoMethod("Sharpened x2", inspect_context),
        DemoMethod("Per-sample T", post_hoc(lambda context: FeatureTemperature(), features=True)),
    ]
    result = run_demo(tmp_path, quick=True, methods=methods, verbose=False)

    context = seen["context"]
    assert isinstance(context.model, VisionTransformer) and not context.model.training
    assert context.quick and context.random_state == 0
    assert context.training_config.max_epochs == 5
    assert len(context.splits.y_train) == 538 and len(context.splits.y_calibration) == 450
    assert context.calibration_logits.shape == (450, 10)
    assert context.calibration_features.shape == (450, 64)
    assert context.test_features.shape == (809, 64)
    with torch.no_grad():
        head = context.backbone.head(torch.from_numpy(context.test_features)).numpy()
        direct = context.model(torch.from_numpy(context.splits.X_test[:20])).numpy()
    np.testing.assert_allclose(head, context.test_logits, atol=1e-5)
    np.testing.assert_allclose(direct, context.test_logits[:20], atol=1e-5)
    # Same seed, same quick training as the command's run: identical logits on the CPU.
    with np.load(demo_folder / "test_logits.npz") as first_run:
        np.testing.assert_allclose(context.test_logits, first_run["logits"], atol=1e-6)

    assert list(result.report.index) == ["Uncalibrated", "Sharpened x2", "Per-sample T"]
    assert result.report.loc["Sharpened x2", "details"] == "logits doubled"
    figure_file = tmp_path / "sharpened-x2_logit-histogram.png"
    assert figure_file in result.files and figure_file.is_file()
    assert "sharpened-x2_logit-histogram.png" in result.report_path.read_text()
    np.testing.assert_allclose(
        result.probabilities["Sharpened x2"], scipy_softmax(context.test_logits * 2.0, axis=1)
    )
    # A feature-based method sees [features, logits] and gets its temperature histogram.
    temperatures = 1.0 + np.abs(context.test_features[:, 0])
    np.testing.assert_allclose(
        result.probabilities["Per-sample T"],
        scipy_softmax(context.test_logits / temperatures[:, None], axis=1),
    )
    assert (tmp_path / "per-sample-t_temperature-per-test-sample.png").is_file()
    assert result.report.loc["Per-sample T", "details"].startswith("T from 1")


class _TableHeaders(HTMLParser):
    """The header rows (cell texts) of each table of a page, and the class of each table."""

    def __init__(self):
        super().__init__()
        self.tables, self.classes, self._in_head, self._cell = [], [], False, None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
            self.classes.append(dict(attrs).get("class", ""))
        elif tag == "thead":
            self._in_head = True
        elif tag == "tr" and self._in_head:
            self.tables[-1].append([])
        elif tag == "th" and self._in_head:
            self._cell = ""

    def handle_endtag(self, tag):
        if tag == "thead":
            self._in_head = False
        elif tag == "th" and self._cell is not None:
            self.tables[-1][-1].append(self._cell.strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def test_html_tables_have_one_header_row_naming_every_column(demo_folder):
    parser = _TableHeaders()
    parser.feed((demo_folder / "report.html").read_text())
    assert len(parser.tables) == 2
    metrics, significance = parser.tables
    for rows in parser.tables:
        assert len(rows) == 1 and all(rows[0]), rows  # no row of empty cells, no empty cell
        assert rows[0][0] == "method"
    assert metrics[0][1:3] == ["accuracy", "ece"] and metrics[0][-1] == "details"
    assert significance[0][1] == "ECE vs Uncalibrated"
    # The details column wraps, and a table wider than the page scrolls instead of being cut.
    page = (demo_folder / "report.html").read_text()
    assert "table.metrics td:last-child" in page and ".table { overflow-x: auto; }" in page
    assert page.count("<div class='table'><table") == 2


@pytest.mark.parametrize("spread", [5e-4, 0.0])
def test_temperature_figure_spans_the_temperatures(spread):
    rng = np.random.default_rng(0)
    temperatures = (1.328 + spread * rng.standard_normal(809)).astype(np.float32)
    figure = _temperature_histogram(temperatures)
    (ax,) = figure.axes
    low, high = ax.get_xlim()
    assert low <= temperatures.min() and temperatures.max() <= high
    bars = [patch for patch in ax.patches if patch.get_height() > 0]
    assert sum(patch.get_height() for patch in bars) == 809
    if spread:
        # The spread fills the axis (not a sliver next to T = 1 at its edge).
        assert temperatures.max() - temperatures.min() > 0.8 * (high - low)
        assert len(bars) > 10
    else:
        (bar,) = bars
        assert bar.get_width() > 0.05 * (high - low)
        assert "all 809 test samples: T = 1.328" in ax.get_title()
    # T = 1 lies far to the left of 1.328: the title says so; no line squeezes the axis.
    assert "T = 1 (unchanged logits) lies off the axis, to the left" in ax.get_title()
    assert ax.get_lines() == []
    plt.close(figure)


def test_temperature_figure_marks_t_equal_one_when_it_is_on_the_axis():
    temperatures = np.linspace(0.8, 1.6, 500)
    figure = _temperature_histogram(temperatures)
    (ax,) = figure.axes
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [1.0, 1.0]
    assert ax.get_legend().get_texts()[0].get_text() == "T = 1 (unchanged logits)"
    assert ax.get_title() == ""
    plt.close(figure)


def test_method_names_must_be_distinct(tmp_path):
    with pytest.raises(ValueError, match="distinct"):
        run_demo(tmp_path, quick=True, methods=[METHODS[0], METHODS[0]], verbose=False)


class FeatureTemperature:
    """A stand-in for a per-sample temperature method: T(x) = 1 + |first feature|."""

    def fit(self, X, y):
        assert X.shape[1] == 64 + 10 and len(X) == len(y)
        return self

    def temperature(self, X):
        return 1.0 + np.abs(X[:, 0])

    def predict_proba(self, X):
        return scipy_softmax(X[:, 64:] / self.temperature(X)[:, None], axis=1)


def _histogram(values):
    figure, ax = plt.subplots()
    ax.hist(values.ravel(), bins=30)
    return figure


RESULTS_FILE = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "demo.md"


def _table_rows(markdown: str, columns: int) -> dict[str, list[float]]:
    """Method -> numbers of the Markdown table rows that have ``columns`` numbers."""
    rows = {}
    for line in markdown.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) > columns:
            try:
                rows[cells[0]] = [float(cell) for cell in cells[1 : columns + 1]]
            except ValueError:
                continue
    return rows


def test_results_file_holds_the_reports_numbers_and_their_claims(demo_folder):
    results = (demo_folder.parent / "results.md").read_text()
    assert results.startswith("# The demo's numbers")
    assert f"reliacal demo --quick --results {demo_folder.parent / 'results.md'}" in results
    block = extract_block(results)
    assert block.startswith(START_MARKER) and block.endswith(END_MARKER)
    assert "**Quick mode**" in block
    assert "test split of 809 images (the model trained on 538, the calibrators fitted on 450)" in (
        block
    )
    # The block's table is the report's, for every method (accuracy, ECE, smooth ECE, NLL).
    report = _table_rows((demo_folder / "report.md").read_text(), 8)
    table = _table_rows(block, 4)
    assert list(table) == [method.name for method in METHODS]
    for name, (acc, ece, smooth, nll) in table.items():
        assert [acc, ece, smooth, nll] == [report[name][i] for i in (0, 1, 4, 5)]
    # The claims, checked against the predictions themselves.
    with np.load(demo_folder / "predictions.npz") as predictions:
        arrays = dict(predictions)
    labels = arrays.pop("labels")
    eces = {key: expected_calibration_error(labels, probs) for key, probs in arrays.items()}
    nlls = {key: negative_log_likelihood(labels, probs) for key, probs in arrays.items()}
    lowest = re.search(
        r"^Lowest ECE: (.+) \(([\d.]+)\)\. Lowest NLL: (.+) \(([\d.]+)\)\.$", block, re.M
    )
    assert float(lowest.group(2)) == pytest.approx(min(eces.values()), abs=5e-5)
    assert float(lowest.group(4)) == pytest.approx(min(nlls.values()), abs=5e-5)
    slugs = {method.name: f"probs_{slug(method.name)}" for method in METHODS}
    assert slugs[lowest.group(1).split(" and ")[0]] in {
        key for key, value in eces.items() if round(value, 4) == round(min(eces.values()), 4)
    }
    # Each pair line's differences are the metrics' differences.
    pairs = [(method.name, method.against) for method in METHODS if method.against]
    assert pairs
    for name, reference in pairs:
        line = re.search(
            rf"^- {re.escape(name)} against {re.escape(reference)}: ECE (\S+) \[(\S+), (\S+)\], "
            r"NLL (\S+) \[(\S+), (\S+)\]; (.+)\.$",
            block,
            re.M,
        )
        ece_diff, ece_low, ece_high, nll_diff, nll_low, nll_high = map(float, line.groups()[:6])
        assert ece_diff == pytest.approx(eces[slugs[name]] - eces[slugs[reference]], abs=5e-5)
        assert nll_diff == pytest.approx(nlls[slugs[name]] - nlls[slugs[reference]], abs=5e-5)
        # An interval that excludes zero as printed is significant, one that holds zero inside
        # is not; one whose printed end is 0.0000 may be either (the end was rounded).
        verdict = line.group(7)
        named = (
            set()
            if verdict == "neither is significant"
            else set(verdict.removeprefix("significant: ").split(" and "))
        )
        assert verdict == "neither is significant" or verdict.startswith("significant: ")
        for metric, low, high in (("ECE", ece_low, ece_high), ("NLL", nll_low, nll_high)):
            if low > 0 or high < 0:
                assert metric in named, line.group(0)
            elif low < 0 < high:
                assert metric not in named, line.group(0)
    # The report states the same claims.
    markdown = (demo_folder / "report.md").read_text()
    assert f"- {lowest.group(0)}" in markdown.split("## In short", 1)[1]


def _comparison(rows: dict[tuple[str, str], tuple[float, float, float]]):
    """A compare()-shaped frame from (method, metric) -> (difference, low, high)."""
    import pandas as pd

    index = pd.MultiIndex.from_tuples(list(rows), names=["method", "metric"])
    values = np.array(list(rows.values()))
    return pd.DataFrame(
        {
            "difference": values[:, 0],
            "difference_ci_low": values[:, 1],
            "difference_ci_high": values[:, 2],
            "significant": (values[:, 1] > 0) | (values[:, 2] < 0),
        },
        index=index,
    )


def test_findings_name_the_lowest_and_the_significant_differences_by_hand():
    import pandas as pd

    report = pd.DataFrame(
        {"ece": [0.0500, 0.02004, 0.01996, 0.0300], "nll": [0.40, 0.31, 0.30, 0.50]},
        index=["raw", "TS", "A", "B"],
    )
    compared = _comparison(
        {
            ("raw", "ece"): (0.0, 0.0, 0.0),
            ("raw", "nll"): (0.0, 0.0, 0.0),
            ("TS", "ece"): (-0.03, -0.05, -0.01),
            ("TS", "nll"): (-0.09, -0.2, 0.01),
            ("A", "ece"): (-0.03, -0.04, -0.02),
            ("A", "nll"): (-0.10, -0.15, -0.05),
            ("B", "ece"): (-0.02, -0.03, 0.01),
            ("B", "nll"): (0.10, 0.05, 0.15),
        }
    )
    lines = summary_findings(report, {"raw": compared}, [("B", "raw"), ("A", "missing")])
    # 0.02004 and 0.01996 both print as 0.0200: a tie, both named.
    assert lines[0] == "Lowest ECE: TS and A (0.0200). Lowest NLL: A (0.3000)."
    assert lines[1] == (
        "- Against raw, significantly lower ECE: TS and A; higher ECE: none; "
        "lower NLL: A; higher NLL: B."
    )
    assert lines[2] == (
        "- B against raw: ECE -0.0200 [-0.0300, +0.0100], NLL +0.1000 [+0.0500, +0.1500]; "
        "significant: NLL."
    )
    assert len(lines) == 3  # a pair whose reference was not compared is left out


@pytest.mark.slow
def test_demo_reruns_to_the_committed_results(tmp_path):
    # The demo is deterministic on the CPU with one thread: a full rerun writes the block of
    # benchmarks/results/demo.md (and so of the README) again, every digit.
    results = tmp_path / "demo.md"
    assert (
        main(["demo", "--quiet", "--out", str(tmp_path / "demo"), "--results", str(results)]) == 0
    )
    rerun, committed = extract_block(results.read_text()), extract_block(RESULTS_FILE.read_text())
    # Same words, same claims, and every number within 2 units of its last printed digit: on
    # another CPU's vector kernels a value can round the other way, while a stale table is
    # off by far more.
    number = re.compile(r"-?\d+\.\d+")
    assert number.sub("#", rerun) == number.sub("#", committed)
    for new, old in zip(number.findall(rerun), number.findall(committed), strict=True):
        unit = 10.0 ** -len(old.split(".")[1])
        assert abs(float(new) - float(old)) <= 2 * unit + 1e-12, (new, old)
