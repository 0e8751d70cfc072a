"""DIRECTOR: a pre-trained transformer recast as a stochastic, diffusion-like path.

Dao, Pham, Nguyen, Truong, Low and Hoang, "Diffusion-Inspired Reconfiguration
of Transformers for Uncertainty Calibration", arXiv 2602.08920. The network
modules live in :mod:`reliacal.finetune.director_network`; this module holds
the scikit-learn estimator.
"""

from __future__ import annotations

import copy
import functools
import numbers
from typing import Any

import numpy as np
import pandas as pd
import torch
from sklearn.base import _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted
from torch.utils.data import DataLoader, Dataset, Subset

from reliacal._data import as_dataset
from reliacal._device import resolve_device
from reliacal._init_arguments import store_init_arguments
from reliacal._validation import warn_at_caller
from reliacal.backbones import as_backbone
from reliacal.finetune._estimator import (
    FinetuneEstimator,
    check_finite_inputs,
    count_parameters,
)
from reliacal.finetune.director_network import (
    SIGMA_FLOOR,
    DirectorStudent,
    DirectorTrainingModule,
    WeightedDirectorLoss,
    build_student,
)
from reliacal.training import (
    TRAINING_CONSTRAINTS,
    draw_shared_seed,
    fingerprint,
    fit_module,
    loop_split,
    resumable_seed,
    seeded_torch,
)

__all__ = ["DiffusionReconfigurer", "StudentBelowTeacherWarning"]

# The end of the training loop's warning when no epoch rose above chance.
_CHANCE_ADVICE = (
    "DiffusionReconfigurer's student starts from its teacher: check that the teacher is "
    "above chance on these labels (teacher_val_accuracy_) and that the labels match the "
    "inputs; then train longer (max_epochs) or change learning_rate."
)


class StudentBelowTeacherWarning(UserWarning):
    """The fitted DIRECTOR student is less accurate than its teacher on validation.

    Raised by :meth:`DiffusionReconfigurer.fit` when the student's validation
    accuracy falls short of the teacher's by more than ``accuracy_margin``.
    """


def _record_components(
    history: list[dict], loss: WeightedDirectorLoss, epoch: int, logs: dict
) -> None:
    history.append({**logs, **loss.epoch_means()})


