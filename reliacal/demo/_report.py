"""The demo's report folder: figures, prediction arrays, ``report.md`` and ``report.html``.

:func:`reliacal.demo.run_demo` computes the table and the probabilities; the
writer here turns them into files (the HTML page embeds the figures, so it is
readable on its own) and remembers every path it wrote.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ReportWriter", "slug"]


class ReportWriter:
    """Writes the demo's files and remembers them (for the report and the result)."""

    def __init__(self, output_dir: Path):
        self.output_dir = output_dir
        self.files: list[Path] = []
        self.sections: list[tuple[str, list[tuple[str, Path]]]] = []

    def _save_figure(self, figure, name: str) -> Path:
        import matplotlib.pyplot as plt

        path = self.output_dir / name
        figure.savefig(path, dpi=110)
        plt.close(figure)
        self.files.append(path)
        return path

    def figures(self, splits, probabilities, outputs, slugs, training_result) -> None:
        import matplotlib.pyplot as plt

        from reliacal.plot import plot_reliability_diagrams

        labels = np.arange(10)
        displays = plot_reliability_diagrams(
            splits.y_test, probabilities, labels=labels, interval="wilson"
        )
        figure = next(iter(displays.values())).figure_
        diagrams = self._save_figure(figure, "reliability_diagrams.png")
        self.sections.append(
            (
                "Reliability diagrams (test split)",
                [
                    (
                        "One panel per method: accuracy per confidence bin with its 95% "
                        "Wilson interval, the gap between bar top and diagonal hatched in red, "
                        "samples per bin below.",
                        diagrams,
                    ),
                ],
            )
        )
        for name, output in outputs.items():
            extra = [
                (title, self._save_figure(figure, f"{slugs[name]}_{slug(title)}.png"))
                for title, figure in output.figures.items()
            ]
            if extra:
                self.sections.append((name, extra))

        figure, ax = plt.subplots(figsize=(6.0, 3.5), layout="constrained")
        epochs = [row["epoch"] for row in training_result.history]
        ax.plot(epochs, [row["train_loss"] for row in training_result.history], label="train loss")
        if "val_loss" in training_result.history[0]:
            ax.plot(
                epochs,
                [row["val_loss"] for row in training_result.history],
                label="validation loss",
            )
        ax.set_xlabel("epoch")
        ax.set_ylabel("cross-entropy")
        ax.legend()
        curve = self._save_figure(figure, "training.png")
        self.sections.append(("Training of the classifier", [("Loss per epoch.", curve)]))

    def arrays(self, splits, probabilities, slugs, calibration_logits, test_logits) -> None:
        arrays = {f"probs_{slugs[name]}": probs for name, probs in probabilities.items()}
        files = {
            "predictions.npz": {"labels": splits.y_test, **arrays},
            "calibration_logits.npz": {
                "logits": calibration_logits,
                "labels": splits.y_calibration,
            },
            "test_logits.npz": {"logits": test_logits, "labels": splits.y_test},
        }
        for name, content in files.items():
            path = self.output_dir / name
            np.savez_compressed(path, **content)
            self.files.append(path)

    def reports(
        self, report, setup: list[str], last_key: str, significance=None, findings=()
    ) -> tuple[Path, Path]:
        table = report.copy()
        table.index.name = "method"
        commands = [
            f"reliacal evaluate predictions.npz --probs-key {last_key} --plot diagram.png",
            "reliacal calibrate calibration_logits.npz test_logits.npz --method temperature",
        ]
        markdown = ["# reliacal demo: calibrating a tiny ViT on the digits", ""]
        markdown += [f"- {line}" for line in setup] + ["", "## Metrics (test split)", ""]
        markdown += [_markdown_table(table), "", _COLUMN_NOTE, ""]
        if significance is not None:
            markdown += [f"## {_SIGNIFICANCE_TITLE}", "", _markdown_table(significance), ""]
            markdown += [_SIGNIFICANCE_NOTE, ""]
        # The claims the tables support (which is lowest, which gains are significant).
        claims = [line.removeprefix("- ") for line in findings]
        if claims:
            markdown += ["## In short", ""] + [f"- {line}" for line in claims] + [""]
        for title, figures in self.sections:
            markdown += [f"## {title}", ""]
            for caption, path in figures:
                markdown += [f"{caption}", "", f"![{caption}]({path.name})", ""]
        markdown += ["## Files", ""]
        markdown += [f"- `{path.name}`" for path in self.files]
        markdown += [
            "",
            "From a shell, inside this folder: evaluate a method's predictions again, or refit "
            "temperature scaling from the logits:",
            "",
            "```",
        ]
        markdown += commands + ["```", ""]
        report_path = self.output_dir / "report.md"
        report_path.write_text("\n".join(markdown), encoding="utf-8")

        body = ["<h1>reliacal demo: calibrating a tiny ViT on the digits</h1>", "<ul>"]
        body += [f"<li>{_inline_html(line)}</li>" for line in setup]
        body += ["</ul>", "<h2>Metrics (test split)</h2>"]
        body += [_html_table(table, "metrics", float_format=lambda value: f"{value:.4f}")]
        body += [f"<p>{html.escape(_COLUMN_NOTE)}</p>"]
        if significance is not None:
            body += [f"<h2>{html.escape(_SIGNIFICANCE_TITLE)}</h2>"]
            body += [_html_table(significance, "significance")]
            body += [f"<p>{html.escape(_SIGNIFICANCE_NOTE)}</p>"]
        if claims:
            body += ["<h2>In short</h2>", "<ul>"]
            body += [f"<li>{html.escape(line)}</li>" for line in claims] + ["</ul>"]
        for title, figures in self.sections:
            body.append(f"<h2>{html.escape(title)}</h2>")
            for caption, path in figures:
                encoded = base64.b64encode(path.read_bytes()).decode("ascii")
                body.append(
                    f"<figure><img src='data:image/png;base64,{encoded}' "
                    f"alt='{html.escape(caption)}'><figcaption>{html.escape(caption)}"
                    "</figcaption></figure>"
                )
        body += ["<h2>Reproduce from a shell</h2>", "<pre>"]
        body += [html.escape(command) for command in commands] + ["</pre>"]
        html_path = self.output_dir / "report.html"
        html_path.write_text(_HTML_PAGE.format(body="\n".join(body)), encoding="utf-8")
        self.files += [report_path, html_path]
        return report_path, html_path


