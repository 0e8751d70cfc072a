"""CalAttn and DIRECTOR at the papers' scale: timm vision transformers on CIFAR / ImageNet.

The two seed methods report results on pre-trained ViT-B/16, DeiT-S and
Swin-S fine-tuned on CIFAR-10/100 and ImageNet; this script runs their
protocols with the library's public estimators, on a GPU, from files on
local disk, and prints the papers' published numbers (as recorded in the
project's ``docs/methods.md``) beside ours.

- ``--protocol calattn`` (Liang et al., arXiv 2508.08547): plain fine-tuning
  and CalAttn, each with the same base loss (``--loss``: ``ce+0.1brier``, the
  paper's headline, ``wd`` for CE alone, ``focal``), SGD with Nesterov
  momentum 0.9, lr 0.1, weight decay 5e-4, 350 epochs with the rate x0.1 at
  epochs 150 and 250, gradient clipping at norm 5, batch 64, label smoothing
  0.1 on CIFAR-100 for the CE losses, 5% of the training split held out,
  random crop and flip in training; each is reported before and after
  temperature scaling fitted on the held-out 5%.
- ``--protocol director`` (Dao et al., arXiv 2602.08920): a teacher (the
  plain fine-tuned model; ``--teacher-weights`` skips its fine-tuning) is
  reconfigured into the paper's compressing student (``anchor="none"``,
  every block replaced, a 4-block shared transition at ViT-B scale), AdamW
  lr 1e-3, weight decay 5e-5, 5 warm-up epochs then cosine, EMA 0.995, loss
  weights (0.5, 0, 0.5), best validation accuracy kept; accuracy, ECE, NLL
  from one sampled path (the paper's protocol) and from 10, OOD detection
  from 10.

Both report accuracy, 15-bin ECE, NLL, Brier, OOD AUROC against SVHN's test
split (1 - max probability; DIRECTOR also mutual information), and accuracy
and ECE on CIFAR-10-C / CIFAR-100-C (mean over the corruption files present
and the five severities), each when its files are present.

Nothing is ever downloaded: torchvision data sets are opened with
``download=False`` and the timm weights are read from ``--weights``; a
missing file stops the run with a message naming what to put where::

    DATA_DIR/cifar-10-batches-py/         CIFAR-10 (cifar-10-python.tar.gz, extracted)
    DATA_DIR/cifar-100-python/            CIFAR-100 (cifar-100-python.tar.gz, extracted)
    DATA_DIR/imagenet/{train,val}/<wnid>/ ImageNet as class folders
    DATA_DIR/svhn/test_32x32.mat          SVHN test split (OOD, optional)
    DATA_DIR/CIFAR-10-C/*.npy             CIFAR-10-C (shift, optional; also CIFAR-100-C)

Run from the repository root, on a CUDA machine (mixed precision is on by
default there; ``torchrun --nproc_per_node N`` trains with DDP, the batch
size then split over the processes)::

    python benchmarks/paper_scale.py --protocol calattn --model deit_small_patch16_224 \\
        --weights deit_small.safetensors --dataset cifar100 --data-dir /data \\
        --checkpoint-dir runs/c100-deits
    python benchmarks/paper_scale.py --protocol director --model vit_base_patch16_224 \\
        --weights vit_base.safetensors --dataset cifar10 --data-dir /data --budget
    python benchmarks/paper_scale.py --stand-in          # tiny, on the CPU, no files needed

``--checkpoint-dir`` makes every fit resumable: rerun the same command after an
interruption and each fit continues from its last epoch (a finished one
returns at once). ``--budget`` runs a short version (a subset of each split,
a few epochs, milestones and warm-up scaled alike) sized for a 15-minute GPU
slot. ``--stand-in`` builds a tiny ``pretrained=False`` timm ViT, writes
generated images as an ImageFolder (and CIFAR-10-C-style arrays) in a
temporary folder, and runs both protocols through the same code on the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

# Never reach a model hub: the weights come from --weights only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import roc_auc_score
from torch.utils.data import Dataset, Subset

from reliacal.finetune import CalAttnFinetuner, DiffusionReconfigurer
from reliacal.metrics import (
    accuracy,
    brier_score,
    expected_calibration_error,
    negative_log_likelihood,
)

# The published figures, as docs/methods.md records them (ECE in %, 15 bins).
# CalAttn: (dataset, model, loss) -> {"baseline": (before TS, after TS), "calattn": (...)};
# None where the paper gives no figure.
PUBLISHED_CALATTN = {
    (dataset, model, loss): {"baseline": baseline, "calattn": calattn}
    for dataset, model, loss, baseline, calattn in [
        ("cifar100", "deit_small_patch16_224", "ce+0.1brier", (5.46, 3.86), (2.88, 0.86)),
        ("cifar100", "deit_small_patch16_224", "focal", (3.27, 3.27), (3.15, 3.15)),
        ("cifar100", "vit_base_patch16_224", "wd", (13.11, 3.30), (8.25, 1.85)),
        ("cifar10", "vit_base_patch16_224", "ce+0.1brier", (3.98, 3.41), (1.56, 1.21)),
        ("cifar10", "vit_base_patch16_224", "focal", (8.70, None), (10.04, None)),
    ]
}
# The authors' own CIFAR-10 ViT-B CalAttn run (their SGD recipe): top-1 and ECE, %.
PUBLISHED_CALATTN_RUN = {("cifar10", "vit_base_patch16_224"): {"accuracy": 76.1, "ece": 1.37}}
# DIRECTOR: (dataset, model) -> teacher and student figures.
PUBLISHED_DIRECTOR = {  # (dataset, model) -> the published figures of each model
    ("cifar10", "vit_base_patch16_224"): {
        "teacher": {"parameters": 86e6, "ece": 18.02},
        "student": {"parameters": 50e6, "ece": 1.61, "accuracy": 97.17},
    }
}
LOSSES = {  # --loss -> CalAttnFinetuner's base loss and Brier weight
    "ce+0.1brier": {"base_loss": "ce", "lambda_brier": 0.1},
    "wd": {"base_loss": "ce", "lambda_brier": 0.0},
    "focal": {"base_loss": "focal", "lambda_brier": 0.0},
}
DATA_LAYOUT = {
    "cifar10": "DATA_DIR/cifar-10-batches-py/ (cifar-10-python.tar.gz from "
    "https://www.cs.toronto.edu/~kriz/cifar.html, extracted into DATA_DIR)",
    "cifar100": "DATA_DIR/cifar-100-python/ (cifar-100-python.tar.gz, extracted into DATA_DIR)",
    "imagenet": "DATA_DIR/imagenet/train/<wnid>/*.JPEG and DATA_DIR/imagenet/val/<wnid>/*.JPEG",
    "imagefolder": "DATA_DIR/train/<class>/* and DATA_DIR/test/<class>/*",
    "svhn": "DATA_DIR/svhn/test_32x32.mat (http://ufldl.stanford.edu/housenumbers/)",
    "cifar-c": "DATA_DIR/CIFAR-10-C/<corruption>.npy and labels.npy (Hendrycks and "
    "Dietterich; CIFAR-100-C likewise)",
}
# What the authors' public code does that this harness does not repeat (docs/methods.md).
DEVIATIONS = {
    "calattn": [
        "validation (checkpoint selection and temperature) on the held-out 5% WITHOUT "
        "training augmentation (the authors' code augments it);",
        "one backbone pass per step: the head reads the tokens of the pass that gives the "
        "logits (the authors' code runs the backbone twice);",
        "Swin: the head reads timm's pooled pre-logits (the authors' CLS indexing breaks "
        "on the (B, H, W, C) output of current timm);",
        "the base loss is a parameter (the authors hard-wire CE + 0.1 Brier into CalAttn); "
        "baseline and CalAttn here share it;",
        "temperature scaling minimises the held-out NLL exactly (the authors grid-search "
        "T in 0.1..10 by ECE);",
    ],
    "director": [
        "states are the plain block boundaries (the authors use the residual stream after "
        "each block's attention half);",
        "validation and selection use the held-out split without augmentation, and no "
        "augmentation in the student's training;",
    ],
}
CORRUPTION_FILES = "CIFAR-10-C", "CIFAR-100-C"


# Data ------------------------------------------------------------------------------------------


class MissingData(SystemExit):
    """A required file is absent: the message says what to put where."""


class ArrayImages(Dataset):
    """uint8 images ``(n, H, W, 3)`` with labels, resized and normalised per item."""

    def __init__(self, images: np.ndarray, labels, size: int, mean, std):
        self.images, self.labels = images, np.asarray(labels, dtype=np.int64)
        self.size = size
        self.mean = torch.tensor(mean, dtype=torch.float32)[:, None, None]
        self.std = torch.tensor(std, dtype=torch.float32)[:, None, None]

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        # A copy: the arrays may be read-only memory maps (CIFAR-10-C).
        image = torch.from_numpy(np.array(self.images[index])).permute(2, 0, 1)
        image = image.float().div_(255)
        if image.shape[-1] != self.size:
            image = F.interpolate(
                image[None], size=(self.size, self.size), mode="bilinear", align_corners=False
            )[0]
        return (image - self.mean) / self.std, int(self.labels[index])


def folder_images(root: Path, size: int, mean, std, crop: bool):
    """An ImageFolder, resized (and centre-cropped, ImageNet style) and normalised."""
    from torchvision import datasets, transforms

    resize = [transforms.Resize(int(round(size / 0.875))), transforms.CenterCrop(size)]
    steps = (resize if crop else [transforms.Resize((size, size))]) + [
        transforms.ToTensor(),
        transforms.Normalize(mean, std),
    ]
    return datasets.ImageFolder(str(root), transform=transforms.Compose(steps))


def labels_of(dataset: Dataset) -> np.ndarray:
    if isinstance(dataset, Subset):
        return labels_of(dataset.dataset)[np.asarray(dataset.indices)]
    if isinstance(dataset, ArrayImages):
        return dataset.labels
    return np.asarray(dataset.targets, dtype=np.int64)  # ImageFolder


def load_split(name: str, data_dir: Path, train: bool, size: int, mean, std):
    """The training or test split of ``name``; fails naming the files it needs."""
    from torchvision import datasets

    try:
        if name in ("cifar10", "cifar100"):
            cls = datasets.CIFAR10 if name == "cifar10" else datasets.CIFAR100
            raw = cls(root=str(data_dir), train=train, download=False)
            return ArrayImages(raw.data, raw.targets, size, mean, std)
        if name in ("imagenet", "imagefolder"):
            root = data_dir / "imagenet" if name == "imagenet" else data_dir
            part = "train" if train else ("val" if name == "imagenet" else "test")
            return folder_images(root / part, size, mean, std, crop=name == "imagenet")
    except (RuntimeError, FileNotFoundError) as error:
        raise MissingData(
            f"{name} is not in --data-dir {data_dir} ({error}). Put it there as "
            f"{DATA_LAYOUT[name]}; this script never downloads."
        ) from None
    raise ValueError(f"unknown dataset {name!r}")


def load_ood(data_dir: Path, size: int, mean, std, log, folder: Path | None = None):
    """SVHN's test split (or the ImageFolder ``folder``), or None when absent (with a note)."""
    from torchvision import datasets

    if folder is not None:
        return folder_images(folder, size, mean, std, crop=False)
    try:
        raw = datasets.SVHN(root=str(data_dir / "svhn"), split="test", download=False)
    except (RuntimeError, FileNotFoundError):
        log(f"note: OOD skipped, no SVHN: put {DATA_LAYOUT['svhn']}")
        return None
    return ArrayImages(raw.data.transpose(0, 2, 3, 1), raw.labels, size, mean, std)


