"""CalAttn's cost on the pre-trained MiniLM: parameters, training step, prediction (issue 15).

The issue asks for a step-time overhead under 5% on MiniLM. Plain fine-tuning
(``calibration_head=False``) and CalAttn (the scale head on the [CLS] token,
D = 384) are built from the same pre-trained all-MiniLM-L6-v2 with a new
26-class classifier and timed as ``calattn_digits.py`` times its ViTs
(``step_times``): forward, CE + 0.1 Brier, backward, gradient clipping and an
AdamW step, the two networks in alternation, CPU time of a one-thread
process. The batches are real: the first ``--batches`` batches of 32 noun
glosses of ``text_wordnet.py``'s seed-0 training split, each padded to its
longest gloss (at most 32 word pieces), cycled over ``--steps`` steps. Step
``i`` of both networks trains on the same batch, so every step gives one
paired ratio; the overhead is the median of those ratios (with its
quartiles), which neither the batches' different lengths nor a burst of
load on the shared machine moves much. The prediction pass (forward only,
no gradient, the evaluation mode) is timed the same way.

Run from the repository root (WordNet and the model as for
``text_wordnet.py``):

    .venv/bin/python benchmarks/calattn_cost_minilm.py [--steps 200] [--batches 20]

``--steps 10 --batches 2 --output /tmp/cost.md`` is a smoke run.
"""

from __future__ import annotations

import argparse
import itertools
import statistics

import _common
import numpy as np
import torch
from _timing import alternating_times, step_times
from _wordnet_task import Budget, build_data, loader, pretrained_minilm
from torch.utils.data import DataLoader, Subset

from reliacal.finetune import CalAttnFinetuner

BATCH_SIZE = 32


def built_networks(data: dict) -> dict[str, CalAttnFinetuner]:
    """Plain fine-tuning and CalAttn from the same weights, built by a one-batch fit.

    Only the networks matter here: one epoch over 32 glosses builds them (the
    scale head, the optimiser's parameter groups) without the full training.
    """
    glosses = Subset(data["train"], range(BATCH_SIZE))
    models = {}
    for name, head in (("baseline", False), ("CalAttn", True)):
        model = CalAttnFinetuner(
            pretrained_minilm(data["n_classes"], seed=0),
            calibration_head=head,
            lambda_brier=0.1,
            max_epochs=1,
            batch_size=BATCH_SIZE,
            validation_fraction=0.0,
            device="cpu",
            random_state=0,
        )
        models[name] = model.fit(DataLoader(glosses, BATCH_SIZE, collate_fn=data["collate"]))
    return models


def real_batches(data: dict, n_batches: int) -> list[tuple[dict, torch.Tensor]]:
    """The first ``n_batches`` training batches as ``(inputs, labels)`` pairs."""
    pairs = []
    for batch in itertools.islice(loader(data, "train", BATCH_SIZE), n_batches):
        inputs = {key: value for key, value in batch.items() if key != "labels"}
        pairs.append((inputs, batch["labels"]))
    return pairs


def forward_times(baseline_module, calattn_module, batches, repeats) -> dict[str, list]:
    """CPU seconds of each prediction pass of each network, in alternation as the steps."""
    modules = {"baseline": baseline_module.eval(), "CalAttn": calattn_module.eval()}
    passes = {name: lambda batch, m=module: m(batch[0]) for name, module in modules.items()}
    with torch.no_grad():
        return alternating_times(passes, batches, repeats)


def cost_row(what: str, times: dict[str, list]) -> str:
    """One table row: median milliseconds of each network and the paired overhead."""
    ratios = np.array(times["CalAttn"]) / np.array(times["baseline"])
    low, middle, high = 100 * (np.percentile(ratios, [25, 50, 75]) - 1)
    return (
        f"| {what} | {len(ratios)} | {1000 * statistics.median(times['baseline']):.1f} | "
        f"{1000 * statistics.median(times['CalAttn']):.1f} | {middle:+.1f}% | "
        f"{low:+.1f}% to {high:+.1f}% |"
    )


def report(models, train_times, predict_times, n_batches, lengths, argv, load_before) -> str:
    calattn = models["CalAttn"]
    extra, backbone = calattn.n_extra_parameters_, calattn.n_backbone_parameters_
    padded = f"{min(lengths)}" if min(lengths) == max(lengths) else f"{min(lengths)}-{max(lengths)}"
    return "\n".join(
        [
            *_common.header(
                "CalAttn's cost on the pre-trained MiniLM", __file__, argv, load_before=load_before
            ),
            f"Networks: all-MiniLM-L6-v2 with a new {len(models['baseline'].classes_)}-class "
            f"classifier, plain (scale fixed to 1) and with CalAttn's scale head on the [CLS] "
            f"token (D = {calattn.network_.in_features}). Batches: the first {n_batches} "
            f"training batches of {BATCH_SIZE} noun glosses of text_wordnet.py's seed-0 split, "
            f"padded to {padded} word pieces, cycled; one thread, CPU "
            "time, the two networks in alternation on the same batch.",
            "",
            f"Parameters: {extra:,} in the scale head against {backbone:,} in the backbone "
            f"and classifier ({100 * extra / backbone:.2f}%).",
            "",
            "| pass | steps | plain (ms, median) | CalAttn (ms, median) | overhead (median of "
            "paired ratios) | quartiles |",
            "|---|---|---|---|---|---|",
            cost_row("training step (CE + 0.1 Brier, backward, clip, AdamW)", train_times),
            cost_row("prediction (forward, no gradient)", predict_times),
            "",
        ]
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="timed steps per network")
    parser.add_argument("--batches", type=int, default=20, help="distinct batches cycled")
    parser.add_argument("--wordnet-dir", default=None, help="folder with data.noun")
    _common.add_output_argument(parser, "calattn_cost_minilm.md")
    args = parser.parse_args(argv)
    _common.limit_threads(1)
    data = build_data(Budget(), 0, args.wordnet_dir)
    models = built_networks(data)
    batches = real_batches(data, args.batches)
    lengths = [inputs["input_ids"].shape[1] for inputs, _ in batches]
    baseline, calattn = models["baseline"].network_, models["CalAttn"].network_
    load_before = _common.load_average()
    train_times = step_times(baseline, calattn, batches, args.steps)
    predict_times = forward_times(baseline, calattn, batches, args.steps)
    text = report(models, train_times, predict_times, args.batches, lengths, argv, load_before)
    _common.write_results(text, args.output)


if __name__ == "__main__":
    main()
