"""CalAttn with the Hugging Face ``Trainer``: a ``compute_loss`` override.

A tiny BERT sequence classifier (``reliacal.datasets.make_tiny_bert``, built
in code, random weights) is wrapped in a ``CalAttnModel`` whose scale head
reads the final [CLS] token, and ``Trainer.compute_loss`` is overridden to
apply ``CalAttnLoss`` to the model's output. The task is synthetic: each
sentence holds one of three keyword tokens among random filler (and padding),
and the keyword gives the label 80% of the time, so no classifier can be sure.
It prints the test accuracy and expected calibration error (ECE, 15 bins) of
CalAttn's calibrated probabilities and of the backbone's logits alone.

Needs ``transformers`` and ``accelerate`` (the ``Trainer`` requires it). Run
from the repository root (a few seconds on a CPU)::

    python examples/calattn_hf_trainer.py
"""

from __future__ import annotations

import math
import tempfile

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from transformers import Trainer, TrainingArguments

from reliacal.datasets import make_tiny_bert
from reliacal.metrics import expected_calibration_error
from reliacal.nn import CalAttnLoss, CalAttnModel

EPOCHS = 6
N_CLASSES = 3
VOCAB = 40
KEYWORDS = (1, 2, 3)  # token i+1 signals class i; 0 is padding, 4.. are filler
LENGTH = 12


class KeywordSentences(Dataset):
    """Hugging Face style items: ``{"input_ids", "attention_mask", "labels"}``."""

    def __init__(self, n: int, seed: int):
        rng = np.random.default_rng(seed)
        ids = rng.integers(len(KEYWORDS) + 1, VOCAB, size=(n, LENGTH))
        lengths = rng.integers(LENGTH // 2, LENGTH + 1, size=n)
        keyword = rng.integers(0, N_CLASSES, size=n)
        ids[np.arange(n), rng.integers(0, lengths)] = np.asarray(KEYWORDS)[keyword]
        mask = np.arange(LENGTH)[None, :] < lengths[:, None]
        # The keyword is right 80% of the time: the best accuracy is 0.8 + 0.2 / 3.
        noisy = rng.random(n) < 0.2
        labels = np.where(noisy, rng.integers(0, N_CLASSES, size=n), keyword)
        self.ids = torch.from_numpy(np.where(mask, ids, 0))
        self.mask = torch.from_numpy(mask.astype(np.int64))
        self.labels = torch.from_numpy(labels)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "attention_mask": self.mask[i], "labels": self.labels[i]}


class CalAttnTrainer(Trainer):
    """A ``Trainer`` whose loss is CalAttn's, on the ``CalAttnModel``'s output."""

    def __init__(self, *args, calattn_loss: CalAttnLoss, **kwargs):
        super().__init__(*args, **kwargs)
        self.calattn_loss = calattn_loss

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        # CalAttnLoss is a batch mean; num_items_in_batch matters only with gradient
        # accumulation, which this example does not use.
        inputs = dict(inputs)
        labels = inputs.pop("labels")
        outputs = model(inputs)  # the backbone adapter reads the dict of token inputs
        loss = self.calattn_loss(outputs, labels)
        return (loss, outputs) if return_outputs else loss


@torch.no_grad()
def predict(model: CalAttnModel, data: Dataset):
    """Calibrated and raw probabilities over ``data``, in order."""
    model.eval()
    calibrated, raw = [], []
    for batch in DataLoader(data, batch_size=128):
        batch.pop("labels")
        output = model(batch)
        calibrated.append(torch.softmax(output.calibrated_logits.double(), dim=1))
        raw.append(torch.softmax(output.logits.double(), dim=1))
    return torch.cat(calibrated).numpy(), torch.cat(raw).numpy()


def main(epochs: int = EPOCHS, seed: int = 0) -> dict[str, dict[str, float]]:
    bert = make_tiny_bert(N_CLASSES, VOCAB, max_length=LENGTH, random_state=seed)
    model = CalAttnModel(bert, hidden=32)
    train, test = KeywordSentences(1200, seed), KeywordSentences(600, seed + 1)
    with tempfile.TemporaryDirectory() as output_dir:
        arguments = TrainingArguments(
            output_dir=output_dir,
            num_train_epochs=epochs,
            per_device_train_batch_size=32,
            learning_rate=2e-3,
            weight_decay=0.05,
            lr_scheduler_type="cosine",
            warmup_steps=math.ceil(len(train) / 32),  # one epoch
            # The model's forward takes one dict, not keyword arguments: keep every column.
            remove_unused_columns=False,
            save_strategy="no",
            logging_strategy="no",
            report_to="none",
            disable_tqdm=True,
            use_cpu=True,
            seed=seed,
        )
        trainer = CalAttnTrainer(
            model=model,
            args=arguments,
            train_dataset=train,
            calattn_loss=CalAttnLoss(n_classes=N_CLASSES),
        )
        trainer.train()
    labels = test.labels.numpy()
    calibrated, raw = predict(model, test)
    results = {}
    for name, probabilities in (("CalAttn z / s(x)", calibrated), ("backbone logits z", raw)):
        results[name] = {
            "accuracy": float(np.mean(probabilities.argmax(axis=1) == labels)),
            "ece": expected_calibration_error(labels, probabilities),
        }
        print(
            f"{name:>18}: accuracy {results[name]['accuracy']:.3f}  ECE {results[name]['ece']:.4f}"
        )
    return results


if __name__ == "__main__":
    main()
