"""CORP decomposition, KS error, Spiegelhalter's test, sweep ECE and signed errors."""

import numpy as np
import pytest
from scipy.stats import norm
from sklearn.isotonic import IsotonicRegression

from reliacal.metrics import (
    brier_score,
    corp_reliability,
    expected_calibration_error,
    ks_calibration_error,
    monotonic_sweep_calibration_error,
    negative_log_likelihood,
    overconfidence_error,
    score_decomposition,
    signed_calibration_error,
    softmax,
    spiegelhalter_test,
    underconfidence_error,
)
from reliacal.metrics._decomposition import pool_adjacent_violators
from reliacal.metrics._sweep import sweep_n_bins


def _binary(n_samples, seed, ties=False):
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.01, 0.99, size=n_samples)
    if ties:
        p = np.round(p, 1)
    y = (rng.uniform(size=n_samples) < p**1.5).astype(int)  # miscalibrated
    return y, p


def _multiclass(n_samples, seed, n_classes=4):
    rng = np.random.default_rng(seed)
    probs = softmax(np.round(rng.normal(size=(n_samples, n_classes)) * 3, 1))
    return rng.integers(0, n_classes, n_samples), probs


def _isotonic_oracle(confidence, outcome):
    """scikit-learn's isotonic regression of the outcome, at every sample."""
    model = IsotonicRegression(out_of_bounds="clip").fit(confidence, outcome)
    return model.predict(confidence)


# --- CORP -----------------------------------------------------------------------


@pytest.mark.parametrize("ties", [False, True])
def test_corp_fit_equals_scikit_learn_positive(ties):
    y, p = _binary(3000, 0, ties=ties)
    curve = corp_reliability(y, p, mode="positive")
    np.testing.assert_array_equal(curve.confidence, np.unique(p))
    assert curve.counts.sum() == 3000
    expected = _isotonic_oracle(p, y)
    fitted = curve.calibrated[np.searchsorted(curve.confidence, p)]
    np.testing.assert_allclose(fitted, expected, rtol=0, atol=1e-12)
    assert np.all(np.diff(curve.calibrated) >= 0)


def test_corp_fit_equals_scikit_learn_top_label_on_a_cifar_record(load_record):
    probs, labels = load_record("lenet-5-cifar-10")
    curve = corp_reliability(labels, probs)
    confidence = probs.max(axis=1).astype(np.float64)
    correct = (probs.argmax(axis=1) == labels).astype(np.float64)
    expected = _isotonic_oracle(confidence, correct)
    fitted = curve.calibrated[np.searchsorted(curve.confidence, confidence)]
    np.testing.assert_allclose(fitted, expected, rtol=0, atol=1e-12)


def test_pool_adjacent_violators_by_hand():
    # 3, 1 violate: pooled to 2 (weights 1, 1); then 2 >= 2 is pooled with the
    # next 2 (the fit is the same), and 0.5 with weight 2 pulls all of it down:
    # (3 + 1 + 2 + 2 * 0.5) / 5 = 1.4.
    values = np.array([0.0, 3.0, 1.0, 2.0, 0.5, 4.0])
    weights = np.array([1.0, 1.0, 1.0, 1.0, 2.0, 1.0])
    np.testing.assert_allclose(
        pool_adjacent_violators(values, weights), [0.0, 1.4, 1.4, 1.4, 1.4, 4.0]
    )


@pytest.mark.parametrize("score", ["brier", "log"])
@pytest.mark.parametrize("mode", ["positive", "top-label"])
def test_decomposition_identity(score, mode):
    y, p = _binary(5000, 1, ties=True)
    parts = score_decomposition(y, p, score=score, mode=mode)
    reconstructed = parts.miscalibration - parts.discrimination + parts.uncertainty
    assert abs(parts.score - reconstructed) <= 1e-12
    assert parts.miscalibration >= 0
    assert parts.discrimination >= 0


@pytest.mark.parametrize("score", ["brier", "log"])
def test_decomposition_identity_multiclass_top_label(score):
    y, probs = _multiclass(4000, 2)
    parts = score_decomposition(y, probs, score=score)
    reconstructed = parts.miscalibration - parts.discrimination + parts.uncertainty
    assert abs(parts.score - reconstructed) <= 1e-12
    assert parts.miscalibration >= 0 and parts.discrimination >= 0


