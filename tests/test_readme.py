"""The README's Python blocks run as written, so the quick start cannot rot."""

import importlib.util
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
# The Dask blocks start a cluster: the search's needs a real address
# (tests/calibrators/test_search.py covers that path), the evaluation's runs as a script below.
RUNNABLE = [block for block in BLOCKS if "Client(" not in block]
(DASK_EVALUATION,) = [block for block in BLOCKS if "read_parquet" in block]
_NUMBER = re.compile(r"-?\d+\.\d+(?:e[-+]\d+)?")


def test_readme_has_python_blocks():
    assert len(RUNNABLE) >= 2


@pytest.mark.parametrize("index", range(len(RUNNABLE)))
def test_readme_block_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(RUNNABLE[index], f"README block {index}", "exec"), namespace)
    if "SMOKE EXAMPLE" in RUNNABLE[index]:
        # The README says its fine-tuning lines learn nothing and that fit warns so. Which
        # of the two fits warns depends on one validation prediction either side of the
        # majority class, so at least one, not both.
        chance = [w for w in caught if "never rose above chance" in str(w.message)]
        assert chance
        held_out = slice(1000, 1300)
        for name in ("calattn", "director"):
            model = namespace[name]
            predicted = model.predict(namespace["images"][held_out])
            accuracy = (predicted == namespace["digits"][held_out]).mean()
            assert accuracy < 0.2, (name, accuracy)
    if index == 0:
        assert abs(namespace["ts"].temperature_ - 3.0) < 0.3
    else:
        assert namespace["temperatures"].shape == (600,)
        assert (namespace["per_sample_scale"] > 0).all()
        assert (namespace["scores"].to_numpy() >= 0).all()


