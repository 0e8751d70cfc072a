"""The networks a fitted estimator holds: saved as a state dict plus what rebuilds them.

Three kinds exist, each rebuilt by reliacal's own constructor before its
state dict is loaded strictly:

- ``adaptive_ts``: an AdaptiveTS member network, from its sizes;
- ``calattn``: a CalAttnFinetuner's network, built by the estimator around
  the backbone given to ``load`` (whose fine-tuned weights the state holds);
- ``director``: a DiffusionReconfigurer's student, built from a frozen
  copy of the backbone given to ``load``.

A state dict that does not fit the rebuilt network (another architecture,
another number of classes) is a clear ``ValueError``.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["decode_network", "encode_network"]


def _kind(module: Any) -> str | None:
    name = type(module).__name__
    return {
        "_AdaptiveTemperatureNetwork": "adaptive_ts",
        "CalAttnNetwork": "calattn",
        "DirectorStudent": "director",
    }.get(name)


def _linear_widths(sequence: Any) -> list[int]:
    from torch import nn

    return [layer.out_features for layer in sequence if isinstance(layer, nn.Linear)]


def _config(kind: str, module: Any) -> dict:
    if kind == "adaptive_ts":
        return {
            "n_features": module.encoder[0].in_features,
            "n_classes": int(module.prior_mean.shape[0]),
            "latent_dim": int(module.prior_mean.shape[1]),
            "hidden_layer_sizes": _linear_widths(module.encoder),
            "temperature_hidden_sizes": _linear_widths(module.temperature_head)[:-1],
            "confidence_inputs": bool(module.confidence_inputs),
        }
    if kind == "director":
        # The transition network's depth is the estimator's own parameter.
        return {"n_reconfigured": int(module.n_reconfigured)}
    return {}


def encode_network(encoder: Any, module: Any, where: str) -> dict:
    kind = _kind(module)
    if kind is None:
        raise ValueError(
            f"{where} is a {type(module).__name__} network, which reliacal cannot rebuild on "
            "load; save its state_dict yourself"
        )
    state = {name: encoder.tensor(tensor) for name, tensor in module.state_dict().items()}
    return {"$network": kind, "config": _config(kind, module), "state": state}


def _build(kind: str, config: dict, decoder: Any, owner: Any) -> Any:
    if kind == "adaptive_ts":
        from reliacal.calibrators.adaptive import _AdaptiveTemperatureNetwork

        return _AdaptiveTemperatureNetwork(
            config["n_features"],
            config["n_classes"],
            latent_dim=config["latent_dim"],
            hidden_layer_sizes=tuple(config["hidden_layer_sizes"]),
            temperature_hidden_sizes=tuple(config["temperature_hidden_sizes"]),
            confidence_inputs=config["confidence_inputs"],
        )
    if kind == "calattn":
        # The estimator's own builder, around (a copy of) the backbone given to load.
        return owner._build_network(0)
    if kind == "director":
        from reliacal.backbones import as_backbone
        from reliacal.finetune.director_network import build_student

        teacher = copy.deepcopy(as_backbone(owner.backbone)).cpu().eval()
        teacher.requires_grad_(False)
        return build_student(
            teacher,
            n_reconfigured=config["n_reconfigured"],
            depth=int(owner.depth),
            noise_init=owner.noise_init,
            anchored=owner.anchor == "teacher",
        )
    raise ValueError(f"the saved model holds a network of unknown kind {kind!r}")


def decode_network(decoder: Any, data: dict, owner: Any) -> Any:
    kind = data["$network"]
    module = _build(kind, data.get("config", {}), decoder, owner)
    state = {name: decoder.tensor(tensor) for name, tensor in data["state"].items()}
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    mismatched = [
        name
        for name in sorted(set(state) & set(expected))
        if tuple(state[name].shape) != tuple(expected[name].shape)
    ]
    if missing or unexpected or mismatched:
        details = "; ".join(
            f"{label}: {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}"
            for label, names in (
                ("missing", missing),
                ("unexpected", unexpected),
                ("other shapes", mismatched),
            )
            if names
        )
        raise ValueError(
            f"the saved {kind} network does not fit the one rebuilt from the backbone given "
            f"({details}): pass the backbone the model was fitted with"
        )
    module.load_state_dict(state)
    return module.cpu().eval()
