"""CalAttn in a plain PyTorch training loop, with the modules of ``reliacal.nn``.

Fine-tunes a tiny Vision Transformer (built in code, random weights) on
scikit-learn's handwritten digits with CalAttn's scale head and loss, then
fits a temperature on held-out data with ``TemperatureScaler``. It prints the
test accuracy and expected calibration error (ECE, 15 bins) of the same
network read three ways: the backbone's logits ``z`` alone, CalAttn's
calibrated logits ``z / s(x)``, and those after the temperature.

Run from the repository root (a few seconds on a CPU)::

    python examples/calattn_plain_pytorch.py
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

from reliacal.datasets import load_digits_images, make_tiny_vit, train_calibration_test_split
from reliacal.metrics import expected_calibration_error
from reliacal.nn import CalAttnLoss, CalAttnModel, TemperatureScaler

EPOCHS = 8
N_CLASSES = 10


def train(model: CalAttnModel, loader: DataLoader, epochs: int) -> None:
    """The whole CalAttn recipe: the network's output goes to CalAttnLoss as it is."""
    loss_fn = CalAttnLoss(n_classes=N_CLASSES)  # CE + 0.1 * Brier on z / s
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05)
    for _ in range(epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()


def fit_temperature(logits: torch.Tensor, labels: torch.Tensor) -> TemperatureScaler:
    """Post-hoc temperature scaling as a module: minimise the NLL over one parameter."""
    scaler = TemperatureScaler()
    optimizer = torch.optim.LBFGS(scaler.parameters(), lr=0.5, max_iter=100)

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(scaler(logits), labels)
        loss.backward()
        return loss

    optimizer.step(closure)
    return scaler.eval()


@torch.no_grad()
def predict(model: CalAttnModel, X: torch.Tensor):
    return model.eval()(X)


def main(epochs: int = EPOCHS, seed: int = 0) -> dict[str, dict[str, float]]:
    torch.manual_seed(seed)
    images, digits = load_digits_images(image_size=16)
    splits = train_calibration_test_split(images, digits, random_state=seed)
    X_train, y_train = torch.from_numpy(splits.X_train), torch.from_numpy(splits.y_train)
    loader = DataLoader(TensorDataset(X_train, y_train), batch_size=64, shuffle=True)

    vit = make_tiny_vit(
        num_classes=N_CLASSES, image_size=16, embed_dim=32, depth=2, num_heads=2, random_state=seed
    )
    model = CalAttnModel(vit, hidden=32)  # reads the final [CLS] token
    train(model, loader, epochs)

    held_out = predict(model, torch.from_numpy(splits.X_calibration))
    scaler = fit_temperature(held_out.calibrated_logits, torch.from_numpy(splits.y_calibration))
    test = predict(model, torch.from_numpy(splits.X_test))
    readings = {
        "backbone logits z": test.logits,
        "CalAttn z / s(x)": test.calibrated_logits,
        "CalAttn + temperature": scaler(test.calibrated_logits).detach(),
    }
    results = {}
    for name, logits in readings.items():
        probabilities = torch.softmax(logits.double(), dim=1).numpy()
        results[name] = {
            "accuracy": float((probabilities.argmax(axis=1) == splits.y_test).mean()),
            "ece": expected_calibration_error(splits.y_test, probabilities),
        }
        print(
            f"{name:>22}: accuracy {results[name]['accuracy']:.3f}  ECE {results[name]['ece']:.4f}"
        )
    print(f"fitted temperature: {scaler.temperature.item():.3f}")
    return results


if __name__ == "__main__":
    main()
