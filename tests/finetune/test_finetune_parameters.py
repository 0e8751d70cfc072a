"""The training parameters of the fine-tuning estimators, shared through their base."""

import inspect

import pytest
from sklearn.base import clone

from reliacal.finetune import CalAttnFinetuner, DiffusionReconfigurer

SHARED = {
    "batch_size": 64,
    "validation_fraction": 0.1,
    "n_iter_no_change": None,
    "mixed_precision": "auto",
    "checkpoint_dir": None,
    "device": "auto",
    "random_state": None,
    "verbose": 1,
    "classes": None,
    "n_threads": None,
}
# Each method's own recipe, as its docstring documents it.
RECIPES = {
    CalAttnFinetuner: {
        "max_epochs": 2,
        "learning_rate": 1e-4,
        "warmup_epochs": 0.5,
        "selection_metric": "nll",
    },
    DiffusionReconfigurer: {
        "max_epochs": 30,
        "learning_rate": 1e-3,
        "warmup_epochs": 2.0,
        "selection_metric": "nll",
    },
}


@pytest.mark.parametrize("estimator", list(RECIPES), ids=lambda cls: cls.__name__)
def test_signature_shows_shared_and_own_training_parameters(estimator):
    parameters = inspect.signature(estimator).parameters
    for name, default in {**SHARED, **RECIPES[estimator]}.items():
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert parameters[name].default == default, name
    assert not any(p.kind is p.VAR_KEYWORD for p in parameters.values())


@pytest.mark.parametrize("estimator", list(RECIPES), ids=lambda cls: cls.__name__)
def test_shared_parameters_are_stored_and_cloned(estimator):
    model = estimator("vit", batch_size=8, device="cpu", classes=["a", "b"], max_epochs=3)
    copy = clone(model)
    assert copy.get_params() == model.get_params()
    assert (copy.batch_size, copy.device, copy.classes, copy.max_epochs) == (
        8,
        "cpu",
        ["a", "b"],
        3,
    )
    with pytest.raises(TypeError, match="batchsize"):
        estimator("vit", batchsize=8)