def load_corruptions(dataset: str, data_dir: Path, size: int, mean, std, log, names=None):
    """``{(corruption, severity): ArrayImages}`` from CIFAR-10-C / -100-C, or {} when absent."""
    if dataset not in ("cifar10", "cifar100", "imagefolder"):
        return {}  # ImageNet-C is not read here
    folder = data_dir / CORRUPTION_FILES[dataset == "cifar100"]
    if not folder.is_dir():
        log(f"note: covariate shift skipped, no {folder}: put {DATA_LAYOUT['cifar-c']}")
        return {}
    labels = np.load(folder / "labels.npy")
    files = sorted(p for p in folder.glob("*.npy") if p.stem != "labels")
    if names:
        files = [p for p in files if p.stem in names]
    sets = {}
    for path in files:
        images = np.load(path, mmap_mode="r")
        per_severity = len(images) // 5
        for severity in range(1, 6):
            rows = slice((severity - 1) * per_severity, severity * per_severity)
            sets[path.stem, severity] = ArrayImages(images[rows], labels[rows], size, mean, std)
    return sets


def subset(dataset: Dataset, n: int | None, seed: int) -> Dataset:
    """A seeded random subset of ``n`` items (the whole set when ``n`` is None or larger)."""
    if n is None or n >= len(dataset):
        return dataset
    index = np.sort(np.random.default_rng(seed).choice(len(dataset), n, replace=False))
    return Subset(dataset, index.tolist())