def test_quick_start_prints_its_whole_report(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    exec(compile(RUNNABLE[0], "README block 0", "exec"), {})
    printed = capsys.readouterr().out
    # pandas elides rows or columns of a frame wider or longer than the terminal with "...".
    assert "..." not in printed
    for metric in ("ece", "nll", "brier"):
        assert re.search(rf"^{metric}\b", printed, flags=re.MULTILINE), printed


def test_pytest_summary_names_failures_but_not_expected_failures():
    """`-ra` buried a FAILED line under the check_estimator waivers' XFAIL reasons."""
    import configparser

    config = configparser.ConfigParser()
    config.read(README.parent / "setup.cfg")
    flags = next(
        option[2:] for option in config["tool:pytest"]["addopts"].split() if option.startswith("-r")
    )
    assert {"f", "E"} <= set(flags) and not {"a", "A", "x"} & set(flags), flags


@pytest.mark.slow
def test_readme_dask_evaluation_runs_as_a_script_on_a_parquet_folder(tmp_path):
    # As the block says: a script (LocalCluster's worker processes import it) and a folder
    # of parquet files with a label column and p0..p9, ten files, so that Dask reads the
    # label column alone in fewer partitions than the probabilities.
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    pytest.importorskip("distributed")
    from reliacal.metrics import calibration_report, softmax

    rng = np.random.default_rng(11)
    probs = softmax(rng.normal(scale=2.0, size=(3000, 10)))
    labels = rng.integers(0, 10, size=3000)
    (tmp_path / "predictions").mkdir()
    for index, rows in enumerate(np.array_split(np.arange(3000), 10)):
        frame = pd.DataFrame(probs[rows], columns=[f"p{k}" for k in range(10)])
        frame.assign(label=labels[rows]).to_parquet(tmp_path / "predictions" / f"{index}.parquet")
    script = tmp_path / "evaluate.py"
    script.write_text(DASK_EVALUATION)
    root = str(README.parent)
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": root, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    printed = result.stdout
    expected = repr(calibration_report(labels, {"model": probs}))
    # The same table: its words as printed, and its numbers up to the printed digits.
    assert _NUMBER.sub("#", printed).split() == _NUMBER.sub("#", expected).split()
    np.testing.assert_allclose(
        [float(x) for x in _NUMBER.findall(printed)],
        [float(x) for x in _NUMBER.findall(expected)],
        rtol=1e-5,
        atol=1e-9,
    )


def _layout_rows() -> dict[str, int]:
    """Unit -> layer, from the table of the README's Layout section."""
    layout = README.read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in layout.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if line.startswith("| ") and cells[0].isdigit():
            for name in re.findall(r"`([\w]+)(?:\.py|/)`", cells[1]):
                rows[name] = int(cells[0])
    return rows


def test_layout_section_is_the_architecture_tests_layers():
    spec = importlib.util.spec_from_file_location(
        "architecture", Path(__file__).with_name("test_architecture.py")
    )
    architecture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(architecture)
    assert _layout_rows() == architecture.LAYER_OF


# The demo's section: its block is the demo's results file, and its claims are its table's.
DEMO_RESULTS = README.parent / "benchmarks" / "results" / "demo.md"
_PRINTED = r"[-+]?\d+\.\d{4}"


def _demo_section() -> str:
    return README.read_text().split("## The demo", 1)[1].split("\n## ", 1)[0]


def _demo_table(block: str) -> dict[str, dict[str, float]]:
    lines = [line for line in block.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[1:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if set("".join(cells)) <= set("-: "):
            continue  # the header's rule
        rows[cells[0]] = dict(zip(header[1:], map(float, cells[1:]), strict=True))
    return rows


def test_readme_demo_block_is_the_committed_demo_results():
    from reliacal.demo._summary import extract_block

    block = extract_block(_demo_section())
    assert block == extract_block(DEMO_RESULTS.read_text())
    # No number of the demo's run outside the generated block, where it could go stale.
    outside = _demo_section().replace(block, "")
    assert not re.findall(_PRINTED, outside), re.findall(_PRINTED, outside)


def test_readme_demo_claims_agree_with_its_table():
    from reliacal.datasets import load_digits_images, train_calibration_test_split
    from reliacal.demo._run import CALIBRATION_SIZE, TEST_SIZE
    from reliacal.demo._summary import extract_block

    block = extract_block(_demo_section())
    table = _demo_table(block)
    assert {"Uncalibrated", "TemperatureScaling", "CalAttn", "CalAttn + TS"} <= set(table)
    # The sizes it states are the demo's split, computed here.
    X, y = load_digits_images(image_size=16)
    splits = train_calibration_test_split(
        X, y, calibration_size=CALIBRATION_SIZE, test_size=TEST_SIZE, random_state=0
    )
    sizes = (len(splits.y_test), len(splits.y_train), len(splits.y_calibration))
    assert (
        "test split of {:,} images (the model trained on {:,}, the calibrators fitted on {:,})".format(
            *sizes
        )
        in block
    )
    # The lowest ECE and NLL are the table's.
    lowest = re.search(r"^Lowest ECE: (.+) \((\S+)\)\. Lowest NLL: (.+) \((\S+)\)\.$", block, re.M)
    for names, value, column in ((1, 2, "ECE"), (3, 4, "NLL")):
        best = min(row[column] for row in table.values())
        assert float(lowest.group(value)) == best
        expected = [name for name, row in table.items() if row[column] == best]
        assert lowest.group(names).replace(" and ", ", ").split(", ") == expected
    # A significantly lower (higher) metric is lower (higher) in the table.
    againsts = re.findall(r"^- Against (.+?), significantly (.+)\.$", block, re.M)
    assert {reference for reference, _ in againsts} == {"Uncalibrated", "TemperatureScaling"}
    for reference, claims in againsts:
        for claim in claims.split("; "):
            direction, column, names = re.fullmatch(
                r"(lower|higher) (ECE|NLL): (.+)", claim
            ).groups()
            for name in [] if names == "none" else names.replace(" and ", ", ").split(", "):
                difference = table[name][column] - table[reference][column]
                assert difference < 1e-4 if direction == "lower" else difference > -1e-4, claim
    # Each pair's point differences are the table's, up to the printed digits.
    pairs = re.findall(
        rf"^- (.+) against (.+): ECE ({_PRINTED}) \[.*\], NLL ({_PRINTED}) \[.*\]; .+\.$",
        block,
        re.M,
    )
    assert {name for name, *_ in pairs} == {"CalAttn", "CalAttn + TS"}
    for name, reference, ece, nll in pairs:
        for column, printed in (("ECE", ece), ("NLL", nll)):
            difference = table[name][column] - table[reference][column]
            assert float(printed) == pytest.approx(difference, abs=1.5e-4)


def test_benchmark_headlines_are_the_numbers_of_their_results_files():
    """Each decimal number of a Benchmarks bullet stands in a results file the bullet links."""
    section = README.read_text().split("\n## Benchmarks\n", 1)[1].split("\n## ", 1)[0]
    # A bullet ends at the next bullet or at a blank line (the prose after the list).
    bullets = re.findall(r"^- \*\*.*?(?=^- \*\*|\n\n|\Z)", section, flags=re.MULTILINE | re.DOTALL)
    assert len(bullets) >= 6
    for bullet in bullets:
        linked = re.findall(r"\]\((benchmarks/results/[\w./-]+\.md)\)", bullet)
        assert linked, bullet
        sources = "".join((README.parent / path).read_text() for path in linked)
        # Each number stands whole there (2.8 is not found inside 12.84).
        for number in re.findall(r"(?<![\w.])\d+\.\d+(?![\d.])", bullet):
            pattern = rf"(?<![\d.]){re.escape(number)}(?![\d])"
            assert re.search(pattern, sources), (number, linked)
