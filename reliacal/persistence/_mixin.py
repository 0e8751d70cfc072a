"""The ``save`` method of every estimator that :func:`reliacal.load` reads back."""

from __future__ import annotations

__all__ = ["SaveMixin"]


class SaveMixin:
    """Gives an estimator ``save(path)``, a call of :func:`reliacal.persistence.save`.

    Mixed into the calibrators, the fine-tuning estimators and
    :class:`~reliacal.CalibratedClassifier`, so the method and its
    documentation are written once.
    """

    def save(self, path) -> None:
        """Write the estimator to ``path`` without pickle; read it back with :func:`reliacal.load`.

        See :func:`reliacal.persistence.save` for the format.

        Parameters
        ----------
        path : str or path
            A folder, or a zip archive when the name has an extension.

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

        save(self, path)
