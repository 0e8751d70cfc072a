"""Sphinx configuration of reliacal's documentation site (``make docs``).

The build runs offline: no intersphinx inventories are fetched, the gallery
examples run on bundled data, and every warning is an error (``-W`` in the
Makefile), so a broken cross-reference or a docstring that does not render
fails the build.
"""

from __future__ import annotations

import inspect
import os
import sys
import typing
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
    # The examples print what they show; the repr of a last line that draws figures
    # (a dict of display objects) is not output worth a block.
    "capture_repr": (),
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
    "reliacal.metrics.modes": "Calibration modes",
    "reliacal.finetune.losses": "Training losses",
}


def _public_names(module) -> list[str]:
    """``module.__all__``, else the functions and classes it defines without an underscore."""
    if hasattr(module, "__all__"):
        return sorted(module.__all__)
    return sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isfunction(value) or inspect.isclass(value))
        and value.__module__ == module.__name__
    )


def _write_if_changed(path: Path, text: str) -> None:
    # An unchanged page keeps its time stamp, so that Sphinx does not rebuild it.
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _write_toctree(path: Path, title: str, intro: list[str], entries: list[str]) -> None:
    """An index page: ``title``, the lines of ``intro``, then a toctree of ``entries``."""
    lines = [title, "=" * len(title), "", *intro, "", ".. toctree::", "   :maxdepth: 1", ""]
    _write_if_changed(path, "\n".join([*lines, *(f"   {entry}" for entry in entries), ""]))


def _write_api_pages(srcdir: Path) -> None:
    import importlib

    folder = srcdir / "api"
    folder.mkdir(exist_ok=True)
    entries = []
    for name, title in API_PACKAGES.items():
        module = importlib.import_module(name)
        names = _public_names(module)
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
        _write_if_changed(folder / f"{name}.rst", "\n".join(lines))
        entries.append(f"api/{name}")
    _write_toctree(
        srcdir / "api.rst",
        "API reference",
        ["Every public name of every package, from its docstring."],
        entries,
    )


# Broken references to reliacal's own objects are errors (relative ones included);
# references to other libraries cannot resolve offline (no intersphinx inventory is
# fetched), so only those are ignored, by name.
nitpicky = True
_OTHER_LIBRARIES = (
    "torch|numpy|np|pandas|sklearn|scipy|timm|transformers|torchmetrics|dask|matplotlib"
    "|collections|pathlib|os|typing|fnmatch"
)
nitpick_ignore_regex = [
    (r"py:.*", rf"(?:{_OTHER_LIBRARIES})(?:\..*)?"),
    # torch's own docstrings, which nn.Module subclasses inherit (forward, train), and
    # type hints of user-facing signatures name these classes without their module.
    (
        r"py:class",
        r"Module|nn\.Module|Dropout|BatchNorm|VisionTransformer|BertForSequenceClassification",
    ),
    # A builtin generic in a postponed annotation (``list[dict[str, Any]]``), which
    # autodoc splits at its first comma.
    (r"py:class", r"(?:list|dict|tuple|set)\[.*"),
    # The opaque pass object that CalibrationState.refinement() hands to refine(): its
    # methods are the streaming code's, not a user's, so it has no page.
    (r"py:class", r"reliacal\.metrics\._refinement\.Refinement|Refinement"),
]


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
        _write_if_changed(folder / path.name, text)
        names.append(f"benchmarks/{path.stem}")
    _write_toctree(
        srcdir / "benchmarks.rst",
        "Benchmark results",
        [
            "Each page is a results file of the repository's ``benchmarks/results/`` folder,",
            "as the script named at its top wrote it (the command is on each page).",
        ],
        names,
    )


# Written when this file is read, before autosummary looks for the pages' stubs.
_write_api_pages(Path(__file__).resolve().parent)
_write_benchmark_pages(Path(__file__).resolve().parent)


def _skip_member(app, what, name, obj, skip, options):
    # scikit-learn adds set_*_request and get_metadata_routing to every estimator; their
    # documentation lives in scikit-learn's, not here.
    if name == "get_metadata_routing" or (name.startswith("set_") and name.endswith("_request")):
        return True
    return None


_HOMES: dict[int, str] = {}


def _documented_homes() -> dict[int, str]:
    """Map each class and function of the API pages (by identity) to its page's name."""
    import importlib

    if not _HOMES:
        for package in API_PACKAGES:
            module = importlib.import_module(package)
            for name in _public_names(module):
                value = getattr(module, name)
                if inspect.isclass(value) or inspect.isfunction(value):
                    _HOMES.setdefault(id(value), f"{package}.{name}")
    return _HOMES


def _lookup(target: str):
    """The object that the dotted path ``target`` names, or None."""
    import importlib

    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for part in parts[cut:]:
                value = getattr(value, part)
        except AttributeError:
            return None
        return value
    return None


def _documented_home_reference(app, env, node, contnode):
    """Resolve a path to a documented object under another name to its API page.

    ``reliacal.Name`` (a name the package loads lazily), the defining module's path
    (``reliacal.calibrators._base.BaseCalibrator``, as signatures and base lists
    write it) and a re-export all land on the page of the public name; a path to
    anything else stays unresolved, so a reference to a private helper fails the build.
    """
    target = node.get("reftarget", "")
    if node.get("refdomain") != "py" or not target.startswith("reliacal."):
        return None
    value = _lookup(target)
    if isinstance(value, typing.TypeVar):
        return contnode  # a signature's type variable: a placeholder, with no page of its own
    home = _documented_homes().get(id(value))
    if home is None or home == target:
        return None
    domain = env.get_domain("py")
    return domain.resolve_xref(
        env, node["refdoc"], app.builder, node["reftype"], home, node, contnode
    )


def _public_bases(app, name, obj, options, bases):
    """Show a class's documented bases: an undocumented reliacal base gives way to its own."""
    homes = _documented_homes()
    shown: list[type] = []

    def add(base: type) -> None:
        if base.__module__.split(".")[0] == "reliacal" and id(base) not in homes:
            for parent in base.__bases__:
                add(parent)
        elif base not in shown:
            shown.append(base)

    for base in list(bases):
        add(base)
    bases[:] = shown


def _announce_api_pages(app):
    # autosummary writes the stubs of the pages the environment knows, at builder-inited;
    # on an incremental build that is the previous build's list, so a package just added
    # to API_PACKAGES would get its stubs a build late (and then stay out of its toctree).
    app.env.found_docs.update(f"api/{name}" for name in API_PACKAGES)


def setup(app):
    app.connect("builder-inited", _announce_api_pages, priority=400)
    app.connect("autodoc-skip-member", _skip_member)
    app.connect("missing-reference", _documented_home_reference)
    app.connect("autodoc-process-bases", _public_bases)
