import pytest
import torch

from reliacal._device import resolve_device, to_device


def test_auto_picks_cuda_only_when_present():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert resolve_device(None).type == expected


@pytest.mark.skipif(torch.cuda.is_available(), reason="only meaningful without a GPU")
def test_cuda_without_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="no CUDA device"):
        resolve_device("cuda")


def test_to_device_moves_nested_batches():
    batch = {"x": (torch.ones(2), [torch.zeros(1)]), "name": "keep"}
    moved = to_device(batch, torch.device("cpu"))
    assert moved["name"] == "keep"
    assert isinstance(moved["x"], tuple) and isinstance(moved["x"][1], list)
    assert torch.equal(moved["x"][0], torch.ones(2))


@pytest.mark.gpu
def test_to_device_reaches_cuda():
    moved = to_device((torch.ones(2),), resolve_device("cuda"))
    assert moved[0].is_cuda
