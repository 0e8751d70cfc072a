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

from reliacal._docstrings import LABEL_KEY_DOC, N_THREADS_DOC, fill_doc

__all__ = [
    "BASE_ATTRIBUTES_DOC",
    "BASE_PARAMETERS_DOC",
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


def with_base_parameters_doc(docstring: str | None) -> str | None:
    """``docstring`` with its ``{base_parameters}`` and ``{base_attributes}`` lines filled.

    The paragraphs take the indentation of the marker line; a docstring
    without the markers is returned unchanged.

    >>> doc = "Parameters\\n    ----------\\n    {base_parameters}\\n"
    >>> print(with_base_parameters_doc(doc).splitlines()[2])
        input : {"logits", "probs"}, default="logits"
    """
    fragments = {"base_parameters": BASE_PARAMETERS_DOC, "base_attributes": BASE_ATTRIBUTES_DOC}
    # The label_key and n_threads paragraphs are shared with the fine-tuning estimators.
    shared = {"label_key": LABEL_KEY_DOC, "n_threads": N_THREADS_DOC}
    return fill_doc(fill_doc(docstring, fragments), shared)