class RandomCropFlip:
    """Training augmentation on the device: random crop after reflect padding, and flip.

    The CIFAR recipe (pad 4 of 32 pixels, crop, horizontal flip with p = 0.5),
    with the padding scaled to the input size. It draws from torch's global
    generator, which the estimator's ``random_state`` seeds during ``fit``. A
    class, so that the estimator can be cloned and pickled.
    """

    def __init__(self, padding_fraction: float = 0.125):
        self.padding_fraction = padding_fraction

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        n, _, height, width = x.shape
        pad = max(1, int(round(self.padding_fraction * height)))
        padded = F.pad(x, (pad, pad, pad, pad), mode="reflect")
        top = torch.randint(0, 2 * pad + 1, (n,)).tolist()
        left = torch.randint(0, 2 * pad + 1, (n,)).tolist()
        crops = torch.stack(
            [padded[i, :, t : t + height, s : s + width] for i, (t, s) in enumerate(zip(top, left))]
        )
        flip = torch.rand(n, device=x.device) < 0.5
        return torch.where(flip[:, None, None, None], crops.flip(-1), crops)


# Models ----------------------------------------------------------------------------------------


def make_model(name: str, weights: Path | None, num_classes: int, **overrides):
    """A timm model with its weights read from a local file (never from a hub).

    The classifier is new (``num_classes`` outputs) unless the file's has that
    shape; the model family's own checkpoint filter (position-embedding
    resampling, ...) adapts the rest. Any missing weight other than the
    classifier's is an error.
    """
    import timm

    model = timm.create_model(name, pretrained=False, num_classes=num_classes, **overrides)
    if weights is None:
        return model
    weights = Path(weights)
    if not weights.is_file():
        raise MissingData(
            f"--weights {weights} is not a file: download the timm checkpoint of {name} "
            "(a .safetensors, .pth or .bin state dict) on a machine with network and copy it "
            "here; this script never downloads."
        )
    state = timm.models.load_state_dict(str(weights))
    family = sys.modules[type(model).__module__]
    if hasattr(family, "checkpoint_filter_fn"):
        state = family.checkpoint_filter_fn(state, model)
    own = model.state_dict()
    head = {key for key in own if key.startswith(_classifier_prefix(model))}
    dropped = [key for key in head if key in state and state[key].shape != own[key].shape]
    for key in dropped:
        del state[key]
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [key for key in missing if key not in head]
    if missing or unexpected:
        raise ValueError(
            f"{weights} does not fit {name}: missing {missing[:5]}, unexpected {unexpected[:5]} "
            "(is it a checkpoint of this architecture?)"
        )
    return model


def _classifier_prefix(model) -> str:
    classifier = model.get_classifier()
    for module_name, module in model.named_modules():
        if module is classifier:
            return module_name + "."
    return "head."


def data_config(model) -> tuple[int, tuple, tuple]:
    """The model's input size and normalisation (timm's pretrained configuration)."""
    import timm.data

    config = timm.data.resolve_data_config({}, model=model)
    size = int(config["input_size"][-1])
    # The size the model was built for, where it differs from its pretrained configuration's.
    built = getattr(getattr(model, "patch_embed", None), "img_size", None)
    if built is not None:
        size = int(built[-1] if isinstance(built, tuple | list) else built)
    return size, tuple(config["mean"]), tuple(config["std"])


# Metrics ---------------------------------------------------------------------------------------


def scores(y: np.ndarray, proba: np.ndarray) -> dict[str, float]:
    labels = np.arange(proba.shape[1])
    return {
        "accuracy": 100 * accuracy(y, proba, labels=labels),
        "ece": 100 * expected_calibration_error(y, proba, n_bins=15, labels=labels),
        "nll": negative_log_likelihood(y, proba, labels=labels),
        "brier": brier_score(y, proba, labels=labels),
    }


def auroc(in_scores: np.ndarray, out_scores: np.ndarray) -> float:
    """AUROC of telling OOD inputs (higher score) from in-distribution ones."""
    truth = np.r_[np.zeros(len(in_scores)), np.ones(len(out_scores))]
    return float(roc_auc_score(truth, np.r_[in_scores, out_scores]))


def softmax(logits: np.ndarray) -> np.ndarray:
    return torch.softmax(torch.from_numpy(logits).double(), dim=1).numpy()


# Settings --------------------------------------------------------------------------------------