def test_decomposition_scores_are_the_binary_scores():
    y, p = _binary(2000, 3)
    brier = score_decomposition(y, p, score="brier", mode="positive")
    log = score_decomposition(y, p, score="log", mode="positive")
    assert brier.score == pytest.approx(brier_score(y, p), abs=1e-14)
    assert log.score == pytest.approx(negative_log_likelihood(y, p), abs=1e-14)
    base_rate = y.mean()
    assert brier.uncertainty == pytest.approx(base_rate * (1 - base_rate), abs=1e-14)
    entropy = -(base_rate * np.log(base_rate) + (1 - base_rate) * np.log(1 - base_rate))
    assert log.uncertainty == pytest.approx(entropy, abs=1e-14)
    # Brier DSC: the spread of the recalibrated forecasts around the base rate.
    recalibrated = _isotonic_oracle(p, y)
    assert brier.discrimination == pytest.approx(
        np.mean((recalibrated - base_rate) ** 2), abs=1e-12
    )


def test_decomposition_by_hand():
    # Two forecast values whose outcome frequencies equal them: calibrated, MCB = 0.
    p = np.array([0.25] * 4 + [0.75] * 4)
    y = np.array([1, 0, 0, 0, 1, 1, 1, 0])
    parts = score_decomposition(y, p, mode="positive")
    assert parts.miscalibration == 0
    assert parts.uncertainty == 0.25
    assert parts.discrimination == pytest.approx(0.0625, abs=1e-15)  # (0.25)^2
    # Each group scores (0.75^2 + 3 * 0.25^2) / 4 = 0.1875 = 0 - 0.0625 + 0.25.
    assert parts.score == pytest.approx(0.1875, abs=1e-15)


def test_decomposition_log_score_with_pure_blocks_is_finite():
    # Outcomes separated by the forecast: the recalibration is 0 then 1, scoring 0.
    parts = score_decomposition([0, 0, 1, 1], [0.2, 0.3, 0.6, 0.9], score="log", mode="positive")
    assert parts.discrimination == pytest.approx(parts.uncertainty)
    assert parts.uncertainty == pytest.approx(np.log(2))
    assert parts.miscalibration == pytest.approx(parts.score)


def test_decomposition_bad_input():
    with pytest.raises(ValueError, match="score must be one of 'brier', 'log'"):
        score_decomposition([0, 1], [0.2, 0.7], score="crps")
    with pytest.raises(ValueError, match="mode must be one of"):
        corp_reliability([0, 1], [0.2, 0.7], mode="classwise")
    with pytest.raises(ValueError, match="NaN"):
        corp_reliability([0, 1], [0.2, np.nan])


# --- KS calibration error ----------------------------------------------------------


def test_ks_by_hand():
    # Cumulative (x - o) / 3 after each sample: 0.2/3, -0.2/3, -0.3/3.
    assert ks_calibration_error([0, 1, 1], [0.2, 0.6, 0.9], mode="positive") == pytest.approx(0.1)
    # Over-confident by 0.4 everywhere: the curves drift apart to 0.4.
    assert ks_calibration_error([0, 0, 0, 0], [0.4] * 4, mode="positive") == pytest.approx(0.4)
    # Top-label, two classes: confidences 0.9 (right), 0.7 (wrong), 0.6 (right).
    # Sorted by confidence: 0.6 (o=1), 0.7 (o=0), 0.9 (o=1): cumulative
    # (-0.4)/3, (0.3)/3, (0.2)/3 -> max |.| = 0.4 / 3.
    probs = [[0.9, 0.1], [0.3, 0.7], [0.6, 0.4]]
    assert ks_calibration_error([0, 0, 0], probs) == pytest.approx(0.4 / 3, abs=1e-15)


def test_ks_ties_do_not_depend_on_order():
    # A tie between a hit and a miss: evaluated after both, the difference is 0.
    assert ks_calibration_error([1, 0], [0.5, 0.5], mode="positive") == 0
    assert ks_calibration_error([0, 1], [0.5, 0.5], mode="positive") == 0
    y, p = _binary(500, 4, ties=True)
    order = np.random.default_rng(0).permutation(500)
    # Equal up to the rounding of the cumulative sum, which follows the sample order.
    assert ks_calibration_error(y, p, mode="positive") == pytest.approx(
        ks_calibration_error(y[order], p[order], mode="positive"), abs=1e-14
    )


def test_ks_bad_input():
    with pytest.raises(ValueError, match="outside"):
        ks_calibration_error([0, 1], [0.2, 1.7])


# --- Spiegelhalter ---------------------------------------------------------------


