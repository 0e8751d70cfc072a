"""Calibration Attention (CalAttn): a per-sample scale learned end to end with the backbone.

Liang et al., "Instance-wise Temperature Scaling for Vision Transformers" /
"Learning Reliability-Aware Representations", arXiv:2508.08547 (2025, 2026).
A small head reads the transformer's final [CLS] token and predicts a positive
scale ``s(x)``; the classifier's logits are divided by it, and the whole
network is trained under a proper scoring rule, so that calibration gradients
reach the representation as well as the confidence.
"""

from __future__ import annotations

import copy
import numbers
from typing import Any

import numpy as np
import torch
from sklearn.base import _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted
from torch.utils.data import Subset

from reliacal._data import as_dataset
from reliacal._device import resolve_device
from reliacal._init_arguments import store_init_arguments
from reliacal.backbones import as_backbone
from reliacal.calibrators import TemperatureScaling
from reliacal.finetune._estimator import (
    FinetuneEstimator,
    check_finite_inputs,
    count_parameters,
)
from reliacal.finetune.calattn_network import (
    TOKENS,
    CalAttnLoss,
    CalAttnNetwork,
    CalAttnOutput,
    calibrated_logits,
    float64_outputs,
    resolve_token,
)
from reliacal.finetune.losses import BASE_LOSSES, get_base_loss
from reliacal.training import (
    TRAINING_CONSTRAINTS,
    TrainingConfig,
    fingerprint,
    fit_module,
    seeded_torch,
)

__all__ = ["CalAttnFinetuner"]

# The end of the training loop's warning when no epoch rose above chance.
_CHANCE_ADVICE = (
    "CalAttnFinetuner: train longer (max_epochs), change learning_rate, head_learning_rate "
    "or warmup_epochs, and check that the labels match the inputs and the backbone's "
    "classifier."
)


