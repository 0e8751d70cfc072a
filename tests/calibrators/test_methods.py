"""The table of methods, and every part that reads it: one list of methods, not six."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import reliacal
import reliacal.calibrators
from reliacal.calibrators import (
    CalibrationMethod,
    Candidate,
    calibration_methods,
    describe_methods,
    make_calibrator,
)

METHODS = calibration_methods()


def test_the_names_of_the_command_and_the_wrapper_are_the_released_ones():
    assert [name for name, method in METHODS.items() if method.command] == [
        "temperature",
        "vector",
        "matrix",
        "svs",
        "sms",
        "platt",
        "isotonic",
        "quadratic",
        "beta",
        "histogram",
        "cir",
        "spline",
        "venn-abers",
        "ets",
        "adaptive",
        "auto",
    ]
    assert set(METHODS) - {name for name, method in METHODS.items() if method.command} == {
        "sigmoid"
    }


@pytest.mark.parametrize("name", list(METHODS))
def test_each_name_builds_its_calibrator_with_its_parameters(name):
    method = METHODS[name]
    assert isinstance(method, CalibrationMethod) and method.name == name
    calibrator = make_calibrator(name, verbose=0)
    assert type(calibrator).__name__ == method.calibrator
    assert type(calibrator).__module__ == f"reliacal.calibrators.{method.module}"
    params = calibrator.get_params(deep=False)
    assert {key: params[key] for key in method.parameters} == dict(method.parameters)
    # The lazy tables of both packages name the class.
    assert getattr(reliacal.calibrators, method.calibrator) is type(calibrator)
    assert getattr(reliacal, method.calibrator) is type(calibrator)
    assert method.calibrator in reliacal.__all__
    # A seeded method takes random_state; one that reads features takes n_logits.
    assert ("random_state" in params) == method.seeded
    if method.reads_features:
        assert "n_logits" in params


def test_parameters_given_replace_the_names_own():
    assert make_calibrator("sigmoid").target_smoothing is True
    assert make_calibrator("sigmoid", target_smoothing=False).target_smoothing is False
    assert make_calibrator("adaptive").random_state == 0
    assert make_calibrator("adaptive", random_state=7).random_state == 7


def test_an_unknown_name_is_refused_with_the_list():
    with pytest.raises(ValueError, match="unknown calibration method 'magic'.*temperature"):
        make_calibrator("magic")


def test_the_table_is_read_only():
    with pytest.raises(TypeError):
        METHODS["new"] = METHODS["temperature"]
    with pytest.raises(TypeError):
        METHODS["sigmoid"].parameters["target_smoothing"] = False


def test_the_command_offers_and_describes_the_table_s_methods():
    from reliacal.cli._commands import _build_parser

    parser = _build_parser()
    calibrate = parser._subparsers._group_actions[0].choices["calibrate"]
    (option,) = [action for action in calibrate._actions if "--method" in action.option_strings]
    assert list(option.choices) == [name for name, method in METHODS.items() if method.command]
    for name in option.choices:
        assert f"{name} ({METHODS[name].description})" in option.help
    assert describe_methods(["temperature"]) in option.help


def test_the_wrapper_accepts_every_name():
    from reliacal import CalibratedClassifier

    (options,) = [
        constraint
        for constraint in CalibratedClassifier._parameter_constraints["method"]
        if hasattr(constraint, "options")
    ]
    assert options.options == set(METHODS)


def test_the_demo_s_post_hoc_rows_are_the_table_s():
    pytest.importorskip("torch")
    from reliacal.demo import METHODS as DEMO_ROWS

    names = [row.name for row in DEMO_ROWS]
    table_rows = [method.demo for method in METHODS.values() if method.demo]
    assert table_rows == [
        "TemperatureScaling",
        "VectorScaling",
        "MatrixScaling (ODIR)",
        "StructuredVectorScaling",
        "StructuredMatrixScaling",
        "AdaptiveTS",
    ]
    assert names[1 : 1 + len(table_rows)] == table_rows


@pytest.mark.parametrize(
    ("n_samples", "n_classes"), [(100, 2), (100, 3), (100, 21), (5000, 3), (6000, 30)]
)
def test_the_default_candidates_are_the_table_s_that_apply(n_samples, n_classes):
    from reliacal.calibrators.auto import _default_candidates

    candidates = _default_candidates(n_samples, n_classes, 7)
    expected = [
        name
        for name, method in METHODS.items()
        if method.candidate is not None and method.candidate.applies(n_samples, n_classes)
    ]
    assert list(candidates) == expected
    for name, candidate in candidates.items():
        params = candidate.get_params(deep=False)
        for key, value in METHODS[name].candidate.parameters.items():
            assert params[key] == value
        if METHODS[name].seeded:
            assert params["random_state"] == 7
    # The conditions of the released defaults: matrix up to 20 classes, SVS and SMS from 3,
    # adaptive from 5000 rows.
    assert ("matrix" in candidates) == (n_classes <= 20)
    assert ("svs" in candidates) == ("sms" in candidates) == (n_classes >= 3)
    assert ("adaptive" in candidates) == (n_samples >= 5000)


def test_a_candidate_s_conditions():
    assert Candidate().applies(1, 1000)
    assert not Candidate(max_classes=20).applies(100, 21)
    assert Candidate(min_rows=5000).applies(5000, 3)
    assert not Candidate(min_rows=5000).applies(4999, 3)
    assert Candidate(min_classes=3).applies(100, 3)
    assert not Candidate(min_classes=3).applies(100, 2)


def test_reading_the_table_imports_no_calibrator_and_a_numpy_one_no_torch(torch_modules_after):
    loaded = torch_modules_after(
        """
        import sys
        from reliacal.calibrators import calibration_methods, make_calibrator

        assert "numpy" not in sys.modules, "reading the table imported numpy"
        names = list(calibration_methods())
        assert not any(m.startswith("reliacal.calibrators.") and m[21:] != "_methods"
                       for m in sys.modules), sorted(sys.modules)
        import numpy as np
        for name in ("temperature", "vector", "matrix", "platt", "sigmoid", "isotonic",
                     "beta", "histogram", "ets", "auto"):
            make_calibrator(name)
        """
    )
    assert loaded == []


def test_the_package_imports_the_table_only():
    # ``import reliacal`` reads the table for its lazy names and loads no calibrator.
    code = (
        "import sys, reliacal; "
        "print(sorted(m for m in sys.modules if m.startswith('reliacal.calibrators')))"
    )
    root = str(Path(__file__).resolve().parents[2])  # this checkout, not an installed copy
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": root},
    )
    assert result.stdout.strip() == "['reliacal.calibrators', 'reliacal.calibrators._methods']"


@pytest.mark.parametrize("method", ["vector", "matrix"])
def test_the_command_s_search_on_too_few_rows_says_what_it_needs(method, tmp_path, capsys):
    import numpy as np

    from reliacal.cli import main

    rng = np.random.default_rng(0)
    for name in ("cal", "eval"):
        np.savez(tmp_path / f"{name}.npz", logits=rng.normal(size=(4, 3)), labels=[0, 1, 2, 0])
    status = main(
        ["calibrate", str(tmp_path / "cal.npz"), str(tmp_path / "eval.npz"), "--method", method]
    )
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert status == 1
    assert errors == [errors[-1]] and "needs at least 3 samples of some class" in errors[-1]
    assert "--reg-bias" in errors[-1] and "n_splits" not in errors[-1]
