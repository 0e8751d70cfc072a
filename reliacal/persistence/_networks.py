"""The networks a fitted estimator holds: a state dict, plus what its owner needs to rebuild it.

The codec asks the estimator that holds a network for its configuration
(``_network_config``) when saving, and for a fresh network of that
configuration (``_rebuild_network``) when loading; the saved state dict is
then loaded into it strictly. A state dict that does not fit the rebuilt
network (another architecture, another number of classes) is a clear
``ValueError``. A network whose configuration carries sizes is first built
on torch's ``meta`` device (shapes without memory), so that sizes that do
not match the saved weights are refused before anything is allocated.
"""

from __future__ import annotations

from typing import Any

__all__ = ["decode_network", "encode_network"]


def encode_network(encoder: Any, module: Any, where: str, owner: Any) -> dict:
    describe = getattr(owner, "_network_config", None)
    if describe is None:
        raise ValueError(
            f"{where} is a {type(module).__name__} network, which reliacal cannot rebuild on "
            "load; save its state_dict yourself"
        )
    try:
        config = describe(module)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    state = {name: encoder.tensor(tensor) for name, tensor in module.state_dict().items()}
    return {
        "$network": type(module).__name__,
        "config": encoder.value(config, f"{where} (its configuration)"),
        "state": state,
    }


def decode_network(decoder: Any, data: dict, owner: Any) -> Any:
    kind = data["$network"]
    config = decoder.value(data["config"])
    state_data = data["state"]
    if (
        not isinstance(kind, str)
        or not isinstance(config, dict)
        or not isinstance(state_data, dict)
    ):
        raise ValueError("the manifest holds a malformed network")
    state = {name: decoder.tensor(tensor) for name, tensor in state_data.items()}
    probe = _probe(owner, config)
    if probe is not None:
        _check_fits(kind, probe.state_dict(), state)
    module = owner._rebuild_network(config)
    _check_fits(kind, module.state_dict(), state)
    module.load_state_dict(state)
    return module.cpu().eval()


def _probe(owner: Any, config: dict) -> Any:
    """The network built on the meta device, or None when it cannot be built there.

    An empty configuration takes every size from the owner's parameters and the
    objects given to load, none from the file: it is built once, for real.
    """
    import torch

    if not config:
        return None
    try:
        with torch.device("meta"):
            return owner._rebuild_network(config)
    except ValueError:  # the owner refuses the configuration itself
        raise
    except Exception:  # a builder that reads tensor values: checked after the real build
        return None


def _check_fits(kind: str, expected: dict, state: dict) -> None:
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
