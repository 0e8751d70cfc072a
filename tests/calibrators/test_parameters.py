"""The base parameters are defined once in BaseCalibrator and shown by every calibrator."""

import inspect
import re

import pytest
from sklearn.base import BaseEstimator, clone

from reliacal._init_arguments import store_init_arguments
from reliacal.calibrators import (
    AdaptiveTS,
    BaseCalibrator,
    MatrixScaling,
    TemperatureScaling,
    VectorScaling,
)

BASE = [
    "input",
    "classes",
    "backbone",
    "batch_size",
    "device",
    "mixed_precision",
    "memory",
    "verbose",
    "label_key",
]
CALIBRATORS = {
    TemperatureScaling: ["objective", "tol", "max_iter"],
    VectorScaling: ["reg_bias", "max_iter", "tol"],
    MatrixScaling: ["reg_off_diagonal", "reg_bias", "max_iter", "tol", "max_parameters"],
}


@pytest.mark.parametrize("calibrator", list(CALIBRATORS), ids=lambda cls: cls.__name__)
def test_signature_lists_own_then_base_parameters(calibrator):
    names = list(inspect.signature(calibrator).parameters)
    assert names == CALIBRATORS[calibrator] + BASE
    assert sorted(calibrator().get_params()) == sorted(CALIBRATORS[calibrator] + BASE)


@pytest.mark.parametrize("calibrator", list(CALIBRATORS), ids=lambda cls: cls.__name__)
def test_base_parameters_are_stored_and_cloned(calibrator):
    estimator = calibrator(input="probs", batch_size=7, device="cpu", verbose=2)
    copy = clone(estimator)
    assert copy.get_params() == estimator.get_params()
    assert (copy.input, copy.batch_size, copy.device, copy.verbose) == ("probs", 7, "cpu", 2)
    assert copy.classes is None and copy.memory is None


def test_unknown_parameter_is_refused():
    with pytest.raises(TypeError, match="batchsize"):
        TemperatureScaling(batchsize=8)


def test_a_calibrator_may_change_a_base_default():
    signature = inspect.signature(AdaptiveTS)
    assert signature.parameters["batch_size"].default == 128
    assert list(signature.parameters)[-len(BASE) :] == BASE
    assert AdaptiveTS().batch_size == 128
    assert inspect.signature(TemperatureScaling).parameters["batch_size"].default == 256


@pytest.mark.parametrize(
    "calibrator", [*CALIBRATORS, AdaptiveTS], ids=lambda cls: getattr(cls, "__name__", "")
)
def test_docstring_documents_every_parameter(calibrator):
    documented = re.findall(r"^    (\w+) : ", calibrator.__doc__, flags=re.MULTILINE)
    assert "{base_parameters}" not in calibrator.__doc__
    assert "{base_attributes}" not in calibrator.__doc__
    assert {"classes_", "n_features_in_", "backbone_"} <= set(documented)
    for name in inspect.signature(calibrator).parameters:
        assert name in documented, name


def test_explicit_signature_is_left_alone():
    class Explicit(BaseCalibrator):
        def __init__(self, scale=1.0, *, input="logits", verbose=0):
            self.scale = scale
            self.input = input
            self.verbose = verbose

    assert list(inspect.signature(Explicit).parameters) == ["scale", "input", "verbose"]


def test_store_init_arguments_stores_exactly_the_named_parameters():
    class Base(BaseEstimator):
        def __init__(self, *, shared=1):
            store_init_arguments(self, locals())

    class Child(Base):
        def __init__(self, own="a", *, other=None, shared=1, **rest):
            unrelated = "not a parameter"  # noqa: F841  (a local is never stored)
            store_init_arguments(self, locals())
            super().__init__(shared=shared, **rest)

    child = Child("b", other=[1], shared=5)
    # No self, no **rest dict, no __class__ cell, no plain local.
    assert vars(child) == {"own": "b", "other": [1], "shared": 5}
    assert child.get_params() == {"own": "b", "other": [1], "shared": 5}
    assert vars(clone(child)) == vars(child)


def test_a_subclass_may_fix_a_parameter_of_its_base():
    # The base stores the arguments it was called with, whatever the subclass shows.
    class FixedBias(VectorScaling):
        def __init__(self, *, max_iter=50, **base_params):
            super().__init__(reg_bias=0.5, max_iter=max_iter, **base_params)

    model = FixedBias(input="probs")
    assert (model.reg_bias, model.max_iter, model.tol, model.input) == (0.5, 50, 1e-6, "probs")
    assert "reg_bias" not in model.get_params()


def _public_estimators():
    import reliacal
    import reliacal.calibrators
    import reliacal.finetune

    names = [
        (module, name)
        for module in (reliacal, reliacal.calibrators, reliacal.finetune)
        for name in module.__all__
    ]
    found = dict.fromkeys(getattr(module, name) for module, name in names)  # once each
    return [cls for cls in found if isinstance(cls, type) and issubclass(cls, BaseEstimator)]


@pytest.mark.parametrize("estimator", _public_estimators(), ids=lambda cls: cls.__name__)
def test_init_sets_exactly_the_parameters_as_given(estimator):
    # A distinct sentinel per parameter shows each lands under its own name.
    values = {name: object() for name in inspect.signature(estimator).parameters}
    instance = estimator(**values)
    assert vars(instance).keys() == values.keys()
    for name, value in values.items():
        assert getattr(instance, name) is value, name
