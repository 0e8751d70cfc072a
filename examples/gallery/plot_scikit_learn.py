"""
Calibrating a scikit-learn classifier
=====================================

A Gaussian naive Bayes classifier assumes its features independent; on
redundant features it counts the same evidence several times and is pushed to
probabilities near 0 and 1. Wrapped in :class:`~reliacal.CalibratedClassifier`,
its logits are calibrated out of fold (5-fold cross-fitting, as scikit-learn's
``CalibratedClassifierCV``). The data is synthetic (scikit-learn's
``make_classification``: 2 informative features and 10 linear combinations of
them), so nothing is downloaded.
"""

from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from sklearn.naive_bayes import GaussianNB

from reliacal import CalibratedClassifier
from reliacal.metrics import calibration_report
from reliacal.plot import plot_reliability_diagrams

X, y = make_classification(
    n_samples=8000, n_features=20, n_informative=2, n_redundant=10, random_state=42
)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.5, random_state=0)

bayes = GaussianNB().fit(X_train, y_train)
calibrated = {
    method: CalibratedClassifier(GaussianNB(), method=method).fit(X_train, y_train)
    for method in ("temperature", "platt", "isotonic")
}

predictions = {"naive Bayes": bayes.predict_proba(X_test)}
predictions.update(
    {f"+ {method}": model.predict_proba(X_test) for method, model in calibrated.items()}
)
print(calibration_report(y_test, predictions)[["accuracy", "ece", "nll", "brier"]])

# %%
# Each panel is one model on the same test half: the bars are the accuracy of
# each confidence bin, the diagonal is perfect calibration, and the histogram
# below counts the rows per bin. The uncalibrated classifier puts most rows in
# the last bin, with an accuracy well below its confidence; after calibration
# the confidence is spread over the bins and the bars follow the diagonal.
plot_reliability_diagrams(y_test, predictions)
