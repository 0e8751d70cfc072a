"""The parameters every calibrator shares, defined once: signature and documentation.

:class:`~reliacal.calibrators.BaseCalibrator` takes the base parameters
(``input``, ``classes``, ``backbone``, ``batch_size``, ``device``,
``mixed_precision``, ``memory``, ``verbose``, ``label_key``) in its own ``__init__``. A
calibrator lists only its own parameters and passes the rest on::

    def __init__(self, objective="nll", *, tol=1e-6, **base_params):
        store_init_arguments(self, locals())
        super().__init__(**base_params)

``BaseCalibrator.__init_subclass__`` then gives that ``__init__`` the full
signature (:func:`spell_out_init_signature`), so that scikit-learn's
``get_params``, ``clone`` and ``help()`` see every parameter by name, and
replaces the lines ``{base_parameters}`` and ``{base_attributes}`` of the
class docstring by :data:`BASE_PARAMETERS_DOC` and
:data:`BASE_ATTRIBUTES_DOC` (:func:`with_base_parameters_doc`). A calibrator
whose base parameters differ (another default, a wider meaning) names them in
its own signature and docstring; those win over the inherited ones. The
fine-tuning estimators' base shares its training parameters the same way.
:func:`reliacal._init_arguments.store_init_arguments` stores a
constructor's arguments, so that no ``__init__`` repeats ``self.name = name``
for each of its parameters.
"""

from __future__ import annotations

import inspect

from .._docstrings import LABEL_KEY_DOC, fill_doc

__all__ = [
    "BASE_ATTRIBUTES_DOC",
    "BASE_PARAMETERS_DOC",
    "merged_init_signature",
    "spell_out_init_signature",
    "with_base_parameters_doc",
]

#: The line of a class docstring that stands for :data:`BASE_PARAMETERS_DOC`.
BASE_PARAMETERS_MARKER = "{base_parameters}"

#: The numpydoc paragraphs of the base parameters with their base defaults.
BASE_PARAMETERS_DOC = """\
input : {"logits", "probs"}, default="logits"
    ``"probs"``: ``X`` holds probabilities; their logs are scaled.
classes : array-like of shape (K,), default=None
    Label of each column of ``X`` (default ``0..K-1``).
backbone : model, BackboneAdapter or str, default=None
    Calibrate this frozen classifier; ``X`` then holds its raw inputs.
batch_size : int, default=256
    Backbone batch size.
device : str or torch.device, default="auto"
    Backbone device.
mixed_precision : bool, default=False
    Backbone autocast on CUDA.
memory : joblib.Memory, str or path, default=None
    Cache of the backbone outputs. The cache is read back with pickle,
    which can run code: give only a folder that you trust and that no one
    else can write to.
verbose : int, default=0
    Progress output of the backbone pass.
{label_key}"""

#: The numpydoc paragraphs of the fitted attributes every calibrator sets.
BASE_ATTRIBUTES_DOC = """\
classes_ : ndarray of shape (K,)
    Label of each column.
n_features_in_ : int
    Number of columns of ``X`` (logits mode; 1 for 1-D binary scores, where
    the calibrator accepts them).
backbone_ : BackboneAdapter
    The wrapped backbone (backbone mode)."""


def merged_init_signature(init, base_init) -> inspect.Signature | None:
    """The signature of ``init`` with its ``**kwargs`` spelled out as ``base_init``'s.

    ``None`` when ``init`` takes no ``**kwargs`` (it lists every parameter
    itself). The keyword-only parameters of ``base_init`` follow ``init``'s
    own, in ``base_init``'s order; one that ``init`` names keyword-only (to
    change its default) takes ``init``'s form in that place.

    >>> def base(self, *, input="logits", verbose=0): ...
    >>> def init(self, tol=1e-6, *, verbose=1, **base_params): ...
    >>> str(merged_init_signature(init, base))
    "(self, tol=1e-06, *, input='logits', verbose=1)"
    """
    own = list(inspect.signature(init).parameters.values())
    if not any(parameter.kind is parameter.VAR_KEYWORD for parameter in own):
        return None
    base = {
        parameter.name: parameter
        for parameter in inspect.signature(base_init).parameters.values()
        if parameter.kind is parameter.KEYWORD_ONLY
    }
    named = {parameter.name: parameter for parameter in own}
    overrides = {
        name: parameter
        for name, parameter in named.items()
        if name in base and parameter.kind is parameter.KEYWORD_ONLY
    }
    head = [
        parameter
        for parameter in own
        if parameter.kind is not parameter.VAR_KEYWORD and parameter.name not in overrides
    ]
    tail = [
        overrides.get(name, parameter)
        for name, parameter in base.items()
        if name not in named or name in overrides
    ]
    return inspect.Signature(head + tail)


def spell_out_init_signature(cls: type, base_init) -> None:
    """Give ``cls.__init__``, when it takes ``**kwargs``, its :func:`merged_init_signature`.

    Meant for a base class's ``__init_subclass__``; an ``__init__`` inherited
    rather than defined by ``cls`` already carries its signature.
    """
    init = cls.__dict__.get("__init__")
    signature = None if init is None else merged_init_signature(init, base_init)
    if signature is not None:
        init.__signature__ = signature


def with_base_parameters_doc(docstring: str | None) -> str | None:
    """``docstring`` with its ``{base_parameters}`` and ``{base_attributes}`` lines filled.

    The paragraphs take the indentation of the marker line; a docstring
    without the markers is returned unchanged.

    >>> doc = "Parameters\\n    ----------\\n    {base_parameters}\\n"
    >>> print(with_base_parameters_doc(doc).splitlines()[2])
        input : {"logits", "probs"}, default="logits"
    """
    fragments = {"base_parameters": BASE_PARAMETERS_DOC, "base_attributes": BASE_ATTRIBUTES_DOC}
    # The label_key paragraph is shared with the fine-tuning estimators.
    return fill_doc(fill_doc(docstring, fragments), {"label_key": LABEL_KEY_DOC})
