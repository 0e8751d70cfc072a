"""benchmarks/paper_scale.py: the paper-scale harness of CalAttn and DIRECTOR.

benchmarks/ is not a package (and pytest ignores it), so the script is imported
from its path. The stand-in run goes through the same data, weights, training
and report code as a GPU run, on a tiny ViT and generated images.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def paper_scale():
    spec = importlib.util.spec_from_file_location(
        "paper_scale", ROOT / "benchmarks" / "paper_scale.py"
    )
    module = importlib.util.module_from_spec(spec)
    # Registered first: its dataclasses look their module up by name.
    sys.modules["paper_scale"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["paper_scale"]


def table_rows(text: str, first_cell: str) -> dict[str, list[str]]:
    """The cells of the markdown rows whose first cell starts with ``first_cell``."""
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0].startswith(first_cell):
            rows[cells[0]] = cells
    return rows


@pytest.mark.slow
# The stand-in's tiny fits warn (a student below its teacher, a temperature at its bound):
# its numbers mean nothing, only the code path is under test.
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_stand_in_runs_both_protocols_end_to_end(paper_scale, tmp_path, one_torch_thread):
    output = tmp_path / "report.md"
    checkpoints = tmp_path / "checkpoints"
    argv = ["--stand-in", "--protocol", "both", "--checkpoint-dir", str(checkpoints)]
    assert paper_scale.main([*argv, "--output", str(output)]) == 0
    text = output.read_text()
    assert f"`python benchmarks/paper_scale.py {' '.join(argv)} --output {output}`" in text
    assert "STAND-IN" in text and text.count("Deviations from the authors' code") == 2
    # One folder per fit, what a rerun resumes from, and the stand-in's images it reads again.
    assert sorted(p.name for p in checkpoints.iterdir()) == [
        "calattn",
        "director",
        "plain",
        "stand-in-data",
        "teacher",
    ]
    calattn = table_rows(text, "plain fine-tuning") | table_rows(text, "CalAttn")
    plain_parameters = int(calattn["plain fine-tuning"][-2].replace(",", ""))
    head_parameters = int(calattn["CalAttn"][-2].replace(",", "")) - plain_parameters
    assert head_parameters == 128 * 32 + 257  # the paper's 128 D + 257, D = 32
    director = table_rows(text, "teacher") | table_rows(text, "DIRECTOR")
    assert set(director) == {"teacher", "teacher + TS", "DIRECTOR, 1 path", "DIRECTOR, 4 paths"}
    for cells in [*calattn.values(), *director.values()]:
        accuracy, ece = float(cells[1]), float(cells[2])
        assert 0 <= accuracy <= 100 and 0 <= ece <= 100
        # Accuracy on 60 test images is a multiple of 1/60 (printed to 2 decimals).
        assert abs(accuracy * 60 / 100 - round(accuracy * 60 / 100)) < 0.01
    # A temperature never changes the predicted class.
    assert director["teacher"][1] == director["teacher + TS"][1]
    assert re.search(r"OOD \(ood\), 5 corruption x severity sets of 60", text)

    # A rerun resumes every finished fit and reports the same numbers.
    again = tmp_path / "again.md"
    assert paper_scale.main([*argv, "--output", str(again)]) == 0
    rows = table_rows(again.read_text(), "DIRECTOR")
    assert [cells[1:5] for cells in rows.values()] == [
        director[name][1:5] for name in ("DIRECTOR, 1 path", "DIRECTOR, 4 paths")
    ]


def test_missing_data_names_what_to_put_where_and_downloads_nothing(paper_scale, tmp_path):
    weights = tmp_path / "weights.pth"
    weights.write_bytes(b"")
    argv = ["--model", "vit_tiny_patch16_224", "--weights", str(weights)]
    with pytest.raises(SystemExit, match="cifar-10-batches-py.*never downloads"):
        paper_scale.main([*argv, "--dataset", "cifar10", "--data-dir", str(tmp_path)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["weights.pth"]
    with pytest.raises(SystemExit, match="--weights is required"):
        paper_scale.main(["--dataset", "cifar10", "--data-dir", str(tmp_path)])


def test_missing_weights_file_is_named(paper_scale, tmp_path):
    with pytest.raises(SystemExit, match="is not a file.*never downloads"):
        paper_scale.make_model("vit_tiny_patch16_224", tmp_path / "absent.pth", 3)


def test_weights_are_read_from_the_file_with_a_new_classifier(paper_scale, tmp_path):
    import timm

    sizes = dict(img_size=16, patch_size=8, embed_dim=16, depth=1, num_heads=2)
    torch.manual_seed(0)
    source = timm.create_model("vit_tiny_patch16_224", pretrained=False, **sizes)
    torch.save(source.state_dict(), tmp_path / "weights.pth")
    model = paper_scale.make_model("vit_tiny_patch16_224", tmp_path / "weights.pth", 3, **sizes)
    loaded, original = model.state_dict(), source.state_dict()
    for key, value in loaded.items():
        if key.startswith("head."):
            assert value.shape[0] == 3  # the new 3-class classifier
        else:
            assert torch.equal(value, original[key]), key
    # A file of another architecture is refused, naming the mismatch.
    torch.save({"unrelated.weight": torch.zeros(2)}, tmp_path / "other.pth")
    with pytest.raises(ValueError, match="does not fit"):
        paper_scale.make_model("vit_tiny_patch16_224", tmp_path / "other.pth", 3, **sizes)


def test_milestones_keep_the_papers_fractions(paper_scale):
    assert paper_scale.scaled_milestones(350) == (150, 250)
    assert paper_scale.scaled_milestones(35) == (15, 25)
    assert paper_scale.scaled_milestones(3) == (1, 2)  # 1.29 and 2.14 rounded


def test_augmentation_keeps_shape_and_leaves_a_constant_image_unchanged(paper_scale):
    augment = paper_scale.RandomCropFlip()
    x = torch.full((5, 3, 16, 16), 0.3)
    out = augment(x)
    assert out.shape == x.shape and torch.equal(out, x)
    ramp = torch.arange(16.0).expand(2, 3, 16, 16).contiguous()
    out = augment(ramp)
    # Each row of a crop of a horizontal ramp (reflect padded) stays a run of +-1 steps.
    assert set(np.unique(np.abs(np.diff(out.numpy(), axis=-1)))) <= {0.0, 1.0}