@dataclass
class Settings:
    """What a run trains and evaluates on (the paper's protocol, or its short version)."""

    epochs: int = 350
    teacher_epochs: int = 10
    director_epochs: int = 100
    batch_size: int = 64
    director_batch_size: int = 128
    n_train: int | None = None
    n_test: int | None = None
    n_ood: int | None = None
    n_shift: int | None = None  # per corruption and severity
    corruptions: tuple[str, ...] | None = None
    director_depth: int = 4
    n_paths: int = 10
    model_overrides: dict = field(default_factory=dict)
    device: str = "auto"
    checkpoint_dir: Path | None = None
    seed: int = 0


def scaled_milestones(epochs: int) -> tuple[int, ...]:
    """The paper's steps at 150 and 250 of 350 epochs, at the same fractions of ``epochs``."""
    return tuple(sorted({max(1, round(epochs * m / 350)) for m in (150, 250)} - {epochs}))


def checkpoint(settings: Settings, name: str) -> str | None:
    return None if settings.checkpoint_dir is None else str(settings.checkpoint_dir / name)


# Protocols -------------------------------------------------------------------------------------


@dataclass
class Data:
    train: Dataset
    test: Dataset
    ood: Dataset | None
    shift: dict
    n_classes: int
    ood_name: str = "SVHN"


def plain_or_calattn(
    backbone, data: Data, settings: Settings, *, head: bool, loss: str, dataset: str, selection
):
    """CalAttnFinetuner with the paper's SGD step recipe (``head=False``: plain fine-tuning)."""
    smoothing = 0.1 if dataset == "cifar100" and LOSSES[loss]["base_loss"] == "ce" else 0.0
    return CalAttnFinetuner(
        backbone,
        calibration_head=head,
        **LOSSES[loss],
        label_smoothing=smoothing,
        optimizer="sgd",
        learning_rate=0.1,
        weight_decay=5e-4,
        schedule="step",
        milestones=scaled_milestones(settings.epochs),
        gamma=0.1,
        warmup_epochs=0.0,
        grad_clip_norm=5.0,
        max_epochs=settings.epochs,
        batch_size=per_process(settings.batch_size),
        validation_fraction=0.05,
        selection_metric=selection,
        post_hoc="temperature",
        train_transform=RandomCropFlip(),
        mixed_precision="auto",
        checkpoint_dir=checkpoint(settings, "calattn" if head else "plain"),
        device=settings.device,
        random_state=settings.seed,
        verbose=1,
    )


def evaluate_calattn(model: CalAttnFinetuner, data: Data) -> dict:
    """Before and after the temperature fitted on the held-out split: test, OOD, shift."""
    y = labels_of(data.test)
    logits = model.decision_function(data.test)
    before, after = softmax(logits), model.post_hoc_.predict_proba(logits)
    row = {"before": scores(y, before), "after": scores(y, after)}
    row["temperature"] = float(model.post_hoc_.temperature_)
    if data.ood is not None:
        ood = softmax(model.decision_function(data.ood))
        row["auroc_maxprob"] = auroc(1 - before.max(1), 1 - ood.max(1))
    if data.shift:
        shifted = [
            (
                scores(labels_of(part), softmax(z)),
                scores(labels_of(part), model.post_hoc_.predict_proba(z)),
            )
            for part in data.shift.values()
            for z in [model.decision_function(part)]
        ]
        row["shift_before"] = mean_scores([s for s, _ in shifted])
        row["shift_after"] = mean_scores([s for _, s in shifted])
    row["parameters"] = model.n_backbone_parameters_ + model.n_extra_parameters_
    row["best_epoch"] = model.best_epoch_
    return row


def mean_scores(rows: list[dict]) -> dict:
    return {key: float(np.mean([row[key] for row in rows])) for key in rows[0]}


def run_calattn(args, settings: Settings, data: Data, backbone, log) -> dict:
    results = {}
    for head, name in ((False, "baseline"), (True, "calattn")):
        start = time.perf_counter()
        model = plain_or_calattn(
            backbone,
            data,
            settings,
            head=head,
            loss=args.loss,
            dataset=args.dataset,
            selection=args.selection or "ece",
        ).fit(data.train)
        fit_s = time.perf_counter() - start
        barrier()
        if is_main():
            results[name] = {**evaluate_calattn(model, data), "fit_s": fit_s}
            log(
                f"{name}: accuracy {results[name]['before']['accuracy']:.2f}%, ECE "
                f"{results[name]['before']['ece']:.2f}% / {results[name]['after']['ece']:.2f}% "
                f"after TS ({fit_s:.0f} s)"
            )
        barrier()
    return results


def teacher_model(args, settings: Settings, data: Data, backbone, log):
    """The DIRECTOR teacher: ``--teacher-weights`` as is, or the backbone fine-tuned plainly.

    The plain fine-tuning uses CalAttnFinetuner's own recipe (AdamW, warm-up then
    cosine, NLL selection) for ``teacher_epochs``: the paper does not state its
    teacher's. It also fits a temperature on its held-out split (``teacher + TS``).
    """
    if args.teacher_weights is not None:
        teacher = make_model(
            args.model, args.teacher_weights, data.n_classes, **settings.model_overrides
        )
        return teacher, None
    plain = CalAttnFinetuner(
        backbone,
        calibration_head=False,
        lambda_brier=0.0,
        max_epochs=settings.teacher_epochs,
        batch_size=per_process(settings.batch_size),
        validation_fraction=0.05,
        post_hoc="temperature",
        train_transform=RandomCropFlip(),
        mixed_precision="auto",
        checkpoint_dir=checkpoint(settings, "teacher"),
        device=settings.device,
        random_state=settings.seed,
        verbose=1,
    ).fit(data.train)
    return plain.network_.backbone.model.eval(), plain.post_hoc_


def teacher_logits(teacher, dataset: Dataset, settings: Settings) -> np.ndarray:
    """The teacher's logits, batch by batch on the device, in float32."""
    device = torch.device(
        "cuda" if torch.cuda.is_available() and settings.device != "cpu" else "cpu"
    )
    loader = torch.utils.data.DataLoader(dataset, batch_size=4 * settings.batch_size)
    teacher = teacher.to(device).eval()
    with torch.no_grad():
        parts = [teacher(x.to(device)).float().cpu() for x, _ in loader]
    teacher.cpu()
    return torch.cat(parts).double().numpy()


