"""CalAttn with PyTorch Lightning, from the modules of ``reliacal.nn``.

A ``LightningModule`` holds a ``CalAttnModel`` (a tiny Vision Transformer
built in code and CalAttn's scale head) and trains it under ``CalAttnLoss``
on scikit-learn's handwritten digits; ``predict_step`` returns CalAttn's
calibrated probabilities, ``softmax(z / s(x))``. It prints the test accuracy
and expected calibration error (ECE, 15 bins) of those and of the backbone's
logits ``z`` alone.

Needs ``lightning`` (in the ``dev`` extra). Run from the repository root (a
few seconds on a CPU)::

    python examples/calattn_lightning.py
"""

from __future__ import annotations

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from reliacal.datasets import load_digits_images, make_tiny_vit, train_calibration_test_split
from reliacal.metrics import expected_calibration_error
from reliacal.nn import CalAttnLoss, CalAttnModel

EPOCHS = 8
N_CLASSES = 10


class CalAttnClassifier(L.LightningModule):
    """CalAttn as a LightningModule: the model's output goes to the loss as it is."""

    def __init__(self, backbone: torch.nn.Module, n_classes: int, learning_rate: float = 2e-3):
        super().__init__()
        self.model = CalAttnModel(backbone, hidden=32)
        self.loss_fn = CalAttnLoss(n_classes=n_classes)  # CE + 0.1 * Brier on z / s
        self.learning_rate = learning_rate

    def training_step(self, batch, batch_index):
        x, y = batch
        loss = self.loss_fn(self.model(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_index):
        x, y = batch
        self.log("val_loss", self.loss_fn(self.model(x), y))

    def predict_step(self, batch, batch_index):
        output = self.model(batch[0])
        # Both readings of the same pass: calibrated z / s and the backbone's z alone.
        return torch.softmax(output.calibrated_logits, dim=1), torch.softmax(output.logits, dim=1)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.learning_rate, weight_decay=0.05)


def main(epochs: int = EPOCHS, seed: int = 0) -> dict[str, dict[str, float]]:
    L.seed_everything(seed, verbose=False)
    images, digits = load_digits_images(image_size=16)
    splits = train_calibration_test_split(images, digits, random_state=seed)

    def loader(X, y, shuffle=False):
        data = TensorDataset(torch.from_numpy(X), torch.from_numpy(y))
        return DataLoader(data, batch_size=64, shuffle=shuffle)

    vit = make_tiny_vit(
        num_classes=N_CLASSES, image_size=16, embed_dim=32, depth=2, num_heads=2, random_state=seed
    )
    module = CalAttnClassifier(vit, N_CLASSES)
    trainer = L.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(
        module,
        loader(splits.X_train, splits.y_train, shuffle=True),
        loader(splits.X_calibration, splits.y_calibration),
    )
    batches = trainer.predict(module, loader(splits.X_test, splits.y_test))
    readings = {
        "CalAttn z / s(x)": torch.cat([calibrated for calibrated, _ in batches]),
        "backbone logits z": torch.cat([raw for _, raw in batches]),
    }
    results = {}
    for name, probabilities in readings.items():
        probabilities = probabilities.double().numpy()
        results[name] = {
            "accuracy": float(np.mean(probabilities.argmax(axis=1) == splits.y_test)),
            "ece": expected_calibration_error(splits.y_test, probabilities),
        }
        print(
            f"{name:>18}: accuracy {results[name]['accuracy']:.3f}  ECE {results[name]['ece']:.4f}"
        )
    return results


if __name__ == "__main__":
    main()
