"""pyproject.toml declares every third-party import, with floors that provide the APIs used."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import inspect
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The newest API the code needs from a dependency: (floor, module, name, the file using it).
# Found by running the code against older releases: scikit-learn 1.5.2 fails on import
# (no validate_data) while 1.6.1 passes the calibrator tests; transformers 4.57.6 has no
# create_bidirectional_mask, 5.0-5.1 name its argument input_embeds, 5.2-5.8 ViT layers
# take no attention mask (HFViTAdapter.apply_block passes one) and 5.9.0 passes the
# backbone tests; torch.nn.utils.get_total_norm arrived in torch 2.6.
FLOOR_APIS = {
    "scikit-learn": ("1.6", "sklearn.utils.validation", "validate_data", "calibrators/_base.py"),
    "torch": ("2.6", "torch.nn.utils", "get_total_norm", "training/_loop.py"),
    "transformers": (
        "5.9",
        "transformers.masking_utils",
        "create_bidirectional_mask",
        "backbones/_hf.py",
    ),
}


def _declared() -> dict[str, str | None]:
    """Declared runtime dependencies: normalised name -> floor (None without one)."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {}
    for requirement in project["dependencies"]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)
        floor = re.search(r">=\s*([0-9][0-9.]*)", requirement)
        declared[_normalise(name)] = floor.group(1) if floor else None
    return declared


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _third_party_imports() -> set[str]:
    """Top-level modules imported anywhere in reliacal/ (also inside functions)."""
    modules = set()
    for path in (ROOT / "reliacal").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names) - {"reliacal", "__future__"}


# Extras that enable one feature each: their imports sit inside that feature's code (or
# behind an ImportError that names the extra). dev and bench are tools, not features.
FEATURE_EXTRAS = ("distributed", "parquet", "torchmetrics")


def _feature_extras() -> set[str]:
    """Normalised names of the distributions of the feature extras."""
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    return {
        _normalise(re.match(r"[A-Za-z0-9_.-]+", requirement).group(0))
        for extra in FEATURE_EXTRAS
        for requirement in extras[extra]
    }


def test_every_third_party_import_is_a_declared_dependency():
    declared = set(_declared()) | _feature_extras()
    distributions = importlib.metadata.packages_distributions()
    undeclared = {
        module: distributions.get(module)
        for module in _third_party_imports()
        if not any(_normalise(d) in declared for d in distributions.get(module, [module]))
    }
    assert not undeclared, f"imported by reliacal but not in pyproject dependencies: {undeclared}"


@pytest.mark.parametrize("distribution", sorted(FLOOR_APIS))
def test_floor_provides_the_newest_api_the_code_uses(distribution):
    floor, module, name, user = FLOOR_APIS[distribution]
    declared_floor = _declared()[distribution]
    assert declared_floor is not None and _version(declared_floor) >= _version(floor)
    # The table stays true: the code still uses the API, and it exists where installed.
    assert re.search(rf"\b{name}\b", (ROOT / "reliacal" / user).read_text())
    assert callable(getattr(importlib.import_module(module), name))


def test_transformers_takes_the_arguments_the_adapters_pass():
    # transformers 5.0 and 5.1 call it input_embeds; 5.2 to 5.8 ViT layers take no mask.
    from transformers.masking_utils import create_bidirectional_mask
    from transformers.models.vit.modeling_vit import ViTLayer

    assert "inputs_embeds" in inspect.signature(create_bidirectional_mask).parameters
    assert list(inspect.signature(ViTLayer.forward).parameters)[1:3] == [
        "hidden_states",
        "attention_mask",
    ]