def run_director(args, settings: Settings, data: Data, backbone, log) -> dict:
    start = time.perf_counter()
    teacher, temperature = teacher_model(args, settings, data, backbone, log)
    teacher_s = time.perf_counter() - start
    barrier()
    results = {}
    if is_main():
        y = labels_of(data.test)
        logits = teacher_logits(teacher, data.test, settings)
        row = {"plain": scores(y, softmax(logits)), "fit_s": teacher_s}
        row["parameters"] = sum(p.numel() for p in teacher.parameters())
        if temperature is not None:
            row["ts"] = scores(y, temperature.predict_proba(logits))
        if data.ood is not None:
            ood = softmax(teacher_logits(teacher, data.ood, settings))
            row["auroc_maxprob"] = auroc(1 - softmax(logits).max(1), 1 - ood.max(1))
        results["teacher"] = row
        log(f"teacher: accuracy {row['plain']['accuracy']:.2f}%, ECE {row['plain']['ece']:.2f}%")
    barrier()
    start = time.perf_counter()
    director = DiffusionReconfigurer(
        teacher,
        anchor="none",
        reconfigure="all",
        depth=settings.director_depth,
        lambda_mean=0.5,
        lambda_var=0.0,
        lambda_ce=0.5,
        learning_rate=1e-3,
        weight_decay=5e-5,
        warmup_epochs=min(5.0, 0.05 * settings.director_epochs),
        max_epochs=settings.director_epochs,
        ema_decay=0.995,
        n_draws=settings.n_paths,
        batch_size=per_process(settings.director_batch_size),
        validation_fraction=0.05,
        selection_metric=args.selection or "accuracy",
        mixed_precision="auto",
        checkpoint_dir=checkpoint(settings, "director"),
        device=settings.device,
        random_state=settings.seed,
        verbose=1,
    ).fit(data.train)
    fit_s = time.perf_counter() - start
    barrier()
    if is_main():
        y = labels_of(data.test)
        row = {"fit_s": fit_s, "parameters": director.n_parameters_}
        proba, table = director.predict_proba(data.test, return_uncertainty=True)
        row["paths"] = scores(y, proba)
        director.set_params(n_draws=1)  # the paper's single-path protocol
        row["one_path"] = scores(y, director.predict_proba(data.test))
        director.set_params(n_draws=settings.n_paths)
        if data.ood is not None:
            ood, ood_table = director.predict_proba(data.ood, return_uncertainty=True)
            row["auroc_maxprob"] = auroc(1 - proba.max(1), 1 - ood.max(1))
            row["auroc_mi"] = auroc(
                table["mutual_information"].to_numpy(), ood_table["mutual_information"].to_numpy()
            )
        if data.shift:
            row["shift"] = mean_scores(
                [
                    scores(labels_of(part), director.predict_proba(part))
                    for part in data.shift.values()
                ]
            )
        row["student_val_accuracy"] = 100 * director.student_val_accuracy_
        row["teacher_val_accuracy"] = 100 * director.teacher_val_accuracy_
        results["director"] = row
        log(
            f"DIRECTOR: accuracy {row['one_path']['accuracy']:.2f}% (1 path), ECE "
            f"{row['one_path']['ece']:.2f}%, {row['parameters']:,} parameters ({fit_s:.0f} s)"
        )
    barrier()
    return results


# Report ----------------------------------------------------------------------------------------