def test_spiegelhalter_by_hand():
    # Numerator (0 - 0.2)(0.6) + (1 - 0.7)(-0.4) = -0.24;
    # variance 0.6^2 * 0.16 + 0.4^2 * 0.21 = 0.0912.
    result = spiegelhalter_test([0, 1], [0.2, 0.7], mode="positive")
    z = -0.24 / np.sqrt(0.0912)
    assert result.statistic == pytest.approx(z, abs=1e-14)
    assert result.pvalue == pytest.approx(2 * norm.sf(abs(z)), abs=1e-14)


def test_spiegelhalter_top_label_and_pvalue_oracle():
    # Top-label confidences 0.9, 0.8 with outcomes right, wrong:
    # numerator (1 - 0.9)(-0.8) + (0 - 0.8)(-0.6) = 0.4;
    # variance 0.64 * 0.09 + 0.36 * 0.16 = 0.1152.
    result = spiegelhalter_test([0, 0], [[0.9, 0.1], [0.2, 0.8]])
    z = 0.4 / np.sqrt(0.1152)
    assert result.statistic == pytest.approx(z, abs=1e-14)
    assert result.pvalue == pytest.approx(2 * norm.sf(z), abs=1e-14)


def test_spiegelhalter_detects_miscalibration():
    # Over-confident: the true probability is halfway between p and 1/2, so every
    # term (o - p)(1 - 2p) is positive in expectation.
    rng = np.random.default_rng(5)
    p = rng.uniform(size=5000)
    y = (rng.uniform(size=5000) < 0.5 + (p - 0.5) / 2).astype(int)
    result = spiegelhalter_test(y, p, mode="positive")
    assert result.statistic > 0 and result.pvalue < 1e-6
    q = rng.uniform(size=5000)
    calibrated = (rng.uniform(size=5000) < q).astype(int)
    assert spiegelhalter_test(calibrated, q, mode="positive").pvalue > 0.01


def test_spiegelhalter_undefined():
    with pytest.raises(ValueError, match="every forecast is 0, 0.5 or 1"):
        spiegelhalter_test([0, 1], [0.5, 1.0], mode="positive")


# --- Monotonic sweep ---------------------------------------------------------------


def test_sweep_by_hand():
    # Outcomes sorted by confidence: 0 1 0 1 1 1. Equal-mass accuracies:
    # 2 bins (1/3, 1); 3 bins (1/2, 1/2, 1); 4 bins (1/2, 1/2, 1, 1);
    # 5 bins (1/2, 0, 1, 1, 1) decreases: b* = 4.
    p = [0.1, 0.2, 0.3, 0.4, 0.6, 0.7]
    y = [0, 1, 0, 1, 1, 1]
    error, n_bins = monotonic_sweep_calibration_error(y, p, mode="positive", return_n_bins=True)
    assert n_bins == 4
    # Gaps |0.5 - 0.15|, |0.5 - 0.35|, |1 - 0.6|, |1 - 0.7| with weights 2, 2, 1, 1 (/6).
    assert error == pytest.approx((0.7 + 0.3 + 0.4 + 0.3) / 6, abs=1e-15)
    rms = monotonic_sweep_calibration_error(y, p, mode="positive", norm="l2")
    assert rms == pytest.approx(np.sqrt((2 * 0.35**2 + 2 * 0.15**2 + 0.4**2 + 0.3**2) / 6))


def test_sweep_stops_at_the_first_violation():
    # Two bins already decrease (1, 0), though more bins would not all be checked.
    error, n_bins = monotonic_sweep_calibration_error(
        [1, 1, 0, 0], [0.1, 0.2, 0.3, 0.4], mode="positive", return_n_bins=True
    )
    assert n_bins == 1
    assert error == pytest.approx(0.25)  # |0.5 - 0.25|


def test_sweep_separated_outcomes_use_one_bin_per_sample():
    error, n_bins = monotonic_sweep_calibration_error(
        [0, 0, 1, 1], [0.1, 0.2, 0.3, 0.4], mode="positive", return_n_bins=True
    )
    assert n_bins == 4
    assert error == pytest.approx((0.1 + 0.2 + 0.7 + 0.6) / 4)