_COLUMN_NOTE = (
    "ece: top-label ECE with 15 equal-width bins; adaptive_ece: 15 equal-mass bins; "
    "classwise_ece: mean over classes; smooth_ece: kernel-smoothed ECE; nll: negative "
    "log-likelihood; brier: multiclass Brier score (range 0..2); signed_ece: mean "
    "confidence minus accuracy (positive: over-confident); seconds: time to fit and predict."
)

_SIGNIFICANCE_TITLE = "Is the gain significant? (test split, paired bootstrap)"
_SIGNIFICANCE_NOTE = (
    "Each cell: the method's metric minus the reference's, and the 95% interval of that "
    "difference over 1,000 resamples of the test rows (the same rows for every method); "
    "* marks an interval that excludes zero. Negative is better."
)

_HTML_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>reliacal demo</title>
<style>
body {{ font-family: sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; }}
.table {{ overflow-x: auto; }}
table {{ border-collapse: collapse; font-size: 0.9em; }}
th, td {{ padding: 0.3em 0.6em; text-align: right; border-bottom: 1px solid #ddd; }}
th {{ vertical-align: bottom; }}
td {{ white-space: nowrap; }}
th:first-child, td:first-child {{ text-align: left; }}
td:first-child {{ font-weight: 600; }}
table.metrics th:last-child, table.metrics td:last-child {{ text-align: left; }}
table.metrics td:last-child {{ white-space: normal; min-width: 12em; }}
img {{ max-width: 100%; }}
figcaption {{ color: #555; font-size: 0.9em; }}
</style></head>
<body>
{body}
</body></html>
"""


def slug(text: str) -> str:
    """A file-name part for ``text``: lower-case letters and digits joined by hyphens.

    Examples
    --------
    >>> slug("CalAttn + TS")
    'calattn-ts'
    """
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unnamed"


def _inline_html(text: str) -> str:
    escaped = html.escape(text)
    return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", escaped)


def _html_table(frame, css_class: str, float_format=None) -> str:
    """``frame`` as an HTML table with one header row (the index's name heads its column),
    in a box that scrolls sideways when the table is wider than the page."""
    table = frame.reset_index().to_html(
        index=False, border=0, classes=css_class, float_format=float_format
    )
    return f"<div class='table'>{table}</div>"


def _markdown_table(frame) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float | np.floating):
            return f"{value:.4f}"
        return str(value).replace("|", "\\|")

    header = [frame.index.name or ""] + [str(column) for column in frame.columns]
    rows = [[str(index)] + [cell(value) for value in row] for index, row in frame.iterrows()]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
