"""Sample-dependent adaptive temperature scaling (AdaTS, Joy et al., AAAI 2023).

The network and its loss live in :mod:`reliacal.calibrators._adaptive_network`
(:class:`_AdaptiveTemperatureNetwork`, :func:`_adaptive_ts_loss`).
:class:`AdaptiveTS` is the scikit-learn estimator around them; one member
trains with the shared loop :func:`reliacal.training.fit_module`, several
either one by one with it or stacked into one network
(:mod:`reliacal.calibrators._adaptive_stack`) and trained together.
"""

from __future__ import annotations

import copy
import numbers
from typing import NamedTuple

import numpy as np
import torch
from sklearn.utils._param_validation import Interval, StrOptions
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset, Subset

from reliacal._device import resolve_device
from reliacal._init_arguments import store_init_arguments
from reliacal.calibrators._adaptive_network import (  # noqa: F401 - tests reach them here
    _N_CONFIDENCE_STATISTICS,
    _PUBLISHED_WIDTHS,
    _adaptive_ts_loss,
    _AdaptiveOutput,
    _AdaptiveTemperatureNetwork,
    _gaussian_kl,
    _loss_from_terms,
    _output_logits,
    confidence_statistics,
)
from reliacal.calibrators._adaptive_stack import (
    fit_stacked,
    stacked_elbo,
    stacked_loss_from_terms,
)
from reliacal.calibrators._base import BaseCalibrator
from reliacal.calibrators.temperature import TemperatureScaling
from reliacal.persistence import loadable
from reliacal.training import (
    THREADS_CONSTRAINT,
    TRAINING_CONSTRAINTS,
    NetworkEstimatorMixin,
    PositiveIntegers,
    TrainingDivergedError,
    draw_shared_seed,
    fit_module,
    seeded_torch,
    training_config,
)

__all__ = ["AdaptiveTS", "AdaptiveTSMember"]

# Rows per inference batch: bounds the memory of predicting on large arrays.
_INFERENCE_ROWS = 8192
# What the training loop's chance warning says here: a temperature keeps the argmax.
_CHANCE_ADVICE = (
    "AdaptiveTS divides fixed logits by a positive temperature, which keeps their argmax, "
    "so this is the accuracy of the model that produced them: check that the labels match "
    "those logits (training longer cannot raise it)."
)


class _AdaptiveTemperatureMap(nn.Module):
    """AdaptiveTS with ``n_draws=1`` for export: ``softmax(z / T(x))``, ``T`` the members' geometric mean.

    The input is float64 ``(n, D + K)``: ``D`` feature columns (none without
    ``n_logits``, when the features are the logits) then the logits.
    Features are standardised in float64 and read by the float32 networks;
    the temperature divides the float64 logits, as in
    ``AdaptiveTS.predict_proba``. ``torch.jit.trace`` takes it (the network
    has optional buffers, which ``torch.jit.script`` refuses).
    """

    def __init__(self, networks, feature_mean, feature_scale, *, n_features: int):
        super().__init__()
        self.networks = nn.ModuleList(networks)
        self.register_buffer("feature_mean", torch.as_tensor(feature_mean, dtype=torch.float64))
        self.register_buffer("feature_scale", torch.as_tensor(feature_scale, dtype=torch.float64))
        self.n_features = int(n_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = x[:, self.n_features :]
        features = x[:, : self.n_features] if self.n_features else logits
        standardised = ((features - self.feature_mean) / self.feature_scale).to(torch.float32)
        temperature = _geometric_mean(
            [
                network.temperature_of(network.posterior(standardised)[0], logits).double()
                for network in self.networks
            ]
        )
        return torch.softmax(logits / temperature[:, None], dim=1)


@loadable
class AdaptiveTSMember(NamedTuple):
    """One trained network of :class:`AdaptiveTS` and the record of its training."""

    network: nn.Module  # on the CPU, in eval mode
    history: list  # per epoch, as reliacal.training.fit_module reports
    best_epoch: int  # epoch (from 1) whose weights were kept
    initial_temperature: float | None  # TemperatureScaling on the member's training part
    fell_back: bool  # whether the single starting temperature beat every epoch
    random_state: int | None  # seed of the initialisation, validation split and shuffling


class _CalibrationData(Dataset):
    """``((h_i, z_i, w_i), y_i)`` items over cached features, logits, weights and labels."""

    def __init__(self, features, logits, weights, targets):
        self.features, self.logits, self.weights, self.targets = features, logits, weights, targets

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index):
        inputs = (self.features[index], self.logits[index], self.weights[index])
        return inputs, self.targets[index]


class _MemberStart(NamedTuple):
    """A member ready to train: network, rows, starting temperature and the fit's arrays."""

    network: _AdaptiveTemperatureNetwork
    train_rows: np.ndarray
    validation_rows: np.ndarray
    global_ts: TemperatureScaling | None
    seed: int | None
    logits: np.ndarray
    y_index: np.ndarray
    weights: np.ndarray


def _auto_hidden_sizes(n_features: int) -> tuple[int, int, int]:
    """The published widths (1024, 512, 512) from 256 features up; 4 D (at least 128) below."""
    first = min(_PUBLISHED_WIDTHS[0], max(128, 4 * n_features))
    return first, first // 2, first // 2