def _first(outputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return outputs[0]


def _sampled_moments(
    model: DirectorStudent, x: Any, n_draws: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per input, the mean of ``n_draws`` sampled softmaxes and their mean entropy."""
    log_probs = torch.log_softmax(model.sample_logits(x, n_draws, generator).double(), dim=-1)
    probs = log_probs.exp()
    entropy = -(probs * log_probs).sum(dim=-1)
    return probs.mean(dim=0), entropy.mean(dim=0)


def _uncertainty_table(probs: np.ndarray, expected_entropy: np.ndarray) -> pd.DataFrame:
    """Predictive entropy, expected entropy and their difference, from the sampled moments."""
    log_probs = np.log(np.maximum(probs, np.finfo(np.float64).tiny))
    predictive_entropy = -(probs * log_probs).sum(axis=1)
    # Rounding can leave the mean entropy a hair above the entropy of the mean.
    expected_entropy = np.minimum(expected_entropy, predictive_entropy)
    return pd.DataFrame(
        {
            "predictive_entropy": predictive_entropy,
            "expected_entropy": expected_entropy,
            "mutual_information": predictive_entropy - expected_entropy,
        }
    )


class DiffusionReconfigurer(FinetuneEstimator):
    """DIRECTOR: distil a transformer's block stack into a sampled reverse-diffusion path.

    The L blocks of a pre-trained transformer (the frozen *teacher*) are read
    as L steps of a path from the input embedding ``h_0`` to the final
    features ``h_L``; here the states are the plain block boundaries,
    ``h_t`` = output of block ``t``. A *student* replaces the last ``k``
    blocks by ``k`` applications of ONE shared, step-conditioned transition
    network ``g = Net(h_{t-1}, t)`` (``depth`` DiT blocks with adaptive
    LayerNorm, zero-initialised modulation, sinusoidal step embedding),
    followed by a mean and a noise head::

        h_t = mu(h_{t-1}, t) + sigma(h_{t-1}, t) * eps,   eps ~ N(0, I)
        mu = g + MeanHead(g),   sigma = softplus(NoiseHead(g)) + 1e-6

    then a residual MLP and the teacher's final norm, pooling (the class token
    for ViT/BERT) and classifier, copied from the teacher as initialisation.
    With ``reconfigure="all"`` the student has its own trainable copy of the
    teacher's embedding; with ``reconfigure=k`` the embedding and the first
    ``L - k`` blocks are the teacher's, frozen and shared.

    With ``anchor="teacher"`` (the default) step ``t`` reads the output of the
    teacher's own block ``t`` (kept frozen and shared):
    ``g = Net(block_t(h_{t-1}), t)``. The shared network, identity at
    initialisation, then learns a correction of the teacher's step and the
    noise, and the student starts as the teacher itself (same predictions, up
    to the ``noise_init`` noise) instead of as a network with its last ``k``
    blocks removed. ``anchor="none"`` is the paper's form, the one that
    compresses: with ``reconfigure="all"`` the student is smaller than the
    teacher. It starts far from the teacher (with ``k = L`` at chance) and
    recovers only over enough optimiser steps, all the more since the EMA of
    the weights moves slowly in a short run
    (``benchmarks/results/decisions.md#director-anchor``).

    Training minimises (through :func:`reliacal.training.fit_module`)::

        lambda_mean * mean_t MSE(mu(h^q_{t-1}, t), h^q_t)
        + lambda_var * mean_t D(sigma(h^q_{t-1}, t), sigma^q)
        + lambda_ce * CE(classifier(h_L sampled by the student's own rollout), y)

    where ``h^q`` are the teacher's recorded states (teacher forcing, under
    ``no_grad``). A softmax-attention teacher is deterministic, so the
    teacher's own noise is ``sigma^q = 0`` and ``D`` is the squared error,
    which only pulls the noise towards zero (keep ``lambda_var`` 0 then).
    ``noise_target = s > 0`` sets ``sigma^q = s`` instead, a prior noise level,
    and ``D`` becomes the Gaussian KL with equal means
    ``log(s / sigma) + sigma^2 / (2 s^2) - 1/2`` per coordinate: with
    ``lambda_var > 0`` the noise is held near ``s`` wherever the
    cross-entropy tolerates it. The cross-entropy flows through the
    reparameterised noise, which is what trains the noise head. Validation
    and the returned weights use the EMA of the student; the validation
    logits are ``log`` of the mean of ``n_draws`` sampled softmaxes.

    Prediction averages ``n_draws`` sampled softmaxes (paths):
    ``p(y|x) = (1/S) sum_s softmax(z_s)``; ``n_draws=1`` is the paper's
    single-path protocol. :meth:`uncertainty` gives the per-input spread.

    Parameters
    ----------
    backbone : model or BackboneAdapter
        The pre-trained teacher: a timm ViT/DeiT, a transformers
        ``ViTForImageClassification`` or BERT-style ``*ForSequenceClassification``
        (anything :func:`reliacal.backbones.as_backbone` wraps with
        reconfiguration support). It is never modified: ``fit`` works on a copy.
    depth : int, default=1
        DiT blocks in the shared transition network: 1, the authors' choice
        for small teachers (about 4 at ViT-B scale); a second block did not
        help a small text teacher
        (``benchmarks/results/decisions.md#director-transition-depth``).
    reconfigure : "all" or int, default="all"
        Replace all blocks (the paper's form), or only the last ``k``
        (``1 <= k <= L``), which trains faster and predicts faster: each
        reconfigured block runs once for every sampled path. For a deep
        pre-trained teacher reconfigure a few blocks; the text benchmark
        reconfigures 2 of MiniLM's 6
        (``benchmarks/results/decisions.md#director-reconfigured-blocks``).
    anchor : {"teacher", "none"}, default="teacher"
        ``"teacher"``: the shared step corrects the output of the teacher's
        block (see above), so the student starts at the teacher's accuracy;
        the parameter count is then the teacher's plus the shared step's.
        ``"none"``: the paper's student, which replaces the blocks and, with
        ``reconfigure="all"``, has fewer parameters than the teacher.
        ``"teacher"`` by default because in short fits the anchored student
        was the more accurate and the unanchored one fell below its teacher
        (``benchmarks/results/decisions.md#director-anchor``).
    lambda_mean, lambda_var, lambda_ce : float, default=0.5, 0.0, 0.5
        Weights of mean matching, noise matching and cross-entropy: the
        authors' ViT weights, which served a text teacher as well as their
        text weights (0.8, 0, 0.2) did
        (``benchmarks/results/decisions.md#director-loss-weights``).
    noise_target : float, default=0.0
        ``sigma^q``, the noise level that noise matching pulls towards: 0 (the
        deterministic teacher's, squared error) or a prior level ``s > 0``
        (Gaussian KL, see above). It acts only with ``lambda_var > 0``, which
        it then requires. 0 by default; ``noise_init=0.3, noise_target=0.3,
        lambda_var=0.5`` is the prior tuned for a text teacher
        (``benchmarks/results/decisions.md#director-noise-prior``).
    n_draws : int, default=10
        Sampled paths averaged per input by :meth:`predict_proba`,
        :meth:`decision_function`, :meth:`predict`, :meth:`uncertainty` (read
        at each call, so ``set_params(n_draws=1)`` on a fitted estimator gives
        the single-path protocol) and in validation. 10, the paths the
        authors average for OOD detection.
    ema_decay : float or None, default=0.995
        Decay of the per-step EMA of the student's weights (None: no EMA);
        0.995 is the authors'.
    noise_init : float, default=1e-2
        The noise level ``sigma`` of every step at initialisation: small, so
        that the student starts close to its deterministic teacher.
    max_epochs : int, default=30
        Passes over the training data.
    batch_size : int, default=64
        Mini-batch size of training and prediction.
    learning_rate : float, default=1e-3
        Peak AdamW learning rate (warm-up, then cosine decay).
    weight_decay : float, default=5e-5
        Decoupled weight decay.
    warmup_epochs : float, default=2.0
        Linear warm-up of the learning rate. This schedule and the optimiser
        settings above are the authors' optimiser with a shorter run
        (``benchmarks/results/decisions.md#director-training-recipe``).
    validation_fraction : float, default=0.1
        Fraction of the training data held out for checkpoint selection.
    selection_metric : {"nll", "accuracy", "ece", "loss"}, default="nll"
        The kept checkpoint is the best on validation by this score. NLL, not
        the authors' accuracy, because accuracy ties often on a small
        validation split (``benchmarks/results/decisions.md#director-selection-metric``).
    accuracy_margin : float, default=0.02
        At the end of ``fit`` the student's validation accuracy (of the kept
        checkpoint, ``n_draws`` paths) is compared with the teacher's on the
        same held-out rows; a ``StudentBelowTeacherWarning`` says what to
        change when it is lower by more than this (0.02 = 2 points). Nothing
        is compared with ``validation_fraction=0``.
    n_iter_no_change : int or None, default=None
        Early-stopping patience in epochs.
    mixed_precision : bool or {"auto", "bf16", "fp16"}, default="auto"
        Autocast in training on CUDA (prediction runs in float32).
    checkpoint_dir : str or None, default=None
        Checkpoint every epoch there; a new ``fit`` resumes from it.
    device : str, default="auto"
        CUDA when available, else the CPU.
    random_state : int, RandomState or None, default=None
        Seeds the student's initialisation, training, and the noise of every
        prediction call (each call then draws the same paths); a RandomState
        gives the seed it draws.
    verbose : int or bool, default=1
        Progress bars on stderr, as PyTorch Lightning shows them: 1 over the
        epochs and the batches of fit and predict, 2 also a line of scores
        per epoch, 0 silent. On by default, since a fine-tuning takes minutes.
    classes : array-like of shape (K,) or None, default=None
        Labels of the teacher's K output columns, in column order; None means
        the labels are the column indices ``0..K-1``. A ``Dataset`` or
        ``DataLoader`` must yield column indices (``classes`` then names them).
    {n_threads}
    {label_key}

    Attributes
    ----------
    classes_ : ndarray of shape (K,)
    network_ : DirectorStudent
        The trained student (on the CPU after ``fit``).
    n_blocks_ : int
        The teacher's depth L (the path length).
    n_reconfigured_ : int
        ``k``, the number of blocks replaced by the shared step.
    n_parameters_ : int
        Parameters of the student, frozen shared blocks included.
    teacher_n_parameters_ : int
        Parameters of the teacher.
    history_ : list of dict
        Per epoch: the training loop's entries (``train_loss``, ``val_ece``, ...)
        and the loss components ``train_mean_matching``,
        ``train_noise_matching``, ``train_cross_entropy`` (and ``val_*``);
        the noise scale ``train_sigma`` and ``val_sigma`` (root mean square of
        ``sigma`` over tokens, channels, reconfigured steps and samples) and
        ``train_sigma_steps``, that scale for each optimiser step's batch.
        After a resumed fit, epochs trained before the interruption carry the
        loop's entries only.
    teacher_val_accuracy_, student_val_accuracy_ : float
        Accuracy of the teacher and of the kept student on the validation
        rows (NaN with ``validation_fraction=0``).
    best_epoch_ : int
        Epoch (from 1) of the kept weights.

    References
    ----------
    Dao et al., "Diffusion-Inspired Reconfiguration of Transformers for
    Uncertainty Calibration", arXiv 2602.08920. Peebles and Xie, "Scalable
    Diffusion Models with Transformers", ICCV 2023 (the adaptive-LayerNorm block).

    Examples
    --------
    >>> import numpy as np
    >>> from reliacal.datasets import load_digits_images, make_tiny_vit
    >>> X, y = load_digits_images()
    >>> teacher = make_tiny_vit(embed_dim=16, depth=2, num_heads=2, random_state=0)
    >>> director = DiffusionReconfigurer(teacher, max_epochs=1, n_draws=4,
    ...                                  device="cpu", random_state=0)
    >>> director = director.fit(X[:64], y[:64])
    >>> proba = director.predict_proba(X[:5])
    >>> proba.shape, bool(np.allclose(proba.sum(axis=1), 1.0))
    ((5, 10), True)
    >>> list(director.uncertainty(X[:5]).columns)
    ['predictive_entropy', 'expected_entropy', 'mutual_information']
    """

    def __init__(
        self,
        backbone: Any = None,
        *,
        depth: int = 1,
        reconfigure: str | int = "all",
        anchor: str = "teacher",
        lambda_mean: float = 0.5,
        lambda_var: float = 0.0,
        lambda_ce: float = 0.5,
        noise_target: float = 0.0,
        n_draws: int = 10,
        ema_decay: float | None = 0.995,
        noise_init: float = 1e-2,
        max_epochs: int = 30,
        learning_rate: float = 1e-3,
        weight_decay: float = 5e-5,
        warmup_epochs: float = 2.0,
        selection_metric: str = "nll",
        accuracy_margin: float = 0.02,
        **training_params: Any,
    ):
        store_init_arguments(self, locals())
        super().__init__(**training_params)

    _parameter_constraints: dict = {
        **FinetuneEstimator._parameter_constraints,
        "depth": [Interval(numbers.Integral, 1, None, closed="left")],
        "reconfigure": [StrOptions({"all"}), Interval(numbers.Integral, 1, None, closed="left")],
        "lambda_mean": [Interval(numbers.Real, 0, None, closed="left")],
        "lambda_var": [Interval(numbers.Real, 0, None, closed="left")],
        "lambda_ce": [Interval(numbers.Real, 0, None, closed="left")],
        "noise_target": [Interval(numbers.Real, 0, None, closed="left")],
        "n_draws": [Interval(numbers.Integral, 1, None, closed="left")],
        "ema_decay": TRAINING_CONSTRAINTS["ema_decay"],
        "noise_init": [Interval(numbers.Real, SIGMA_FLOOR, None, closed="neither")],
        "anchor": [StrOptions({"teacher", "none"})],
        "accuracy_margin": [Interval(numbers.Real, 0, 1, closed="both")],
    }

    # Validation ------------------------------------------------------------------------------

    def _check_combinations(self) -> None:
        """The settings that are valid alone but not together (or not left at None)."""
        if self.backbone is None:
            raise ValueError(
                "backbone is required: pass the pre-trained transformer to reconfigure"
            )
        if not any((self.lambda_mean, self.lambda_var, self.lambda_ce)):
            raise ValueError("at least one of lambda_mean, lambda_var, lambda_ce must be > 0")
        if self.noise_target and not self.lambda_var:
            raise ValueError(
                f"noise_target={self.noise_target} has no effect with lambda_var=0: "
                "set lambda_var > 0 to pull the noise towards it"
            )

    def _predict_proba_with_labels(self, X: Any, y: Any) -> tuple[np.ndarray, Any]:
        if y is None and isinstance(X, Dataset | DataLoader):
            # One pass gives each prediction with its own label, in any order the data has.
            (probs, _), labels = self._predictive_moments(X, labels=True)
            return probs, self._scored_labels(labels)
        return super()._predict_proba_with_labels(X, y)

    # Saving ----------------------------------------------------------------------------------

    def _network_config(self, network: Any) -> dict:
        if not isinstance(network, DirectorStudent):
            return super()._network_config(network)
        # The transition network's depth and the anchor are the estimator's own parameters.
        return {"n_reconfigured": int(network.n_reconfigured)}

    def _rebuild_network(self, config: dict) -> DirectorStudent:
        k = config.get("n_reconfigured") if set(config) == {"n_reconfigured"} else None
        if type(k) is not int or k < 1:
            raise ValueError(f"the saved DIRECTOR student has a malformed configuration {config}")
        # A student around a frozen copy of the backbone given to load.
        teacher = copy.deepcopy(as_backbone(self.backbone)).cpu().eval()
        teacher.requires_grad_(False)
        return build_student(
            teacher,
            n_reconfigured=k,
            depth=int(self.depth),
            noise_init=self.noise_init,
            anchored=self.anchor == "teacher",
        )

    # Fitting ---------------------------------------------------------------------------------

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: Any, y: Any = None) -> DiffusionReconfigurer:
        """Train the student on ``(X, y)`` by distilling the teacher's block path.

        Parameters
        ----------
        X : array-like, tensor, dict of arrays, Dataset or DataLoader
            Inputs of the backbone: images ``(n, C, H, W)``, token ids
            ``(n, L)``, a dict such as ``{"input_ids": ..., "attention_mask": ...}``,
            or a Dataset / DataLoader yielding ``(x, y)`` with ``y`` the column
            index. A DataLoader's dataset and ``collate_fn`` are trained on in
            shuffled batches of ``batch_size`` (a warning says when the
            loader's own batch size differs); a sampler that selects or
            weights rows is refused.
        y : array-like of shape (n,), optional
            Labels (among ``classes``) for array inputs; None for a Dataset.

        Returns
        -------
        self

        Raises
        ------
        ValueError
            Invalid settings, or inputs that the teacher cannot read; also
            :class:`reliacal.training.TrainingDivergedError` on a NaN or
            infinite loss, after which the estimator is unfitted and the
            error's ``module`` is the student with the last good weights.
        """
        self._check_combinations()
        seed = self._fit_seed()
        if seed is None:
            # The validation split is made here, ahead of the training loop, so the
            # seed is settled here as the loop would settle it: shared by the ranks
            # and kept in checkpoint_dir, so that a resumed fit holds out the same rows.
            seed = resumable_seed(
                draw_shared_seed(resolve_device(self.device)), self.checkpoint_dir
            )
        adapter = as_backbone(self.backbone)
        # ``blocks`` raises ReconfigurationNotSupportedError (a ValueError) for
        # backbones that are not a flat stack of transformer blocks.
        n_blocks = len(adapter.blocks)
        n_classes = int(adapter.num_classes)
        k = n_blocks if self.reconfigure == "all" else int(self.reconfigure)
        if k > n_blocks:
            raise ValueError(f"reconfigure={k} exceeds the backbone's {n_blocks} blocks")

        dataset, y_checked = self._fit_inputs(X, y)
        self._reset_fitted()
        with self._divergence_policy():
            if y_checked is None:
                self._fit_dataset_labels(dataset, n_classes)
            else:
                dataset, _ = as_dataset(X, self._fit_labels(y_checked, n_classes))
            teacher = copy.deepcopy(adapter).cpu().eval()
            teacher.requires_grad_(False)
            with seeded_torch(seed):
                student = build_student(
                    teacher,
                    n_reconfigured=k,
                    depth=int(self.depth),
                    noise_init=self.noise_init,
                    anchored=self.anchor == "teacher",
                )
            with self._divergence_policy(student), self._explaining_input_errors(teacher, dataset):
                self._train(adapter, teacher, student, dataset, seed, n_blocks, k)
        return self

    def _train(self, adapter, teacher, student, dataset, seed, n_blocks: int, k: int) -> None:
        module = DirectorTrainingModule(
            teacher, student, n_eval_draws=int(self.n_draws), noise_target=self.noise_target
        )
        loss = WeightedDirectorLoss(self.lambda_mean, self.lambda_var, self.lambda_ce)
        history: list[dict] = []
        config = self._training_config(
            optimizer="adamw",
            schedule="cosine",
            validation_fraction=self.validation_fraction,
            ema_decay=self.ema_decay,
            random_state=seed,
        )
        train_part, validation = self._validation_split(dataset, seed)
        with self._threads(module, int(self.batch_size)):
            result = fit_module(
                module,
                loss,
                train_part,
                config=config,
                validation_data=validation,
                logits_fn=_first,
                callbacks=[functools.partial(_record_components, history, loss)],
                chance_advice=_CHANCE_ADVICE,
                # The teacher and the student seeded from it: another backbone is told apart.
                fingerprint=None if self.checkpoint_dir is None else fingerprint(module),
            )
        self.network_ = student.cpu().eval()
        self.teacher_val_accuracy_ = self._teacher_accuracy(teacher, validation)
        best = next((e for e in result.history if e["epoch"] == result.best_epoch), {})
        self.student_val_accuracy_ = float(best.get("val_accuracy", np.nan))
        # The trainer's history covers every epoch, also those before a resume; the
        # per-component losses exist only for the epochs this call trained.
        components = {entry["epoch"]: entry for entry in history}
        self.history_ = [
            {**entry, **components.get(entry["epoch"], {})} for entry in result.history
        ]
        self.best_epoch_ = result.best_epoch
        self.n_blocks_ = n_blocks
        self.n_reconfigured_ = k
        self.n_parameters_ = count_parameters(student)
        self.teacher_n_parameters_ = count_parameters(adapter)
        self._warn_if_below_teacher()

    def _validation_split(self, dataset: Dataset, seed: int) -> tuple[Dataset, Any]:
        """The training loop's own split, made here so that the teacher can be scored on it."""
        if not self.validation_fraction:
            return dataset, None
        train_rows, validation_rows = loop_split(len(dataset), self.validation_fraction, seed)
        return Subset(dataset, train_rows.tolist()), Subset(dataset, validation_rows.tolist())

    def _teacher_accuracy(self, teacher: torch.nn.Module, validation: Any) -> float:
        """The frozen teacher's accuracy on the validation rows (NaN without them)."""
        if validation is None:
            return float("nan")

        def logits(module, x):
            return (module(x).logits.float(),)

        (scores,), labels = self._run_batches(
            teacher, validation, logits, resolve_device(self.device), labels=True
        )
        return float(np.mean(scores.argmax(axis=1) == labels))

    def _warn_if_below_teacher(self) -> None:
        shortfall = self.teacher_val_accuracy_ - self.student_val_accuracy_
        if not shortfall > self.accuracy_margin:  # also False for NaN (no validation rows)
            return
        advice = (
            "use anchor='teacher'"
            if self.anchor == "none"
            else "train longer (max_epochs), lower learning_rate or ema_decay"
        )
        warn_at_caller(
            f"the DIRECTOR student's validation accuracy {self.student_val_accuracy_:.1%} is "
            f"{shortfall:.1%} below its teacher's {self.teacher_val_accuracy_:.1%} (more than "
            f"accuracy_margin={self.accuracy_margin}): {advice}, or reconfigure fewer blocks",
            StudentBelowTeacherWarning,
        )

    # Prediction ------------------------------------------------------------------------------

    def _generator(self, device: torch.device) -> torch.Generator:
        if self.random_state is None:
            # Unseeded calls differ, yet follow torch.manual_seed.
            seed = int(torch.randint(0, 2**63 - 1, (), dtype=torch.int64))
        elif isinstance(self.random_state, numbers.Integral):
            seed = int(self.random_state)
        else:
            seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        return torch.Generator(device=device).manual_seed(seed)

    def _predictive_moments(
        self, X: Any, *, labels: bool = False
    ) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray | None]:
        """Mean of the sampled softmaxes ``(n, K)`` and their mean entropy ``(n,)``.

        With ``labels`` (for scoring), also the labels the data yields, in
        any order the data comes in; otherwise the rows come in the data's
        order, which a shuffling loader could not give.
        """
        check_is_fitted(self, "network_")
        check_finite_inputs(X)
        device = resolve_device(self.device)
        forward = functools.partial(
            _sampled_moments, n_draws=int(self.n_draws), generator=self._generator(device)
        )
        return self._run_batches(
            self.network_, X, forward, device, labels=labels, ordered=not labels
        )

    def predict_proba(
        self, X: Any, return_uncertainty: bool = False
    ) -> np.ndarray | tuple[np.ndarray, pd.DataFrame]:
        """Mean of ``n_draws`` sampled softmaxes, ``(1/S) sum_s softmax(z_s(x))``.

        Parameters
        ----------
        X : array-like, tensor, dict of arrays, Dataset or DataLoader
            Backbone inputs (see :meth:`fit`). A DataLoader is read as
            given: its sampler (a ``DistributedSampler`` gives this process's
            shard), its batches and its order; one that shuffles, drops an
            incomplete last batch or samples with replacement is refused. The
            sampled noise follows the batches, so other batches give other
            draws.
        return_uncertainty : bool, default=False
            Also return :meth:`uncertainty`'s table, computed from the same
            sampled paths, so that one pass gives both (as
            ``GaussianProcessRegressor.predict(X, return_std=True)`` does).

        Returns
        -------
        ndarray of shape (n, K)
            Rows sum to 1; columns follow ``classes_``.
        pandas.DataFrame of shape (n, 3)
            Only with ``return_uncertainty=True``: see :meth:`uncertainty`.
        """
        (probs, expected_entropy), _ = self._predictive_moments(X)
        if return_uncertainty:
            return probs, _uncertainty_table(probs, expected_entropy)
        return probs

    def decision_function(self, X: Any) -> np.ndarray:
        """Log of the averaged probabilities, ``log predict_proba(X)``.

        These are logits whose softmax is exactly :meth:`predict_proba` (the
        mean of sampled softmaxes, not the softmax of mean logits). Entries are
        floored at the smallest positive float64 so that they stay finite.

        Returns
        -------
        ndarray of shape (n, K)
        """
        probs = self.predict_proba(X)
        return np.log(np.maximum(probs, np.finfo(np.float64).tiny))

    def predict(self, X: Any) -> np.ndarray:
        """The class of highest averaged probability, as a label of ``classes_``."""
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    def uncertainty(self, X: Any) -> pd.DataFrame:
        """Predictive entropy, expected entropy and mutual information per input.

        With ``p_s`` the softmax of sampled path ``s`` (``n_draws`` paths) and
        ``p = mean_s p_s`` (entropies in nats)::

            predictive_entropy = H(p) = -sum_k p_k log p_k
            expected_entropy   = mean_s H(p_s)            (aleatoric part)
            mutual_information = H(p) - mean_s H(p_s)     (epistemic part, >= 0)

        Mutual information is zero when every path gives the same softmax
        (for instance zero noise); all three are usable as OOD or failure
        scores (higher = less certain). Which ranks OOD inputs best depends on
        the shift and on the noise: choose on held-out shifted data of your
        own (``benchmarks/results/decisions.md#director-which-uncertainty-score``).
        Small negative rounding residue of the difference is clipped to 0.

        Parameters
        ----------
        X : array-like, tensor, dict of arrays, Dataset or DataLoader

        Returns
        -------
        pandas.DataFrame of shape (n, 3)
        """
        return _uncertainty_table(*self._predictive_moments(X)[0])
