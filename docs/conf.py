"""Sphinx configuration of reliacal's documentation site (``make docs``).

The build runs offline: no intersphinx inventories are fetched, the gallery
examples run on bundled data, and every warning is an error (``-W`` in the
Makefile), so a broken cross-reference or a docstring that does not render
fails the build.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MPLBACKEND", "Agg")

from reliacal import __version__  # noqa: E402

project = "reliacal"
author = "reliacal developers"
copyright = "reliacal developers"
version = release = __version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "auto_examples/*.ipynb", "auto_examples/*.py.md5"]
templates_path = ["_templates"]

autosummary_generate = True
autodoc_default_options = {"members": True, "inherited-members": False}
# numpydoc renders the sections; it does not link parameter types, which name
# third-party types (arrays, tensors, DataFrames) that no offline inventory resolves.
numpydoc_show_class_members = False
numpydoc_xref_param_type = False
numpydoc_class_members_toctree = False

myst_heading_anchors = 3

sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples" / "gallery"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "show_memory": False,
    "reset_modules": ("matplotlib",),
}

html_theme = "pydata_sphinx_theme"
html_title = f"reliacal {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_prev_next": False,
    "secondary_sidebar_items": ["page-toc"],
}
html_static_path: list[str] = []


# --------------------------------------------------------------------- API pages
# One page per public package, listing its ``__all__`` (the package's one list of its
# public names), so that the reference never drifts from the code.
API_PACKAGES = {
    "reliacal.calibrators": "Post-hoc calibrators",
    "reliacal.wrap": "Any classifier, calibrated",
    "reliacal.finetune": "Representation-level methods",
    "reliacal.metrics": "Metrics, scorers and reports",
    "reliacal.plot": "Reliability diagrams",
    "reliacal.nn": "Modules for your own training loop",
    "reliacal.backbones": "Backbone adapters",
    "reliacal.training": "The training loop",
    "reliacal.export": "Export to TorchScript and ONNX",
    "reliacal.persistence": "Saving and loading",
    "reliacal.io": "Prediction files",
    "reliacal.datasets": "Demo data and tiny models",
    "reliacal.metrics.torchmetrics": "A torchmetrics Metric",
}


def _write_api_pages(srcdir: Path) -> None:
    import importlib

    folder = srcdir / "api"
    folder.mkdir(exist_ok=True)
    entries = []
    for name, title in API_PACKAGES.items():
        module = importlib.import_module(name)
        names = sorted(getattr(module, "__all__", []))
        underline = "=" * len(f"{title} (``{name}``)")
        lines = [
            f"{title} (``{name}``)",
            underline,
            "",
            f".. automodule:: {name}",
            "   :no-members:",
            "",
            f".. currentmodule:: {name}",
            "",
            ".. autosummary::",
            "   :toctree: generated",
            "   :nosignatures:",
            "",
            *[f"   {item}" for item in names],
            "",
        ]
        text = "\n".join(lines)
        page = folder / f"{name}.rst"
        if not page.exists() or page.read_text() != text:
            page.write_text(text)
        entries.append(f"   api/{name}")
    index = "\n".join(
        [
            "API reference",
            "=============",
            "",
            "Every public name of every package, from its docstring.",
            "",
            ".. toctree::",
            "   :maxdepth: 1",
            "",
            *entries,
            "",
        ]
    )
    target = srcdir / "api.rst"
    if not target.exists() or target.read_text() != index:
        target.write_text(index)


# Broken references to reliacal's own objects are errors; references to other
# libraries (numpy, torch, scikit-learn) cannot resolve offline and are ignored.
nitpicky = True
nitpick_ignore_regex = [(r"py:.*", r"(?!reliacal\b).*"), (r"py:.*", r"reliacal\..*\._.*")]


# ------------------------------------------------------------ benchmark pages
# The measured results are shown as written by the benchmark scripts: each page
# includes one file of benchmarks/results/, so the site cannot disagree with them.
def _write_benchmark_pages(srcdir: Path) -> None:
    results = ROOT / "benchmarks" / "results"
    folder = srcdir / "benchmarks"
    folder.mkdir(exist_ok=True)
    names = []
    for path in sorted(results.glob("*.md")):
        text = f"```{{include}} ../../benchmarks/results/{path.name}\n:heading-offset: 0\n```\n"
        page = folder / path.name
        if not page.exists() or page.read_text() != text:
            page.write_text(text)
        names.append(path.stem)
    index = "\n".join(
        [
            "Benchmark results",
            "=================",
            "",
            "Each page is a results file of the repository's ``benchmarks/results/`` folder,",
            "as the script named at its top wrote it (the command is on each page).",
            "",
            ".. toctree::",
            "   :maxdepth: 1",
            "",
            *[f"   benchmarks/{name}" for name in names],
            "",
        ]
    )
    target = srcdir / "benchmarks.rst"
    if not target.exists() or target.read_text() != index:
        target.write_text(index)


# Written when this file is read, before autosummary looks for the pages' stubs.
_write_api_pages(Path(__file__).resolve().parent)
_write_benchmark_pages(Path(__file__).resolve().parent)


def _skip_member(app, what, name, obj, skip, options):
    # scikit-learn adds set_*_request and get_metadata_routing to every estimator; their
    # documentation lives in scikit-learn's, not here.
    if name == "get_metadata_routing" or (name.startswith("set_") and name.endswith("_request")):
        return True
    return None


def _top_level_reference(app, env, node, contnode):
    """Resolve ``reliacal.Name`` (a name the package loads lazily) to its documented home."""
    import reliacal

    target = node.get("reftarget", "")
    module, _, name = target.rpartition(".")
    if node.get("refdomain") != "py" or module != "reliacal" or name not in reliacal._PUBLIC:
        return None
    canonical = f"{reliacal._PUBLIC[name]}.{name}"
    domain = env.get_domain("py")
    return domain.resolve_xref(
        env, node["refdoc"], app.builder, node["reftype"], canonical, node, contnode
    )


def setup(app):
    app.connect("autodoc-skip-member", _skip_member)
    app.connect("missing-reference", _top_level_reference)