def test_sweep_ties_are_ordered_by_outcome():
    # Equal confidences: the miss goes first, so 2 bins read (0, 1), monotone.
    _, n_bins = monotonic_sweep_calibration_error(
        [1, 0], [0.5, 0.5], mode="positive", return_n_bins=True
    )
    assert n_bins == 2


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sweep_equals_quantile_ece_at_its_bin_count(seed):
    y, probs = _multiclass(3000, seed)
    error, n_bins = monotonic_sweep_calibration_error(y, probs, return_n_bins=True)
    assert 1 <= n_bins < 3000
    assert error == pytest.approx(
        expected_calibration_error(y, probs, n_bins=n_bins, strategy="quantile"), abs=1e-12
    )
    # Independent check of the rule: b* bins are monotone, b* + 1 bins are not.
    confidence = probs.max(axis=1)
    outcome = probs.argmax(axis=1) == y
    order = np.lexsort((outcome, confidence))
    for count, monotone in ((n_bins, True), (n_bins + 1, False)):
        accuracy = [group.mean() for group in np.array_split(outcome[order], count)]
        assert bool(np.all(np.diff(accuracy) >= 0)) is monotone


def _sweep_by_brute_force(outcome):
    """The largest b whose every count b' <= b has non-decreasing array_split means."""
    n_bins = 1
    for count in range(2, outcome.shape[0] + 1):
        means = [group.mean() for group in np.array_split(outcome.astype(float), count)]
        if np.any(np.diff(means) < 0):
            break
        n_bins = count
    return n_bins


@pytest.mark.parametrize("flip", [0.0, 0.02, 0.05, 0.2, 0.5])
def test_sweep_bin_count_equals_brute_force(flip):
    # Sorted-by-confidence outcomes with more or fewer out-of-order flags: bin counts
    # from 1 to every sample, below and above the counts read by counting positives.
    rng = np.random.default_rng(int(flip * 100))
    for size in (5, 40, 300):
        outcome = np.arange(size) >= size // 3
        outcome ^= rng.random(size) < flip
        n_bins = sweep_n_bins(outcome)
        assert n_bins == _sweep_by_brute_force(outcome)
        assert n_bins == sweep_n_bins(outcome.astype(np.float64))


def test_sweep_bin_count_past_the_counted_ones_equals_brute_force():
    # One miss just after the hits begin: only bins of a sample or two see it decrease.
    outcome = np.arange(300) >= 150
    outcome[153] = False
    n_bins = sweep_n_bins(outcome)
    assert n_bins > 8
    assert n_bins == _sweep_by_brute_force(outcome)


def test_sweep_bad_input():
    with pytest.raises(ValueError, match="norm must be one of 'l1', 'l2'"):
        monotonic_sweep_calibration_error([0, 1], [0.2, 0.7], norm="max")


# --- Signed over/under-confidence --------------------------------------------------


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
@pytest.mark.parametrize("n_bins", [1, 5, 15])
def test_over_and_under_confidence_split_the_ece(strategy, n_bins):
    y, probs = _multiclass(2000, 7)
    over = overconfidence_error(y, probs, n_bins=n_bins, strategy=strategy)
    under = underconfidence_error(y, probs, n_bins=n_bins, strategy=strategy)
    ece = expected_calibration_error(y, probs, n_bins=n_bins, strategy=strategy)
    assert over + under == pytest.approx(ece, abs=1e-12)
    signed = probs.max(axis=1).mean() - (probs.argmax(axis=1) == y).mean()
    assert over - under == pytest.approx(signed, abs=1e-12)
    assert signed_calibration_error(y, probs) == pytest.approx(signed, abs=1e-12)


def test_signed_by_hand():
    # Bins (0.8, 1]: 0.9 right -> under 0.1; (0.6, 0.8]: 0.8 wrong, 0.7 right ->
    # confidence 0.75, accuracy 0.5, over 0.25; (0.4, 0.6]: 0.6 right -> under 0.4.
    probs = [[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]]
    y = [0, 1, 1, 0]
    assert overconfidence_error(y, probs, n_bins=5) == pytest.approx(0.5 * 0.25)
    assert underconfidence_error(y, probs, n_bins=5) == pytest.approx(0.25 * 0.1 + 0.25 * 0.4)
    assert signed_calibration_error([0, 0], [0.9, 0.6], mode="positive") == pytest.approx(0.75)


def test_signed_bad_input():
    with pytest.raises(ValueError, match="strategy must be one of"):
        overconfidence_error([0, 1], [0.2, 0.7], strategy="equal")
    with pytest.raises(ValueError, match="n_bins must be an integer >= 1"):
        underconfidence_error([0, 1], [0.2, 0.7], n_bins=0)