def _member_seeds(seed: int | None, n_members: int) -> list[int | None]:
    """The estimator's seed for the first member (so one member is the plain fit), then
    seeds drawn from it; all ``None`` (unseeded) without one."""
    if seed is None:
        return [None] * n_members
    drawn = np.random.SeedSequence(seed).generate_state(n_members - 1) if n_members > 1 else []
    return [seed, *(int(value) & 0x7FFFFFFF for value in drawn)]


def _as_tensor(values: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """``torch.as_tensor``, copying read-only arrays (a DataFrame's values are read-only).

    torch warns on read-only memory it could share; a copy is the same numbers.
    """
    array = np.asarray(values)
    if not array.flags.writeable:
        array = array.copy()
    return torch.as_tensor(array, dtype=dtype)


def _widened_bounds(values: np.ndarray) -> np.ndarray:
    """Per column, ``[min - width, max + width]`` of ``values``, ``width = max - min``: (2, D).

    What the network may read: its extrapolation a little beyond the
    calibration data is kept, far beyond it the inputs are held at these
    bounds, so that ``T(x)`` stays what the data supports.
    """
    low, high = values.min(axis=0), values.max(axis=0)
    width = high - low
    return np.stack([low - width, high + width]).astype(np.float64)


def _geometric_mean(temperatures: list[torch.Tensor]) -> torch.Tensor:
    """``exp(mean log T)`` over the members; one member's own values exactly."""
    if len(temperatures) == 1:
        return temperatures[0]
    return torch.stack(temperatures).log().mean(dim=0).exp()


def _check_finite_calibration(calibrated: np.ndarray) -> None:
    """Refuse rows whose ``z / T(x)`` left the float64 range (finite logits near 1e308)."""
    bad = ~np.isfinite(calibrated).all(axis=1)
    if bad.any():
        raise ValueError(
            f"z / T(x) would overflow float64 for {int(bad.sum())} row(s) of logits too large "
            "for it (magnitudes near 1e308); rescale those logits (their probabilities are "
            "0 and 1 at any smaller scale) or drop the rows"
        )


class AdaptiveTS(NetworkEstimatorMixin, BaseCalibrator):
    r"""Sample-dependent adaptive temperature scaling (AdaTS).

    Joy, Pinto, Lim, Torr and Dokania, "Sample-dependent Adaptive Temperature
    Scaling for Improved Calibration", AAAI 2023 (arXiv:2207.06211). Each
    input gets its own temperature ``T(x) > 0``, predicted from the frozen
    classifier's features ``h`` and applied to its logits ``z``:
    ``p = softmax(z / T(x))``. Dividing by a positive number never changes
    the predicted class, so the accuracy is the classifier's.

    The model is the authors' (the sizes are parameters):

    - encoder ``q(u | h) = N(mu(h), diag sigma(h)^2)``: an ELU MLP
      ``D -> hidden_layer_sizes`` and two linear heads; ``sigma`` is a
      softplus floored at 1e-3; ``u`` has ``latent_dim`` dimensions;
    - decoder: an ELU MLP ``latent_dim -> hidden_layer_sizes -> D`` with a
      unit-scale Laplace likelihood ``-log p(h | u) = sum_d |h_d - h^_d| + log 2``;
    - class-conditional prior ``p(u | y) = N(m_y, diag s_y^2)`` with learned
      means and scales (softplus, floored at 1e-3);
    - temperature head: ``l_k = log N(u; m_k, s_k^2)`` for every class ``k``,
      then an ELU MLP ``K -> temperature_hidden_sizes -> 1`` and a softplus
      floored at 1e-3 give ``T``. An input unlikely under every class prior
      gets its own temperature.

    It minimises, over mini-batches of the calibration data and with ``u``
    drawn by the reparameterisation trick,

    .. math::

        \mathrm{mean}_i\, w_i \left[ -\log p(h_i | u_i)
        + \mathrm{KL}(q(u | h_i) \,\|\, p(u | y_i))
        - \log \mathrm{softmax}(z_i / T(u_i))_{y_i} \right]

    (the Gaussian KL in closed form, summed over the latent dimensions; ``w``
    are the sample weights scaled to mean 1). Predictions use the posterior
    mean ``u = mu(h)``, so they are deterministic (the authors' code samples
    ``u`` at test time); ``n_draws > 1`` instead averages ``softmax(z /
    T(u_s))`` over draws ``u_s ~ q(u | h)`` from a generator seeded with
    ``random_state``.

    Inputs, in three forms:

    - logits only (default): ``X`` is ``(n, K)`` and the logits also serve as
      the features ``h``;
    - features and logits side by side: ``X`` is ``(n, D + K)`` and
      ``n_logits=K`` says that its last ``K`` columns are the logits, so
      that cross-validation's row splitting keeps them together;
    - ``backbone=model``: ``X`` holds raw inputs; the features are the
      backbone's pooled pre-logits outputs and the logits its head's, from
      one forward pass (:func:`reliacal.backbones.extract_outputs`).

    Departures from the published recipe:

    - the features are standardised with the mean and standard deviation of
      the calibration data (attributes ``feature_mean_``,
      ``feature_scale_``), so that the unit-scale Laplace reconstruction
      term weighs every dimension alike whatever the scale of the
      backbone's features (the logits, when they serve as features, are
      standardised too; the logits that are divided by ``T`` are not);
    - ``validation_fraction`` of the calibration data is held out to keep
      the epoch of lowest validation NLL and, with ``n_iter_no_change``, to
      stop early, because a small calibration set overfits a 1024-wide
      network (the published recipe, a fixed 100 epochs, is
      ``validation_fraction=0, n_iter_no_change=None``);
    - ``hidden_layer_sizes="auto"`` narrows the network for fewer than 256
      features; ``weight_decay`` (decoupled, AdamW) is available, 0 as
      published;
    - ``sample_weight`` scales each sample's loss; the validation NLL that
      selects the epoch is unweighted;
    - ``initial_temperature="ts"`` (default) first fits
      :class:`TemperatureScaling` on the training part of the calibration
      data and starts the temperature head at that one temperature (its last
      layer's weights zero, its bias ``softplus^-1(T)``), so the per-sample
      part only has to learn deviations from the global NLL optimum. The
      published random start begins far from any useful temperature, and a
      small calibration set stops the training before it gets there. The
      starting point also competes in the epoch selection: when
      no epoch's validation NLL is below the single temperature's, the
      per-sample part is dropped (``fell_back``) and ``T(x)`` becomes the
      TemperatureScaling temperature of all the calibration data, training
      and validation parts together: the fit is then exactly
      TemperatureScaling. ``None`` is the published random start;
    - ``confidence_inputs=True`` (off by default) also gives the temperature
      head three statistics of ``z / T_0`` (``T_0`` the starting
      temperature): the top log-probability, its margin over the second and
      the entropy, standardised on the training part. The head then reads
      the confidence directly instead of through the latent code; whether it
      helps depends on the data, so it is an option to tune, not the default;
    - ``n_members > 1`` (1 by default, as published) trains that many
      networks, each with its own seed and so its own initialisation,
      validation split and mini-batches, and divides the logits by the
      geometric mean of their temperatures: one network's ECE moves with its
      seed, the mean of several is steadier; they train together until the first
      of them stops early (``member_stopping``).

    Why each of these defaults: the AdaptiveTS sections of
    ``benchmarks/results/decisions.md``.

    Parameters
    ----------
    n_logits : int, default=None
        Number of logit columns at the right end of ``X``; the columns before
        them are the features. ``None``: every column is a logit, and the
        logits are the features. Must be ``None`` with a ``backbone``.
    latent_dim : int, default=16
        Dimension of the latent code ``u``; 16, as published.
    hidden_layer_sizes : "auto" or tuple of int, default="auto"
        Widths of the encoder's hidden layers, and of the decoder's.
        ``"auto"``: the published ``(1024, 512, 512)`` for ``D >= 256``
        features, and ``(w, w/2, w/2)`` with ``w = max(128, 4 D)`` below, so
        that ten logits do not feed a 1024-wide network
        (``benchmarks/results/decisions.md#adaptivets-hidden-widths``).
    temperature_hidden_sizes : tuple of int, default=(128, 128)
        Widths of the temperature head's hidden layers, as published.
    learning_rate : float, default=5e-4
        Adam's learning rate (constant), as published.
    max_epochs : int, default=100
        Maximum passes over the training part of the calibration data; 100,
        the published fixed budget.
    weight_decay : float, default=0.0
        Decoupled weight decay (AdamW; 0 is Adam, as published).
    validation_fraction : float, default=0.2
        Fraction of the calibration data held out (seeded split) to select
        the epoch with the lowest validation NLL of ``softmax(z / T(x))``;
        0 trains on all of it and keeps the last epoch. 0.2 rather than
        scikit-learn's 0.1, whose smaller validation part picked noisier
        epochs (``benchmarks/results/decisions.md#adaptivets-validation-split``).
    n_iter_no_change : int or None, default=10
        Stop after this many epochs without a lower validation NLL; ``None``
        trains for ``max_epochs``. Needs ``validation_fraction > 0``. Early
        stopping is a departure from the published recipe (see above).
    n_draws : int, default=1
        1: predict at the posterior mean of ``u`` (deterministic). More:
        average the probabilities over this many sampled ``u`` (seeded).
        Read at each prediction, so it may be changed after ``fit``. 1
        because sampling brought no steady gain
        (``benchmarks/results/decisions.md#adaptivets-posterior-mean``).
    initial_temperature : "ts" or None, default="ts"
        ``"ts"``: start ``T(x)`` at the temperature of
        :class:`TemperatureScaling` fitted on the training part, and keep
        that single temperature when no epoch beats it on the validation
        part (see the departures above). ``None``: the random start of the
        published recipe, and no fallback. ``"ts"`` because the random start
        lost to a single temperature on small calibration sets
        (``benchmarks/results/decisions.md#adaptivets-initial-temperature``).
    confidence_inputs : bool, default=False
        Feed the temperature head the top log-probability, top-2 margin and
        entropy of ``z / T_0`` beside the class log-likelihoods (see the
        departures above). ``False``, the published head, since the gain
        depends on the data
        (``benchmarks/results/decisions.md#adaptivets-ensemble-and-confidence-inputs``).
    n_members : int, default=1
        Networks to train, each with its own seed (the first with
        ``random_state``'s) and so its own initialisation, validation split
        and shuffling; ``T(x)`` is the geometric mean of their temperatures
        (see the departures above). With ``member_training="sequential"``
        fitting takes up to ``n_members`` times as long; 1 is the published
        model, and ``confidence_inputs=True, n_members=5`` the steadier recipe
        (``benchmarks/results/decisions.md#adaptivets-ensemble-and-confidence-inputs``).
    member_training : {"batched", "sequential"}, default="batched"
        How ``n_members > 1`` networks train. ``"batched"``: stacked into one
        network (each weight gains a leading member axis), so that one
        forward and backward pass per mini-batch trains them all, each on its
        own mini-batches, latent samples, kept epoch and early stopping, as
        :func:`reliacal.training.fit_module` would draw and select them for
        that member alone; a member that stops leaves the stack.
        ``"sequential"``: one after another with
        :func:`reliacal.training.fit_module`. The two draw the same
        mini-batches, latent samples and splits; they differ by the rounding
        of the batched products, which training can amplify over many epochs
        until a member stops at another epoch. ``"batched"`` because the
        members cost one forward and backward pass per step together
        (``benchmarks/results/adaptive_ensemble_speed.md``). One member
        always trains with :func:`reliacal.training.fit_module`.
    member_stopping : {"first", "each"}, default="first"
        How early stopping (``n_iter_no_change``) ends ``n_members > 1``
        networks. ``"first"``: the first member to stop on its own
        validation NLL ends the training of all, each keeping its own best
        epoch up to then (one by one, a member trained past that epoch is cut
        there, or retrained to it when its kept epoch lay beyond). ``"each"``:
        every member trains until its own early stop, so the fit lasts as
        long as the slowest. ``"first"`` because five members then cost
        about one member's epochs, with an ECE and NLL within the split
        noise of ``"each"``'s
        (``benchmarks/results/decisions.md#adaptivets-member-stopping``).
    loss : "elbo" or callable, default="elbo"
        The training loss. ``"elbo"`` is the published one above. A callable
        ``loss(logits, y, sample_weight, variational) -> scalar tensor``
        replaces it, for experiments with other calibration terms; per
        mini-batch of ``B`` rows it receives the calibrated logits
        ``z / T(u)`` (``(B, K)``, differentiable, ``u`` sampled), the class
        indices ``y`` (``(B,)``, int64), the sample weights (``(B,)``, mean 1
        over the calibration data) and ``variational``, the per-sample
        ``-log p(h | u) + KL(q(u | h) || p(u | y))`` (``(B,)``). ``"elbo"``
        is ``(sample_weight * (variational + cross_entropy(logits, y))).mean()``.
        The epoch is still selected by the validation NLL. A module-level
        function keeps the estimator picklable.
    random_state : int, RandomState instance or None, default=None
        Seeds the network's initialisation, the validation split, the
        shuffling and the latent samples of training (of the first member;
        the others' seeds are drawn from it), and the generator of
        ``n_draws > 1``. An int makes fits reproducible on the CPU.
    input : {"logits", "probs"}, default="logits"
        ``"probs"``: the logit columns (or the backbone's outputs) are
        probabilities; their logs are used.
    classes : array-like of shape (K,), default=None
        Label of each logit column (default ``0..K-1``).
    backbone : model, BackboneAdapter or str, default=None
        Calibrate this frozen classifier; ``X`` then holds its raw inputs.
    batch_size : int, default=128
        Mini-batch size of training, and of the backbone's forward passes;
        128, as published.
    device : str or torch.device, default="auto"
        Where the network (and the backbone) runs: CUDA when available.
    mixed_precision : bool, default=False
        Backbone autocast on CUDA (the calibration network trains in float32).
    memory : joblib.Memory, str or path, default=None
        Cache of the backbone outputs, e.g. for a grid search. The cache is
        read back with pickle, which can run code: give only a folder that you
        trust and that no one else can write to.
    verbose : int or bool, default=0
        1: progress bars over the epochs and the batches of each (and the
        backbone pass); 2: also each epoch's scores as a line.
    {n_threads}
    {label_key}

    Attributes
    ----------
    members_ : list of AdaptiveTSMember
        The ``n_members`` trained networks, each a named tuple of
        ``network`` (on the CPU, in eval mode), ``history`` (per epoch:
        ``train_loss``, ``val_loss``, ``val_nll``, ``val_ece``,
        ``val_accuracy``, as :func:`reliacal.training.fit_module` reports),
        ``best_epoch`` (from 1, the epoch whose weights were kept),
        ``initial_temperature`` (TemperatureScaling on the member's training
        part; ``None`` with ``initial_temperature=None``), ``fell_back``
        (whether that single temperature beat every epoch on the validation
        part; ``T(x)`` is then the TemperatureScaling temperature of all the
        calibration data) and ``random_state`` (the member's seed). A
        :class:`~reliacal.training.TrainingDivergedError` leaves the estimator
        unfitted: the error's ``module`` is the diverging member's network
        with the last good weights, its ``members`` the members trained
        before it (none when they train batched, all together).
    feature_mean_, feature_scale_ : ndarray of shape (D,)
        Standardisation of the features (scale 1 for constant features).
    feature_bounds_ : ndarray of shape (2, D)
        What the networks read at prediction: each standardised feature is
        held within ``[min - w, max + w]`` of the calibration data, ``w =
        max - min``. Inside it the network's own ``T(x)`` is used; far
        outside (logits of ``1e5`` where the data had ``10``) the
        temperature stays at the edge's instead of following the network's
        extrapolation, so confidence keeps growing with the logits as under
        one temperature, and stays finite.
    logit_bounds_ : ndarray of shape (2, K)
        The same for the logits the temperature head reads with
        ``confidence_inputs``; the temperature always divides the logits
        as given. Logits so large that ``z / T(x)`` overflows float64 are a
        ``ValueError``.
    classes_ : ndarray of shape (K,)
        Label of each logit column.
    n_features_in_ : int
        Columns of ``X`` (logits mode).
    backbone_ : BackboneAdapter
        The wrapped backbone (backbone mode).

    See Also
    --------
    TemperatureScaling : one temperature for all inputs.

    Examples
    --------
    >>> import numpy as np
    >>> from reliacal.calibrators import AdaptiveTS
    >>> from reliacal.datasets import make_logits
    >>> logits, y = make_logits(300, 3, random_state=0)
    >>> model = AdaptiveTS(hidden_layer_sizes=(16,), temperature_hidden_sizes=(8,),
    ...                    latent_dim=2, max_epochs=3, random_state=0).fit(logits, y)
    >>> temperatures = model.temperature(logits)
    >>> temperatures.shape, bool(np.all(temperatures > 0))
    ((300,), True)
    >>> proba = model.predict_proba(logits)
    >>> bool(np.allclose(proba.sum(axis=1), 1.0))
    True
    >>> bool(np.all(proba.argmax(axis=1) == logits.argmax(axis=1)))
    True

    Five networks whose heads also read the confidence (slower, steadier):

    >>> ensemble = AdaptiveTS(hidden_layer_sizes=(16,), temperature_hidden_sizes=(8,),
    ...                       latent_dim=2, max_epochs=3, confidence_inputs=True,
    ...                       n_members=5, random_state=0).fit(logits, y)
    >>> len(ensemble.members_), ensemble.members_[0].random_state
    (5, 0)
    >>> ensemble.temperature(logits).shape
    (300,)
    """

    _split_stream = "numpy"

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "n_logits": [Interval(numbers.Integral, 2, None, closed="left"), None],
        "latent_dim": [Interval(numbers.Integral, 1, None, closed="left")],
        "hidden_layer_sizes": [StrOptions({"auto"}), PositiveIntegers()],
        "temperature_hidden_sizes": [PositiveIntegers()],
        "learning_rate": TRAINING_CONSTRAINTS["learning_rate"],
        "max_epochs": TRAINING_CONSTRAINTS["max_epochs"],
        "weight_decay": TRAINING_CONSTRAINTS["weight_decay"],
        "validation_fraction": TRAINING_CONSTRAINTS["validation_fraction"],
        "n_iter_no_change": TRAINING_CONSTRAINTS["n_iter_no_change"],
        "n_draws": [Interval(numbers.Integral, 1, None, closed="left")],
        "initial_temperature": [StrOptions({"ts"}), None],
        "confidence_inputs": ["boolean"],
        "n_members": [Interval(numbers.Integral, 1, None, closed="left")],
        "member_training": [StrOptions({"batched", "sequential"})],
        "member_stopping": [StrOptions({"first", "each"})],
        "loss": [StrOptions({"elbo"}), callable],
        "random_state": TRAINING_CONSTRAINTS["random_state"],
        "n_threads": THREADS_CONSTRAINT,
    }

    def __init__(
        self,
        n_logits: int | None = None,
        *,
        latent_dim: int = 16,
        hidden_layer_sizes: str | tuple[int, ...] = "auto",
        temperature_hidden_sizes: tuple[int, ...] = (128, 128),
        learning_rate: float = 5e-4,
        max_epochs: int = 100,
        weight_decay: float = 0.0,
        validation_fraction: float = 0.2,
        n_iter_no_change: int | None = 10,
        n_draws: int = 1,
        initial_temperature: str | None = "ts",
        confidence_inputs: bool = False,
        n_members: int = 1,
        member_training: str = "batched",
        member_stopping: str = "first",
        loss="elbo",
        random_state=None,
        batch_size: int = 128,
        n_threads: int | None = None,
        **base_params,
    ):
        store_init_arguments(self, locals())
        super().__init__(batch_size=batch_size, **base_params)

    # ------------------------------------------------------------ base hooks
    def _split_columns(self, X: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        if self.n_logits is None:
            return None, X
        if self.n_logits >= X.shape[1]:
            raise ValueError(
                f"n_logits={self.n_logits} leaves no feature column in X with {X.shape[1]} "
                "columns: X must hold the features followed by the logits (or set "
                "n_logits=None when X holds logits only)"
            )
        return X[:, : -self.n_logits], X[:, -self.n_logits :]

    def _check_fit_inputs(self, features, logits) -> None:
        if self.backbone is not None and self.n_logits is not None:
            raise ValueError(
                "n_logits must be None with a backbone: the features and logits come from "
                "the backbone's forward pass"
            )
        if self.n_iter_no_change is not None and self.validation_fraction == 0:
            raise ValueError(
                "n_iter_no_change needs validation_fraction > 0 (early stopping is judged on "
                "the held-out part of the calibration data); set n_iter_no_change=None"
            )

    def _fit_core(self, features, logits, y_index, sample_weight) -> None:
        features = logits if features is None else features
        if isinstance(self.hidden_layer_sizes, str) and self.hidden_layer_sizes == "auto":
            hidden = _auto_hidden_sizes(features.shape[1])
        else:
            hidden = tuple(int(width) for width in self.hidden_layer_sizes)
        temperature_hidden = tuple(int(width) for width in self.temperature_hidden_sizes)
        n_samples = logits.shape[0]
        mean = features.mean(axis=0, dtype=np.float64)
        scale = features.std(axis=0, dtype=np.float64)
        # Constant features carry no information; scale 1 keeps them finite (at 0).
        scale[scale <= 1e-12 * np.maximum(1.0, np.abs(mean))] = 1.0
        self.feature_mean_, self.feature_scale_ = mean, scale
        # Bounds of what the networks read at prediction (the standardised features, and
        # the logits behind confidence_inputs): far-out rows get a bounded temperature.
        self.feature_bounds_ = _widened_bounds((features - mean) / scale)
        self.logit_bounds_ = _widened_bounds(np.asarray(logits, dtype=np.float64))
        if sample_weight is None:
            weights = np.ones(n_samples)
        else:
            weights = sample_weight * (n_samples / sample_weight.sum())
        data = _CalibrationData(
            self._standardised(features),
            _as_tensor(logits, torch.float32),
            torch.as_tensor(weights, dtype=torch.float32),
            torch.as_tensor(y_index, dtype=torch.int64),
        )
        seed = self._fit_seed()
        if seed is None and self.n_members > 1:
            # The members' seeds come from one drawn seed, so that a member can be retrained
            # alike (member_stopping="first" one by one).
            seed = int(draw_shared_seed())
        self.sampling_seed_ = 0 if seed is None else seed
        seeds = _member_seeds(seed, self.n_members)
        # Filled member by member; a divergence hands the members already trained to the error.
        self.members_ = []
        with self._divergence_policy():
            if self.n_members > 1 and self.member_training == "batched":
                self._fit_stacked(data, logits, y_index, weights, seeds, hidden, temperature_hidden)
                return
            bound = self.max_epochs
            for index, member_seed in enumerate(seeds):
                if self.verbose and self.n_members > 1:
                    print(f"AdaptiveTS: member {index + 1} of {self.n_members}", flush=True)
                start = self._start_member(
                    data, logits, y_index, weights, member_seed, hidden, temperature_hidden
                )
                self.members_.append(self._train_member(start, data, bound, index))
                if self.member_stopping == "first":
                    bound = min(bound, len(self.members_[-1].history))
            # A member that stopped early ends the training of those before it too: each
            # is cut at that epoch, and retrained to it if its kept epoch lies beyond.
            for index, member in enumerate(self.members_):
                if len(member.history) <= bound:
                    continue
                if member.best_epoch <= bound:
                    self.members_[index] = member._replace(history=member.history[:bound])
                    continue
                start = self._start_member(
                    data, logits, y_index, weights, member.random_state, hidden, temperature_hidden
                )
                self.members_[index] = self._train_member(start, data, bound, index)

    def _start_member(
        self, data, logits, y_index, weights, seed, hidden, temperature_hidden
    ) -> _MemberStart:
        """One member before training: its seeded split, network and starting temperature."""
        # The split is made here, not by the trainer, so that the global temperature is
        # fitted on the training part alone and scored on the same validation part.
        train_rows, validation_rows = self._split(len(data), seed)
        with seeded_torch(seed):
            network = _AdaptiveTemperatureNetwork(
                data.features.shape[1],
                logits.shape[1],
                latent_dim=self.latent_dim,
                hidden_layer_sizes=hidden,
                temperature_hidden_sizes=temperature_hidden,
                confidence_inputs=bool(self.confidence_inputs),
            )
        global_ts = None
        if self.initial_temperature == "ts":
            global_ts = TemperatureScaling(classes=np.arange(logits.shape[1])).fit(
                logits[train_rows], y_index[train_rows], sample_weight=weights[train_rows]
            )
            network.start_at(global_ts.temperature_)
        if self.confidence_inputs:
            network.set_confidence_reference(
                data.logits[train_rows], 1.0 if global_ts is None else global_ts.temperature_
            )
        return _MemberStart(
            network, train_rows, validation_rows, global_ts, seed, logits, y_index, weights
        )

    def _member_config(self, seed, max_epochs):
        # The published optimiser: Adam (AdamW with weight_decay=0), constant rate, no
        # clipping; float32 throughout; the epoch of lowest validation NLL is kept.
        return training_config(
            self,
            (
                "batch_size",
                "learning_rate",
                "weight_decay",
                "n_iter_no_change",
                "device",
                "verbose",
            ),
            validation_fraction=0.0,
            optimizer="adamw",
            schedule="constant",
            warmup_epochs=0.0,
            grad_clip_norm=None,
            mixed_precision=False,
            selection_metric="nll",
            random_state=seed,
            max_epochs=max_epochs,
        )

    def _train_member(self, start: _MemberStart, data, max_epochs: int, index: int):
        """Member ``index`` trained with the shared loop for at most ``max_epochs``."""
        train_data = Subset(data, start.train_rows.tolist())
        validation_data = (
            Subset(data, start.validation_rows.tolist()) if len(start.validation_rows) else None
        )
        network = start.network
        try:
            with self._threads(network, int(self.batch_size)):
                result = fit_module(
                    network,
                    _adaptive_ts_loss if self.loss == "elbo" else _loss_from_terms(self.loss),
                    train_data,
                    config=self._member_config(start.seed, max_epochs),
                    validation_data=validation_data,
                    logits_fn=_output_logits,
                    chance_advice=_CHANCE_ADVICE,
                )
        except TrainingDivergedError as error:
            diverged = TrainingDivergedError(
                f"AdaptiveTS member {index + 1} of {self.n_members}: {error} The error's "
                f"module is that network with the last good weights, its members the {index} "
                "members trained before it; the estimator is left unfitted."
            )
            diverged.module, diverged.members = network, list(self.members_[:index])
            raise diverged from error
        return self._finish_member(start, result)

    def _fit_stacked(self, data, logits, y_index, weights, seeds, hidden, temperature_hidden):
        """Train every member at once as one stacked network (``member_training="batched"``)."""
        starts = [
            self._start_member(data, logits, y_index, weights, seed, hidden, temperature_hidden)
            for seed in seeds
        ]
        if self.verbose:
            print(f"AdaptiveTS: {self.n_members} members trained together", flush=True)
        try:
            results = fit_stacked(
                [start.network for start in starts],
                data,
                [(start.train_rows, start.validation_rows) for start in starts],
                seeds,
                config=self._member_config(None, self.max_epochs),
                loss_fn=stacked_elbo if self.loss == "elbo" else stacked_loss_from_terms(self.loss),
                chance_advice=_CHANCE_ADVICE,
                threads=self._threads,
                member_stopping=self.member_stopping,
            )
        except TrainingDivergedError as error:
            index = getattr(error, "member_index", 0)
            diverged = TrainingDivergedError(
                f"AdaptiveTS member {index + 1} of {self.n_members} (trained together with the "
                f"others): {error} The error's module is that network with the last good "
                "weights; no member finished, so its members are empty; the estimator is left "
                "unfitted."
            )
            diverged.module, diverged.members = error.module, []
            raise diverged from error
        self.members_ = [
            self._finish_member(start, result) for start, result in zip(starts, results)
        ]

    def _finish_member(self, start: _MemberStart, result) -> AdaptiveTSMember:
        """The trained member, after the fallback to the single temperature."""
        network, global_ts = start.network, start.global_ts
        logits, y_index, weights = start.logits, start.y_index, start.weights
        fell_back = False
        if global_ts is not None and len(start.validation_rows):
            # The starting point (one temperature) is a candidate of the selection too:
            # when no epoch beat its validation NLL, the per-sample part is dropped.
            validation_logits = logits[start.validation_rows]
            global_nll = F.cross_entropy(
                torch.as_tensor(global_ts.decision_function(validation_logits)),
                torch.as_tensor(y_index[start.validation_rows]),
            ).item()
            if not global_nll > result.best_score:
                # The choice is made; the single temperature now uses every row.
                refitted = TemperatureScaling(classes=np.arange(logits.shape[1])).fit(
                    logits, y_index, sample_weight=weights
                )
                network.start_at(refitted.temperature_)
                fell_back = True
        best_epoch = result.best_epoch if result.best_epoch else len(result.history)
        initial_temperature = None if global_ts is None else global_ts.temperature_
        return AdaptiveTSMember(
            network, result.history, best_epoch, initial_temperature, fell_back, start.seed
        )

    def _calibrated_logits(self, features, logits) -> np.ndarray:
        calibrated, _ = self._predict_batches(features, logits)
        _check_finite_calibration(calibrated)
        return calibrated

    # ------------------------------------------------------ export and saving
    def _torch_map(self) -> _AdaptiveTemperatureMap:
        if self.n_draws != 1:
            raise ValueError(
                f"AdaptiveTS(n_draws={self.n_draws}) averages random draws of the latent "
                "code at predict time, which a deterministic exported graph cannot reproduce; "
                "set n_draws=1 (the posterior mean) before to_torch()"
            )
        if self.backbone is not None:
            raise ValueError(
                "AdaptiveTS fitted with a backbone reads the backbone's pooled features, which "
                "to_torch() cannot reach; fit it on the features and logits (n_logits=K) instead"
            )
        networks = [copy.deepcopy(member.network).cpu().eval() for member in self.members_]
        n_features = 0 if self.n_logits is None else self.feature_mean_.shape[0]
        return _AdaptiveTemperatureMap(
            networks, self.feature_mean_, self.feature_scale_, n_features=n_features
        )

    def _network_config(self, network) -> dict:
        if not isinstance(network, _AdaptiveTemperatureNetwork):
            return super()._network_config(network)
        return network.config()

    def _rebuild_network(self, config: dict) -> _AdaptiveTemperatureNetwork:
        return _AdaptiveTemperatureNetwork.from_config(config)

    def _check_loaded_state(self) -> None:
        super()._check_loaded_state()
        if not hasattr(self, "classes_"):
            return
        from reliacal.persistence import (
            check_loaded_array,
            check_loaded_number,
            loaded_state_error,
        )

        mean = check_loaded_array(self, "feature_mean_", (None,))
        check_loaded_array(self, "feature_scale_", mean.shape, positive=True)
        check_loaded_number(self, "sampling_seed_", minimum=0, integer=True)
        members = getattr(self, "members_", None)
        if not isinstance(members, list) or not members:
            raise loaded_state_error(self, "members_", members, "a list of trained members")
        sizes = {"n_features": mean.shape[0], "n_classes": len(self.classes_)}
        for index, member in enumerate(members):
            network = getattr(member, "network", None)
            if not (
                isinstance(member, AdaptiveTSMember)
                and isinstance(network, _AdaptiveTemperatureNetwork)
                and all(network.config()[key] == size for key, size in sizes.items())
                and all(bool(torch.isfinite(p).all()) for p in network.state_dict().values())
            ):
                raise loaded_state_error(
                    self,
                    f"members_[{index}]",
                    member,
                    f"a member whose finite network reads {sizes['n_features']} features and "
                    f"{sizes['n_classes']} classes",
                )

    # --------------------------------------------------------------- public
    def temperature(self, X) -> np.ndarray:
        """Return the per-sample temperatures ``T(x)`` (float64, all > 0).

        With ``n_members > 1`` each is the geometric mean of the members'
        temperatures; with ``n_draws > 1``, of their mean temperatures over
        the sampled latent codes (the probabilities are then the average of
        all the members' sampled probabilities).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), Dataset or DataLoader
            Input in the form given to ``fit``.

        Returns
        -------
        ndarray of shape (n_samples,)
            ``T(x)`` of each sample; the calibrated logits are ``z / T(x)``
            (for ``n_draws=1``).

        Examples
        --------
        >>> from reliacal.calibrators import AdaptiveTS
        >>> from reliacal.datasets import make_logits
        >>> logits, y = make_logits(100, 2, scale=1.0, random_state=1)
        >>> model = AdaptiveTS(hidden_layer_sizes=(8,), temperature_hidden_sizes=(4,),
        ...                    max_epochs=2, random_state=0).fit(logits, y)
        >>> temperatures = model.temperature(logits)
        >>> temperatures.shape, bool((temperatures > 0).all())
        ((100,), True)
        """
        features, logits, _ = self._transform_inputs(X)
        _, temperatures = self._predict_batches(features, logits)
        return temperatures

    # -------------------------------------------------------------- helpers
    def _standardised(self, features: np.ndarray, bounded: bool = False) -> torch.Tensor:
        """Standardised float32 features; ``bounded`` holds them in ``feature_bounds_``."""
        standardised = (np.asarray(features, dtype=np.float64) - self.feature_mean_) / (
            self.feature_scale_
        )
        # Fits saved before the bounds existed have none: their networks read as they did.
        bounds = getattr(self, "feature_bounds_", None) if bounded else None
        if bounds is not None:
            # In float64, before the cast: logits near 1e300 would be inf in float32.
            standardised = np.clip(standardised, bounds[0], bounds[1])
        return torch.as_tensor(standardised, dtype=torch.float32)

    def _predict_batches(self, features, logits) -> tuple[np.ndarray, np.ndarray]:
        """Calibrated logits (log of the averaged probabilities when sampling) and T."""
        features = logits if features is None else features
        if features.shape[1] != self.feature_mean_.shape[0]:
            raise ValueError(
                f"the features have {features.shape[1]} columns, but AdaptiveTS was fitted "
                f"with {self.feature_mean_.shape[0]}"
            )
        device = resolve_device(self.device)
        networks = [member.network for member in self.members_]
        if device.type != "cpu":  # the fitted networks stay on the CPU, for pickling
            networks = [copy.deepcopy(network) for network in networks]
        networks = [network.to(device).eval() for network in networks]
        generator = torch.Generator(device=device).manual_seed(self.sampling_seed_)
        # The networks read inputs held within the calibration data's widened range; the
        # temperature divides the logits as given.
        h_all = self._standardised(features, bounded=True)
        z_all = _as_tensor(logits, torch.float64)
        head_z_all = z_all
        logit_bounds = getattr(self, "logit_bounds_", None)
        if logit_bounds is not None:
            head_z_all = z_all.clamp(
                torch.as_tensor(logit_bounds[0]), torch.as_tensor(logit_bounds[1])
            )
        calibrated, temperatures = [], []
        threads = self._threads(networks[0], min(len(z_all), _INFERENCE_ROWS))
        with threads, torch.no_grad():
            for start in range(0, len(z_all), _INFERENCE_ROWS):
                rows = slice(start, start + _INFERENCE_ROWS)
                h, z, head_z = (values[rows].to(device) for values in (h_all, z_all, head_z_all))
                if self.n_draws == 1:
                    temperature = _geometric_mean(
                        [
                            network.temperature_of(network.posterior(h)[0], head_z).double()
                            for network in networks
                        ]
                    )
                    calibrated.append((z / temperature[:, None]).cpu())
                else:
                    sampled = [
                        network.sampled_probabilities(
                            h, z, int(self.n_draws), generator, head_logits=head_z
                        )
                        for network in networks
                    ]
                    probabilities = torch.stack([p for p, _ in sampled]).mean(dim=0)
                    temperature = _geometric_mean([t.double() for _, t in sampled])
                    calibrated.append(probabilities.clamp_min(1e-300).log().cpu())
                temperatures.append(temperature.cpu())
        return torch.cat(calibrated).numpy(), torch.cat(temperatures).numpy()

    def _expected_failed_checks(self) -> dict[str, str]:
        return {
            **super()._expected_failed_checks(),
            "check_classifiers_one_label": (
                "a sample-dependent temperature keeps the argmax of the logits, so it cannot "
                "learn to predict the single class seen in fit"
            ),
            "check_sample_weight_equivalence_on_dense_data": (
                "weights scale each sample's loss in stochastic mini-batch training; a fit "
                "with repeated rows sees other batches and another validation split, so it "
                "is not bit-equivalent (unit weights do give the unweighted fit exactly)"
            ),
        }
