"""The example notebook runs top to bottom, so it cannot rot."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

EXAMPLES = Path(__file__).parent.parent / "examples"


def outputs_of(cell):
    texts, images = [], 0
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            texts.append(output.text)
        elif output.output_type in ("execute_result", "display_data"):
            texts.append(output.data.get("text/plain", ""))
            texts.append(output.data.get("text/html", ""))
            images += "image/png" in output.data
    return "".join(texts), images


def test_reliability_notebook_runs():
    path = EXAMPLES / "reliability_in_jupyter.ipynb"
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), (
        "commit the notebook without outputs"
    )
    client = NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=180,
        resources={"metadata": {"path": str(EXAMPLES)}},
    )
    client.execute()  # raises CellExecutionError with the cell's traceback on failure

    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    outputs = [outputs_of(cell) for cell in code_cells]
    text = "\n".join(value for value, _ in outputs)
    assert "probabilities from key 'predictions', labels from key 'ground_truth'" in text
    # docs/methods.md, the same split: ECE 5.65% uncalibrated, T 1.12.
    assert "ECE = 0.0565" in text
    assert "T = 1.12" in text
    assert "temperature scaling" in text and "uncalibrated" in text
    # The uncalibrated diagram, the side-by-side pair and the smooth overlay are figures.
    assert sum(images for _, images in outputs) >= 3
