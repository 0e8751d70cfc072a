"""``SaveMixin``: the ``save`` method, and the hooks through which the codec reads an estimator.

An estimator describes its own saved form through the hooks below, so the
codec needs no knowledge of any estimator: every hook has a default that
fits a plain scikit-learn style estimator (parameters and fitted
attributes that are data).
"""

from __future__ import annotations

from typing import Any

from reliacal.persistence._registry import register_estimator

__all__ = ["SaveMixin"]


class SaveMixin:
    """Gives an estimator ``save(path)`` and the hooks through which it describes its saved form.

    Mixed into the calibrators, the fine-tuning estimators and
    :class:`~reliacal.CalibratedClassifier`, so the method and its
    documentation are written once. Every subclass defined in reliacal is
    loadable (:func:`reliacal.load` builds it; a user's subclass is not). The hooks, each with a
    default that suits a plain estimator:

    ``_machine_local_parameters``
        Names of parameters that point at resources of the machine that
        fitted the estimator (a cache folder, a checkpoint folder): they are
        never written, and a file that sets them is refused.
    ``_saved_reference(name, value) -> dict | None``
        For a parameter or fitted attribute that the file does not hold but
        the caller of ``load`` supplies (a backbone object): a JSON record
        of it. ``None`` (the default): the value is data, written as is.
    ``_loaded_reference(name, record, given) -> value``
        The value for such a record on load; ``given.get(name)`` is the
        object passed to ``load`` under that name (``None`` when absent).
        For a parameter it runs before ``__init__`` (which may require the
        parameter), so it must not read the estimator's attributes; for a
        fitted attribute the parameters are set.
    ``_network_config(network) -> dict``
        What, besides its state dict, rebuilds a torch network the estimator
        holds (sizes, not weights; the estimator's parameters are available
        too). The default refuses the network.
    ``_rebuild_network(config) -> nn.Module``
        The network, freshly built from that config; the codec then loads
        the saved state dict into it, strictly.
    ``_check_loaded_state() -> None``
        Raise ``ValueError`` when the fitted state read from a file is not
        one ``fit`` could give (non-finite or out-of-range values, wrong
        shapes). Overrides call ``super()._check_loaded_state()``.
    """

    _machine_local_parameters: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        register_estimator(cls)

    def save(self, path, *, overwrite: bool = False) -> None:
        """Write the estimator to ``path`` without pickle; read it back with :func:`reliacal.load`.

        See :func:`reliacal.persistence.save` for the format.

        Parameters
        ----------
        path : str or path
            A folder, or a zip archive when the name has an extension.
        overwrite : bool, default=False
            Replace a model saved at ``path`` before; without it an existing
            path is refused, so a data file of the same name stays intact.

        Examples
        --------
        >>> import os, tempfile
        >>> from reliacal.calibrators import TemperatureScaling
        >>> from reliacal.datasets import make_logits
        >>> logits, y = make_logits(100, 3, random_state=0)
        >>> folder = os.path.join(tempfile.mkdtemp(), "ts")
        >>> TemperatureScaling().fit(logits, y).save(folder)
        >>> sorted(os.listdir(folder))
        ['arrays.npz', 'manifest.json']
        """
        # Imported here: the persistence codec is needed only when saving.
        from reliacal.persistence._saving import save

        save(self, path, overwrite=overwrite)

    def _saved_reference(self, name: str, value: Any) -> dict | None:
        return None

    def _loaded_reference(self, name: str, record: Any, given: Any) -> Any:
        raise ValueError(
            f"the saved {type(self).__name__} refers to an object for {name!r} that it "
            "cannot restore"
        )

    def _network_config(self, network: Any) -> dict:
        raise ValueError(
            f"{type(self).__name__} holds a {type(network).__name__} network, which reliacal "
            "cannot rebuild on load; save its state_dict yourself"
        )

    def _rebuild_network(self, config: dict) -> Any:
        raise ValueError(
            f"the saved {type(self).__name__} holds a network, which it cannot rebuild"
        )

    def _check_loaded_state(self) -> None:
        # Cooperative: the mixins after this one in the MRO may check their own state.
        parent = getattr(super(), "_check_loaded_state", None)
        if parent is not None:
            parent()