def cell(value, digits: int = 2) -> str:
    """A number, or "n/a" where there is none (a figure not published, a set absent)."""
    if value is None:
        return "n/a"
    if digits == 0:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def table(columns, rows: list[dict]) -> list[str]:
    """Markdown table lines; ``columns`` are ``(title, key, digits)``, missing keys n/a."""
    lines = ["| " + " | ".join(title for title, _, _ in columns) + " |"]
    lines.append("|" + "---|" * len(columns))
    for row in rows:
        cells = [
            row[key] if isinstance(row.get(key), str) else cell(row.get(key), digits)
            for _, key, digits in columns
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def table_columns(data: Data, keys: list[str]) -> list[tuple[str, str, int]]:
    """The :func:`table` columns ``(title, key, digits)`` of ``keys``, from one list of all."""
    titles_digits = {
        "method": ("method", 0),
        "model": ("model", 0),
        "accuracy": ("acc %", 2),
        "ece": ("ECE %", 2),
        "ece_ts": ("ECE % after TS", 2),
        "paper_accuracy": ("paper acc %", 2),
        "paper_ece": ("paper ECE %", 2),
        "paper_ece_ts": ("paper ECE % after TS", 2),
        "nll": ("NLL", 3),
        "nll_ts": ("NLL after TS", 3),
        "brier": ("Brier", 4),
        "auroc": (f"AUROC {data.ood_name}", 3),
        "auroc_mi": (f"AUROC {data.ood_name} (MI)", 3),
        "shift_accuracy": ("shift acc %", 2),
        "shift_ece": ("shift ECE %", 2),
        "parameters": ("parameters", 0),
        "paper_parameters": ("paper parameters", 0),
        "fit_s": ("fit s", 0),
    }
    return [(titles_digits[key][0], key, titles_digits[key][1]) for key in keys]


def calattn_lines(args, settings: Settings, data: Data, results: dict) -> list[str]:
    published = PUBLISHED_CALATTN.get((args.dataset, args.model, args.loss), {})
    rows = []
    for name, label in (("baseline", "plain fine-tuning"), ("calattn", "CalAttn")):
        result = results[name]
        before, after = result["before"], result["after"]
        shift = result.get("shift_before", {})
        paper_before, paper_after = published.get(name, (None, None))
        rows.append(
            {
                "method": label,
                **{key: before[key] for key in ("accuracy", "ece", "nll", "brier")},
                "ece_ts": after["ece"],
                "nll_ts": after["nll"],
                "paper_ece": paper_before,
                "paper_ece_ts": paper_after,
                "auroc": result.get("auroc_maxprob"),
                "shift_accuracy": shift.get("accuracy"),
                "shift_ece": shift.get("ece"),
                "parameters": result["parameters"],
                "fit_s": result["fit_s"],
            }
        )
    columns = table_columns(
        data,
        ["method", "accuracy", "ece", "ece_ts", "paper_ece", "paper_ece_ts", "nll", "nll_ts"]
        + ["brier", "auroc", "shift_accuracy", "shift_ece", "parameters", "fit_s"],
    )
    lines = [
        f"Loss `{args.loss}` (base loss {LOSSES[args.loss]['base_loss']}, Brier weight "
        f"{LOSSES[args.loss]['lambda_brier']}), SGD Nesterov 0.9, lr 0.1, weight decay 5e-4, "
        f"{settings.epochs} epochs, x0.1 from epochs {scaled_milestones(settings.epochs)}, "
        f"clip 5, batch {settings.batch_size}, checkpoint selection by validation "
        f"{(args.selection or 'ece').upper()} (the authors': ECE).",
        "",
        *table(columns, rows),
    ]
    run = PUBLISHED_CALATTN_RUN.get((args.dataset, args.model))
    if run:
        lines += [
            "",
            f"The authors' own run of this cell: top-1 {run['accuracy']}%, ECE {run['ece']}%.",
        ]
    if not published:
        lines += ["", "docs/methods.md records no published figure for this cell."]
    return lines


def director_lines(args, settings: Settings, data: Data, results: dict) -> list[str]:
    published = PUBLISHED_DIRECTOR.get((args.dataset, args.model), {})
    teacher, student = results["teacher"], results["director"]

    def row(label, scored, model, paper=None, **extra):
        # paper: the published figures of the same model, beside ours in paper_* columns
        figures = {f"paper_{key}": value for key, value in (paper or {}).items()}
        return {"model": label, **scored, "parameters": model["parameters"], **figures, **extra}

    rows = [
        row(
            "teacher",
            teacher["plain"],
            teacher,
            published.get("teacher"),
            auroc=teacher.get("auroc_maxprob"),
            fit_s=teacher["fit_s"],
        )
    ]
    if "ts" in teacher:
        rows.append(
            row("teacher + TS", teacher["ts"], teacher, parameters=teacher["parameters"] + 1)
        )
    shift = student.get("shift", {})
    rows += [
        row(
            "DIRECTOR, 1 path",
            student["one_path"],
            student,
            published.get("student"),
            fit_s=student["fit_s"],
        ),
        row(
            f"DIRECTOR, {settings.n_paths} paths",
            student["paths"],
            student,
            auroc=student.get("auroc_maxprob"),
            auroc_mi=student.get("auroc_mi"),
            shift_accuracy=shift.get("accuracy"),
            shift_ece=shift.get("ece"),
        ),
    ]
    columns = table_columns(
        data,
        ["model", "accuracy", "ece", "nll", "brier", "paper_accuracy", "paper_ece", "auroc"]
        + ["auroc_mi", "shift_accuracy", "shift_ece", "parameters", "paper_parameters", "fit_s"],
    )
    source = (
        "--teacher-weights"
        if args.teacher_weights
        else f"plain fine-tuning, {settings.teacher_epochs} epochs"
    )
    lines = [
        f"Student: anchor='none', every block replaced, shared step of "
        f"{settings.director_depth} DiT block(s), {settings.director_epochs} epochs, AdamW lr "
        f"1e-3, weight decay 5e-5, EMA 0.995, selection by validation "
        f"{(args.selection or 'accuracy').upper()} (the authors': accuracy). Teacher: {source}.",
        "",
        *table(columns, rows),
        "",
        f"Validation accuracy: student {student['student_val_accuracy']:.2f}%, teacher "
        f"{student['teacher_val_accuracy']:.2f}%.",
    ]
    if not published:
        lines += ["", "docs/methods.md records no published figure for this cell."]
    return lines


def report(args, settings: Settings, data: Data, results: dict, seconds: float) -> str:
    """The results as markdown: ours beside the published figures, then the deviations."""
    title = f"# paper_scale: {args.protocol} on {args.model} / {args.dataset}"
    if args.stand_in:
        title += " (STAND-IN: tiny model on generated images; the numbers mean nothing)"
    if args.budget:
        title += " (--budget: short version, not the paper's schedule)"
    shift_size = len(next(iter(data.shift.values()))) if data.shift else 0
    lines = [
        title,
        "",
        f"Command: `{args.command}`",
        "",
        f"Device: {device_line()}; world size {world_size()}; {seconds / 60:.1f} min so far.",
        f"Data: {len(data.train)} training images (5% held out for selection and TS), "
        f"{len(data.test)} test, {0 if data.ood is None else len(data.ood)} OOD "
        f"({data.ood_name}), {len(data.shift)} corruption x severity sets of {shift_size}; "
        f"{data.n_classes} classes.",
        "",
    ]
    body = calattn_lines if args.protocol == "calattn" else director_lines
    lines += body(args, settings, data, results)
    lines += ["", "Deviations from the authors' code, not repeated here:", ""]
    lines += [f"- {text}" for text in DEVIATIONS[args.protocol]]
    return "\n".join(lines) + "\n"


# Distributed -----------------------------------------------------------------------------------


def world_size() -> int:
    return torch.distributed.get_world_size() if distributed() else 1


def distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def is_main() -> bool:
    return not distributed() or torch.distributed.get_rank() == 0


def barrier() -> None:
    if distributed():
        torch.distributed.barrier()


def per_process(batch_size: int) -> int:
    """The estimators' batch size is per process under DDP: split the global one."""
    return max(1, batch_size // world_size())


def start_distributed(device: str) -> None:
    """Join the process group when ``torchrun`` started this process (WORLD_SIZE > 1)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return
    cuda = torch.cuda.is_available() and device != "cpu"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    # Rank 0 evaluates alone between the fits while the others wait at a barrier: a
    # CIFAR-10-C pass with 10 DIRECTOR paths can outlast the default timeout.
    torch.distributed.init_process_group(
        backend="nccl" if cuda else "gloo", timeout=datetime.timedelta(hours=3)
    )


def device_line() -> str:
    if torch.cuda.is_available():
        return (
            f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda}), torch {torch.__version__}"
        )
    threads = torch.get_num_threads()
    return f"CPU ({os.cpu_count()} cores, {threads} threads), torch {torch.__version__}"


# Stand-in --------------------------------------------------------------------------------------

STAND_IN_CLASSES = 3
STAND_IN_SIZE = 32


def write_stand_in(folder: Path, seed: int = 0, n_train: int = 120, n_test: int = 60) -> Path:
    """Generated images as an ImageFolder, plus OOD and CIFAR-10-C-shaped stand-ins.

    Class ``k`` is a noisy image tinted towards channel ``k``. ``ood/`` holds
    uniform noise (read as ``--ood-folder``); ``CIFAR-10-C/noise.npy`` the
    test images with extra noise at five severities, in CIFAR-10-C's layout.
    """
    from PIL import Image

    rng = np.random.default_rng(seed)

    def images(n):
        labels = np.arange(n) % STAND_IN_CLASSES
        pixels = rng.normal(0.4, 0.25, (n, STAND_IN_SIZE, STAND_IN_SIZE, 3))
        pixels[np.arange(n), :, :, labels] += 0.1
        return (np.clip(pixels, 0, 1) * 255).astype(np.uint8), labels

    for part, n in (("train", n_train), ("test", n_test)):
        pixels, labels = images(n)
        for i, (image, label) in enumerate(zip(pixels, labels)):
            target = folder / part / f"class{label}"
            target.mkdir(parents=True, exist_ok=True)
            Image.fromarray(image).save(target / f"{i}.png")
    noise = rng.integers(0, 256, (n_test, STAND_IN_SIZE, STAND_IN_SIZE, 3), dtype=np.uint8)
    (folder / "ood" / "noise").mkdir(parents=True, exist_ok=True)
    for i, image in enumerate(noise):
        Image.fromarray(image).save(folder / "ood" / "noise" / f"{i}.png")
    test, labels = images(n_test)
    corrupted = [
        np.clip(test + rng.normal(0, 20 * s, test.shape), 0, 255).astype(np.uint8)
        for s in range(1, 6)
    ]
    (folder / "CIFAR-10-C").mkdir(exist_ok=True)
    np.save(folder / "CIFAR-10-C" / "noise.npy", np.concatenate(corrupted))
    np.save(folder / "CIFAR-10-C" / "labels.npy", np.tile(labels, 5))
    return folder


def stand_in_backbone(folder: Path) -> tuple[str, Path, dict]:
    """A tiny ``pretrained=False`` timm ViT, saved as a weights file for ``make_model``."""
    import timm

    overrides = dict(img_size=STAND_IN_SIZE, patch_size=8, embed_dim=32, depth=2, num_heads=2)
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, **overrides)
    path = folder / "stand_in_vit.pth"
    torch.save(model.state_dict(), path)
    return "vit_tiny_patch16_224", path, overrides


# Main ------------------------------------------------------------------------------------------


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--protocol", choices=("calattn", "director", "both"), default="calattn")
    parser.add_argument("--model", default="vit_base_patch16_224", help="a timm model name")
    parser.add_argument("--weights", type=Path, help="local timm checkpoint file of --model")
    parser.add_argument("--teacher-weights", type=Path, help="director: a fine-tuned teacher file")
    parser.add_argument(
        "--dataset", choices=("cifar10", "cifar100", "imagenet", "imagefolder"), default="cifar10"
    )
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument(
        "--ood-folder", type=Path, help="OOD images as an ImageFolder, instead of SVHN"
    )
    parser.add_argument("--loss", choices=list(LOSSES), default="ce+0.1brier")
    parser.add_argument(
        "--selection",
        choices=("ece", "nll", "accuracy"),
        help="checkpoint selection (default: the authors': ECE for CalAttn, accuracy for DIRECTOR)",
    )
    parser.add_argument("--epochs", type=int, help="CalAttn epochs (default 350)")
    parser.add_argument("--director-epochs", type=int, help="DIRECTOR epochs (default 100)")
    parser.add_argument(
        "--teacher-epochs", type=int, help="teacher fine-tuning epochs (default 10)"
    )
    parser.add_argument("--batch-size", type=int, help="global batch (default 64; DIRECTOR 128)")
    parser.add_argument(
        "--director-depth", type=int, help="DiT blocks of the shared step (default 4)"
    )
    parser.add_argument("--checkpoint-dir", type=Path, help="resumable fits: one folder per fit")
    parser.add_argument(
        "--budget", action="store_true", help="short version for a 15-minute GPU slot"
    )
    parser.add_argument(
        "--stand-in", action="store_true", help="tiny model and generated data, CPU"
    )
    parser.add_argument(
        "--count-parameters",
        action="store_true",
        help="only count the parameters of --model, its CalAttn head and DIRECTOR student",
    )
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, help="also write the report there")
    return parser.parse_args(argv)


# What --budget changes: a short version that fits a 15-minute GPU slot.
BUDGET = dict(
    epochs=3,
    teacher_epochs=2,
    director_epochs=3,
    n_train=5000,
    n_test=2000,
    n_ood=2000,
    n_shift=200,
    corruptions=("gaussian_noise", "defocus_blur", "fog"),
)
# What --stand-in changes: a tiny model on generated images, for the tests.
STAND_IN = dict(
    epochs=2,
    teacher_epochs=2,
    director_epochs=2,
    batch_size=16,
    director_batch_size=16,
    director_depth=1,
    n_paths=4,
)


def settings_for(args) -> Settings:
    settings = Settings(device=args.device, checkpoint_dir=args.checkpoint_dir, seed=args.seed)
    if args.budget:
        settings = replace(settings, **BUDGET)
    if args.stand_in:
        settings = replace(settings, **STAND_IN)
    for name in ("epochs", "director_epochs", "teacher_epochs", "director_depth"):
        if getattr(args, name) is not None:
            setattr(settings, name, getattr(args, name))
    if args.batch_size is not None:
        settings.batch_size = settings.director_batch_size = args.batch_size
    return settings


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    args.command = "python benchmarks/paper_scale.py " + shlex.join(argv)
    start = time.perf_counter()

    def log(message):
        if is_main():
            print(f"[{(time.perf_counter() - start) / 60:5.1f} min] {message}", flush=True)

    with contextlib.ExitStack() as stack:
        if args.stand_in:
            # Beside the checkpoints when there are any: a rerun must find the same image
            # files (the checkpoints record the data they were written for), not a new
            # temporary folder of them.
            if args.checkpoint_dir is not None:
                folder = Path(args.checkpoint_dir) / "stand-in-data"
                folder.mkdir(parents=True, exist_ok=True)
            else:
                folder = Path(
                    stack.enter_context(tempfile.TemporaryDirectory(prefix="paper_scale_"))
                )
            args.data_dir = write_stand_in(folder)
            args.ood_folder = folder / "ood"
            args.dataset = "imagefolder"
            args.model, args.weights, overrides = stand_in_backbone(folder)
            args.device = "cpu"
        elif args.count_parameters:
            overrides = {}
            return count_parameters(args, settings_for(args), log)
        else:
            overrides = {}
            if args.weights is None:
                raise MissingData(
                    "--weights is required: the local timm checkpoint of --model (e.g. "
                    "vit_base_patch16_224's model.safetensors), or use --stand-in"
                )
        settings = settings_for(args)
        settings.model_overrides = overrides
        start_distributed(args.device)
        try:
            return run(args, settings, log, start)
        finally:
            if distributed():
                torch.distributed.destroy_process_group()


def count_parameters(args, settings: Settings, log) -> int:
    """Parameters of CalAttn's head and of DIRECTOR's student for ``--model`` (no weights).

    Each estimator reports its counts after a fit, so each is fitted for one
    step on four random images on the CPU (the weights are random: only the
    architecture counts).
    """
    model = make_model(args.model, None, 10)
    size, _, _ = data_config(model)
    X = torch.randn(4, 3, size, size, generator=torch.Generator().manual_seed(0)).numpy()
    y = np.arange(4)
    common = dict(max_epochs=1, batch_size=4, validation_fraction=0.0, device="cpu")
    calattn = CalAttnFinetuner(model, **common, random_state=0).fit(X, y)
    director = DiffusionReconfigurer(
        model,
        anchor="none",
        reconfigure="all",
        depth=settings.director_depth,
        n_draws=1,
        ema_decay=None,
        **common,
        random_state=0,
    ).fit(X, y)
    published = PUBLISHED_DIRECTOR.get(("cifar10", args.model), {})
    teacher_ref = published.get("teacher", {}).get("parameters")
    student_ref = published.get("student", {}).get("parameters")
    lines = [
        f"# Parameters of {args.model} (10 classes), its CalAttn head and its DIRECTOR student",
        "",
        f"Command: `{args.command}`",
        "",
        "| model | parameters | published |",
        "|---|---|---|",
        f"| {args.model} | {calattn.n_backbone_parameters_:,} "
        f"| {'n/a' if teacher_ref is None else f'{teacher_ref / 1e6:.0f}M'} |",
        f"| CalAttn head (hidden 128) | {calattn.n_extra_parameters_:,} "
        f"({100 * calattn.parameter_overhead_:.2f}%) | 128 D + 257 |",
        f"| DIRECTOR student, anchor='none', all {director.n_blocks_} blocks, shared step of "
        f"{settings.director_depth} DiT block(s) | {director.n_parameters_:,} "
        f"| {'n/a' if student_ref is None else f'{student_ref / 1e6:.0f}M'} |",
    ]
    print("\n".join(lines), flush=True)
    if args.output is not None:
        args.output.write_text("\n".join(lines) + "\n")
    return 0


def run(args, settings: Settings, log, start: float) -> int:
    # The data first: a missing file should stop the run before any model is built.
    probe = make_model(args.model, None, 10, **settings.model_overrides)
    size, mean, std = data_config(probe)
    del probe
    train = load_split(args.dataset, args.data_dir, True, size, mean, std)
    test = load_split(args.dataset, args.data_dir, False, size, mean, std)
    n_classes = int(labels_of(train).max()) + 1
    ood = load_ood(args.data_dir, size, mean, std, log, args.ood_folder)
    shift = load_corruptions(
        args.dataset, args.data_dir, size, mean, std, log, settings.corruptions
    )
    data = Data(
        train=subset(train, settings.n_train, settings.seed),
        test=subset(test, settings.n_test, settings.seed),
        ood=None if ood is None else subset(ood, settings.n_ood, settings.seed),
        shift={key: subset(part, settings.n_shift, settings.seed) for key, part in shift.items()},
        n_classes=n_classes,
        ood_name="SVHN" if args.ood_folder is None else args.ood_folder.name,
    )
    backbone = make_model(args.model, args.weights, n_classes, **settings.model_overrides)
    log(
        f"{args.model}: {sum(p.numel() for p in backbone.parameters()):,} parameters, input "
        f"{size}x{size}; {len(data.train)} training images, {n_classes} classes"
    )
    protocols = ("calattn", "director") if args.protocol == "both" else (args.protocol,)
    texts = []
    for protocol in protocols:
        results = (run_calattn if protocol == "calattn" else run_director)(
            args, settings, data, backbone, log
        )
        if is_main():
            args_for = argparse.Namespace(**{**vars(args), "protocol": protocol})
            texts.append(report(args_for, settings, data, results, time.perf_counter() - start))
    if is_main():
        text = "\n".join(texts)
        print(text, flush=True)
        if args.output is not None:
            args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