class CalAttnFinetuner(FinetuneEstimator):
    r"""Calibration Attention: fine-tune a transformer with a learned per-sample scale.

    A head :math:`s(h) = \mathrm{softplus}(W_2\,\mathrm{GELU}(W_1 h + b_1) + b_2)
    + 10^{-6}` reads the backbone's final [CLS] token :math:`h` (Liang et al.,
    arXiv:2508.08547) and the calibrated logits are :math:`z(x) / s(x)`. Both
    come from one forward pass of the backbone, nothing is detached, and the
    network (backbone and head) minimises

    .. math::

        L = \ell_{\text{base}}(z / s, y)
            + \lambda_{\text{Brier}} \cdot \frac{1}{B}\sum_i \sum_c
              \big(\mathrm{softmax}(z_i / s_i)_c - \mathbb{1}[y_i = c]\big)^2,

    with :func:`reliacal.training.fit_module` (AdamW, warm-up then cosine
    decay; the paper's SGD recipe with ``optimizer="sgd"``). The checkpoint
    with the lowest NLL on a held-out validation split (never augmented) is
    kept, but never one at chance accuracy when another epoch is above chance
    (the paper keeps the lowest ECE, which can keep a network that always
    answers the majority class; ``selection_metric="ece"`` restores it).
    Optionally a temperature is then fitted on that split
    (``post_hoc="temperature"``), since the paper reports results before and
    after temperature scaling.

    The head adds ``hidden * (D + 2) + 1`` parameters (``128 D + 257`` at the
    default width; 98,561 for ViT-B, D = 768), ``n_extra_parameters_``.

    How it compares with plain fine-tuning, on a pre-trained MiniLM and on a
    small ViT, is in ``benchmarks/README.md`` (the text and digits rows).

    Parameters
    ----------
    backbone : nn.Module, BackboneAdapter or str
        A classifier that :func:`reliacal.backbones.as_backbone` accepts (timm
        ViT / DeiT / Swin instance or name, Hugging Face
        ``ViTForImageClassification``, ...). ``fit`` trains a deep copy; the
        object passed here is never modified.
    token : {"cls", "patch_mean", "concat", "pooled"}, default="cls"
        What the head reads from the final tokens: the [CLS] token, the mean of
        the patch tokens (class and distillation tokens excluded), their
        concatenation (width 2D), or the pooled pre-logits features. Backbones
        without a class token (Swin) have no [CLS] to read: ``"cls"`` then
        reads the pooled features (``token_`` records the choice) and
        ``"concat"`` is an error.
    hidden : int, default=128
        Width of the head's hidden layer; 128 is the paper's.
    base_loss : {"ce", "label_smoothing", "brier", "focal", "flsd53", "dual_focal", "mmce"} or callable, default="ce"
        Loss on the calibrated logits (see :func:`reliacal.finetune.losses.get_base_loss`);
        a callable maps ``(logits (B, K), target (B,))`` to a scalar tensor.
    lambda_brier : float, default=0.1
        Weight of the added Brier term; 0 removes it. 0.1 is the paper's, and
        tuning found no better
        (``benchmarks/results/decisions.md#calattn-brier-weight``).
    label_smoothing : float, default=0.0
        Smoothing of ``"ce"`` / ``"label_smoothing"`` (the paper uses 0.1 on
        CIFAR-100); must be 0 for the other losses.
    focal_gamma : float, default=3.0
        Gamma of ``"focal"`` and ``"dual_focal"``.
    freeze_backbone : bool, default=False
        Train only the head (a post-hoc method on a frozen model). The frozen
        backbone runs in eval mode and without a gradient graph.
    calibration_head : bool or "global", default=True
        ``False`` trains the same backbone with the same loss, trainer and
        schedule but with the scale fixed to 1: plain fine-tuning, the baseline
        CalAttn is compared with. ``"global"`` learns one scale shared by all
        samples (starting at 1, trained end to end like the head): the control
        that tells what the per-sample head adds beyond a learned logit scale.
    initial_scale : float or None, default=None
        Where the scale starts. The per-sample head's output bias is set so its
        scales start centred on this value; the global scale starts exactly at
        it. ``None``: PyTorch's default initialisation of the head (scales near
        ``ln 2``, about 0.69, so logits start enlarged by about 1.44) and 1 for
        ``"global"``. Giving the control the head's start,
        ``initial_scale=math.log(2)``, separates what the per-sample head adds
        from where it starts. ``None`` because starting the head at 1 was no
        better (``benchmarks/results/decisions.md#calattn-initial-scale``).
    post_hoc : {None, "temperature"}, default=None
        Fit :class:`reliacal.calibrators.TemperatureScaling` on the held-out
        validation predictions after training (needs ``validation_fraction > 0``).
    head_learning_rate : float or None, default=None
        Peak learning rate of the scale head (the parameters outside the
        backbone), on the same warm-up and schedule; ``None``: the backbone's
        ``learning_rate``. The head starts from a random initialisation while
        the backbone is pre-trained, so it may want a larger rate: pass
        ``10 * learning_rate`` for a pre-trained text backbone. One rate by
        default, since the larger one did not help on images
        (``benchmarks/results/decisions.md#calattn-head-learning-rate``).
    selection_metric : {"nll", "ece", "accuracy", "loss"}, default="nll"
        The validation score that picks the kept epoch (lowest NLL, ECE or
        loss, highest accuracy). NLL, not the paper's ECE, because the lowest
        ECE tends to keep an earlier, less accurate epoch
        (``benchmarks/results/decisions.md#calattn-selection-metric``).
    max_epochs, batch_size, optimizer, schedule, milestones, gamma, learning_rate, weight_decay, warmup_epochs, grad_clip_norm, validation_fraction, n_iter_no_change, mixed_precision, checkpoint_dir, device
        Training settings, as in :class:`reliacal.training.TrainingConfig`
        (``optimizer`` is ``"adamw"``, ``"adam"`` or ``"sgd"``: SGD with
        Nesterov momentum 0.9; ``schedule`` is ``"cosine"`` after the
        warm-up, ``"step"``, which multiplies the rate by ``gamma`` from each
        epoch in ``milestones`` on, or ``"constant"``). ``checkpoint_dir`` makes
        an interrupted ``fit`` resume where it stopped. The defaults are a short
        fine-tuning of a pre-trained backbone: ``optimizer="adamw"`` at
        ``learning_rate=1e-4``
        (``benchmarks/results/decisions.md#calattn-optimiser-and-learning-rate``);
        ``max_epochs=2`` with ``warmup_epochs=0.5``
        (``benchmarks/results/decisions.md#calattn-epochs-and-warm-up``);
        ``weight_decay`` and ``batch_size`` untuned. A small ViT fine-tuned on a few hundred
        images wants a longer schedule (the demo passes 30 epochs, a 1-epoch
        warm-up). The paper's recipe is ``optimizer="sgd", learning_rate=0.1,
        weight_decay=5e-4, schedule="step", milestones=(150, 250), gamma=0.1,
        max_epochs=350, grad_clip_norm=5.0, selection_metric="ece"``
        (``benchmarks/paper_scale.py`` runs it).
    verbose : int or bool, default=1
        Progress bars on stderr, as PyTorch Lightning shows them: 1 over the
        epochs and the batches of fit and predict, 2 also a line of scores
        per epoch, 0 silent. On by default, since a fine-tuning takes minutes.
    random_state : int, RandomState or None, default=None
        Seeds the head's initialisation, the validation split, the shuffling
        and dropout; an int makes a CPU fit reproducible.
    train_transform : callable or None, default=None
        Applied to each training batch ``x`` (on the device), e.g. data
        augmentation; never to validation data.
    classes : array-like of shape (K,) or None, default=None
        The label of each logit column, in column order. ``None``: the labels
        are the column indices ``0..K-1``, and any other label (a string, an
        integer out of range) is refused: name the columns with ``classes``.
    {n_threads}
    {label_key}

    Attributes
    ----------
    classes_ : ndarray of shape (K,)
        The label of each column of ``predict_proba``.
    network_ : torch.nn.Module
        The trained network (backbone adapter ``network_.backbone`` and head
        ``network_.scale_head``), on the CPU.
    token_ : str
        The token mode used (``"pooled"`` where ``"cls"`` fell back).
    n_extra_parameters_ : int
        Parameters of the scale head (0 with ``calibration_head=False``, 1
        with ``"global"``).
    n_backbone_parameters_ : int
        Parameters of the backbone.
    parameter_overhead_ : float
        ``n_extra_parameters_ / n_backbone_parameters_``.
    history_ : list of dict
        Per-epoch training log (``train_loss``, ``val_ece``, ``val_nll``, ...).
    best_epoch_ : int
        The epoch whose weights were kept.
    post_hoc_ : TemperatureScaling or None
        The post-hoc calibrator fitted after training.

    Notes
    -----
    The fitted network lives on the CPU (pickles load on machines without a
    GPU); prediction moves it to ``device`` for the call and runs in float32.
    A checkpointed fit resumes only with the same data and settings.

    References
    ----------
    Liang et al., "Learning Reliability-Aware Representations" (v1:
    "Instance-wise Temperature Scaling for Vision Transformers"),
    arXiv:2508.08547, 2025.

    Examples
    --------
    >>> import numpy as np
    >>> from timm.models.vision_transformer import VisionTransformer
    >>> rng = np.random.default_rng(0)
    >>> X = rng.random((32, 1, 8, 8), dtype=np.float32)
    >>> y = np.arange(32) % 2
    >>> vit = VisionTransformer(img_size=8, patch_size=4, in_chans=1, num_classes=2,
    ...                         embed_dim=16, depth=1, num_heads=2)
    >>> model = CalAttnFinetuner(vit, max_epochs=2, batch_size=16, device="cpu",
    ...                          validation_fraction=0.25, random_state=0).fit(X, y)
    >>> model.predict_proba(X[:3]).sum(axis=1)
    array([1., 1., 1.])
    >>> bool((model.scale(X[:3]) > 0).all()), model.n_extra_parameters_ == 128 * 16 + 257
    (True, True)
    """

    def __init__(
        self,
        backbone: Any,
        *,
        token: str = "cls",
        hidden: int = 128,
        base_loss: Any = "ce",
        lambda_brier: float = 0.1,
        label_smoothing: float = 0.0,
        focal_gamma: float = 3.0,
        freeze_backbone: bool = False,
        calibration_head: bool | str = True,
        initial_scale: float | None = None,
        post_hoc: str | None = None,
        max_epochs: int = 2,
        optimizer: str = "adamw",
        schedule: str = "cosine",
        milestones: Any = (),
        gamma: float = 0.1,
        learning_rate: float = 1e-4,
        head_learning_rate: float | None = None,
        weight_decay: float = 0.05,
        warmup_epochs: float = 0.5,
        grad_clip_norm: float | None = 1.0,
        selection_metric: str = "nll",
        train_transform: Any = None,
        **training_params: Any,
    ) -> None:
        store_init_arguments(self, locals())
        super().__init__(**training_params)

    _split_stream = "stratified"
    # An int random_state seeds the NumPy generator that draws the fit's seed.
    _seed_from_int = True

    _parameter_constraints: dict = {
        **FinetuneEstimator._parameter_constraints,
        "token": [StrOptions(set(TOKENS))],
        "hidden": [Interval(numbers.Integral, 1, None, closed="left")],
        "base_loss": [StrOptions(set(BASE_LOSSES)), callable],
        "lambda_brier": [Interval(numbers.Real, 0, None, closed="left")],
        "label_smoothing": [Interval(numbers.Real, 0, 1, closed="left")],
        "focal_gamma": [Interval(numbers.Real, 0, None, closed="left")],
        "freeze_backbone": ["boolean"],
        "calibration_head": ["boolean", StrOptions({"global"})],
        "initial_scale": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "post_hoc": [StrOptions({"temperature"}), None],
        "optimizer": TRAINING_CONSTRAINTS["optimizer"],
        "schedule": TRAINING_CONSTRAINTS["schedule"],
        "milestones": TRAINING_CONSTRAINTS["milestones"],
        "gamma": TRAINING_CONSTRAINTS["gamma"],
        "head_learning_rate": TRAINING_CONSTRAINTS["head_learning_rate"],
        "grad_clip_norm": TRAINING_CONSTRAINTS["grad_clip_norm"],
        "train_transform": [callable, None],
    }

    # Fitting -----------------------------------------------------------------------------

    def _check_combinations(self) -> None:
        """The settings that are valid alone but not together."""
        if self.post_hoc is not None and not self.validation_fraction:
            raise ValueError(
                "post_hoc='temperature' fits on the held-out validation split: "
                "set validation_fraction > 0"
            )
        if self.freeze_backbone and not self.calibration_head:
            raise ValueError(
                "freeze_backbone=True with calibration_head=False leaves nothing to train"
            )
        if self.initial_scale is not None and not self.calibration_head:
            raise ValueError(
                "initial_scale sets the start of a learned scale, but calibration_head=False "
                "fixes the scale to 1"
            )

    def _build_network(self, seed: int) -> CalAttnNetwork:
        with seeded_torch(seed):
            adapter = as_backbone(self.backbone)
            # fit trains a copy: the caller's model stays as it was, and refits start alike.
            adapter = copy.deepcopy(adapter)
            token = resolve_token(self.token, adapter)
            return CalAttnNetwork(
                adapter,
                token=token,
                hidden=self.hidden,
                calibration_head=self.calibration_head,
                freeze_backbone=self.freeze_backbone,
                initial_scale=self.initial_scale,
            )

    def _network_config(self, network: Any) -> dict:
        if not isinstance(network, CalAttnNetwork):
            return super()._network_config(network)
        return {}  # everything else comes from the parameters and the given backbone

    def _rebuild_network(self, config: dict) -> CalAttnNetwork:
        if config:
            raise ValueError(f"the saved CalAttn network has an unknown configuration {config}")
        # The estimator's own builder, around (a copy of) the backbone given to load.
        return self._build_network(0)

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: Any, y: Any = None) -> CalAttnFinetuner:
        """Fine-tune the backbone and the scale head on ``(X, y)``.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n, ...), Dataset or DataLoader
            Raw inputs (images or token ids) with ``y``, or a torch ``Dataset``
            / ``DataLoader`` yielding ``(x, y)`` with class-index labels.
            A DataLoader's dataset and ``collate_fn`` are trained on in
            shuffled batches of ``batch_size`` (a warning says when the
            loader's own batch size differs); a sampler that selects or
            weights rows is refused.
        y : array-like of shape (n,), optional
            Labels of array inputs; None for a Dataset or DataLoader.

        Returns
        -------
        self : CalAttnFinetuner

        Raises
        ------
        ValueError
            Invalid settings or inputs.
        reliacal.training.TrainingDivergedError
            A NaN or infinite loss (a ``ValueError``). The estimator stays
            unfitted; the error's ``module`` attribute holds the network with
            the last good weights.
        """
        self._check_combinations()
        base = get_base_loss(
            self.base_loss, label_smoothing=self.label_smoothing, focal_gamma=self.focal_gamma
        )
        seed = self._fit_seed()
        config = self._training_config(
            optimizer=self.optimizer,
            schedule=self.schedule,
            milestones=tuple(self.milestones),
            gamma=self.gamma,
            head_learning_rate=self.head_learning_rate,
            grad_clip_norm=self.grad_clip_norm,
            # The split is made here (the post-hoc temperature needs it), not by the trainer.
            validation_fraction=0.0,
            random_state=(
                self.random_state if isinstance(self.random_state, numbers.Integral) else seed
            ),
        )
        dataset, labels = self._fit_inputs(X, y)
        self._reset_fitted()
        network = self._build_network(seed)
        with self._divergence_policy(network):
            self._fit(X, dataset, labels, network, base, seed, config)
        return self

    def _fit(self, X, dataset, labels, network, base, seed: int, config: TrainingConfig) -> None:
        n_classes = network.backbone.num_classes
        if n_classes is None:
            raise ValueError("the backbone does not tell its number of classes (num_classes)")
        if labels is None:
            # A Dataset's labels are column indices already (CalAttnLoss checks each batch,
            # sparing a pass over the data): only `classes` to check.
            self.classes_ = self._classes_for(n_classes)
            y_index = None
        else:
            y_index = self._fit_labels(labels, n_columns=n_classes)
            dataset, _ = as_dataset(X, y_index)

        train, validation = dataset, None
        if self.validation_fraction:
            train_index, validation_index = self._split(len(dataset), seed, y_index)
            train = Subset(dataset, train_index.tolist())
            validation = Subset(dataset, validation_index.tolist())

        threads = self._threads(network, int(self.batch_size))
        with self._explaining_input_errors(network.backbone, dataset), threads:
            result = fit_module(
                network,
                CalAttnLoss(base, float(self.lambda_brier), n_classes),
                train,
                config=config,
                validation_data=validation,
                logits_fn=calibrated_logits,
                train_transform=self.train_transform,
                chance_advice=_CHANCE_ADVICE,
                # The seeded network around the given backbone: its weights, reproduced by
                # a resumed fit, tell another backbone (or head) apart.
                fingerprint=None if self.checkpoint_dir is None else fingerprint(network),
            )
        self.network_ = network
        self.token_ = network.token
        self.history_ = result.history
        self.best_epoch_ = result.best_epoch
        self.n_extra_parameters_ = (
            0 if network.scale_head is None else count_parameters(network.scale_head)
        )
        self.n_backbone_parameters_ = count_parameters(network.backbone)
        self.parameter_overhead_ = self.n_extra_parameters_ / self.n_backbone_parameters_
        self.post_hoc_ = None
        if self.post_hoc == "temperature":
            held_out, held_out_y = self._run(validation, labels=True)
            self.post_hoc_ = TemperatureScaling().fit(held_out.calibrated_logits, held_out_y)

    # Prediction --------------------------------------------------------------------------

    def _run(self, data: Any, *, labels: bool = False) -> tuple[CalAttnOutput, np.ndarray | None]:
        """Run the trained network over ``data`` once, in eval mode, without gradients.

        Returns the calibrated logits, scales and backbone logits (float64
        numpy arrays) and, with ``labels`` (for scoring), the labels the data
        yields, in any order the data comes in.
        """
        check_finite_inputs(data)
        outputs, y = self._run_batches(
            self.network_,
            data,
            float64_outputs,
            resolve_device(self.device),
            labels=labels,
            # Predictions must come in the data's order; scores pair rows with their labels.
            ordered=not labels,
        )
        return CalAttnOutput(*outputs), y

    def _predict_proba_with_labels(self, X: Any, y: Any) -> tuple[np.ndarray, Any]:
        if y is not None:
            return self.predict_proba(X), y
        if isinstance(X, torch.utils.data.Dataset | torch.utils.data.DataLoader):
            check_is_fitted(self, "network_")
            outputs, y_index = self._run(X, labels=True)
            return self._probabilities(outputs.calibrated_logits), self._scored_labels(y_index)
        raise ValueError("y is required to score array inputs")

    def _probabilities(self, logits: np.ndarray) -> np.ndarray:
        if self.post_hoc_ is not None:
            return self.post_hoc_.predict_proba(logits)
        return torch.softmax(torch.from_numpy(logits), dim=1).numpy()

    def decision_function(self, X: Any) -> np.ndarray:
        """Return the calibrated logits ``z(x) / s(x)``.

        Parameters
        ----------
        X : array-like, torch.Tensor, Dataset or DataLoader
            Inputs in the form ``fit`` accepts (labels, if any, are ignored).
            A DataLoader is read as given: its sampler (a
            ``DistributedSampler`` gives this process's shard), its batches
            and its order; one that shuffles, drops an incomplete last batch
            or samples with replacement is refused.

        Returns
        -------
        ndarray of shape (n, K)
            The backbone's logits divided by :meth:`scale` (no post-hoc temperature).
        """
        check_is_fitted(self, "network_")
        return self._run(X)[0].calibrated_logits

    def scale(self, X: Any) -> np.ndarray:
        """Return the per-sample scale ``s(x) > 0`` that divides the logits.

        Parameters
        ----------
        X : array-like, torch.Tensor, Dataset or DataLoader

        Returns
        -------
        ndarray of shape (n,)
            All ones with ``calibration_head=False``, one value with ``"global"``.
        """
        check_is_fitted(self, "network_")
        return self._run(X)[0].scale

    def predict_proba(self, X: Any) -> np.ndarray:
        """Return the calibrated class probabilities.

        With ``post_hoc="temperature"`` the fitted temperature ``post_hoc_``
        is applied to :meth:`decision_function`; CalAttn's own probabilities
        are then ``softmax(decision_function(X))``.

        Parameters
        ----------
        X : array-like, torch.Tensor, Dataset or DataLoader
            As for :meth:`decision_function`.

        Returns
        -------
        ndarray of shape (n, K)
            Rows sum to 1; columns follow ``classes_``.
        """
        return self._probabilities(self.decision_function(X))
