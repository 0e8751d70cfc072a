"""The alternating timer: training steps and predictions of two networks, paired call by call.

``calattn_digits.py`` times its ViTs with it and ``calattn_cost_minilm.py`` the
MiniLM; both import it from here (a benchmark script imports helper modules,
never another script).
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from reliacal.finetune.losses import brier_loss


def _train_step(module, optimizer, x, y):
    optimizer.zero_grad(set_to_none=True)
    outputs = module(x)
    logits = outputs.calibrated_logits
    loss = F.cross_entropy(logits, y) + 0.1 * brier_loss(logits, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
    optimizer.step()


def alternating_times(steps: dict, batches, repeats) -> dict[str, list]:
    """CPU seconds of each call of each of ``steps`` (name -> function of a batch).

    The steps run in alternation, call ``i`` of each on ``batches[i % len(batches)]``,
    so the lists pair up call by call, after 5 warm-up calls each. CPU time of this
    (single-threaded) process, not wall time: on a shared machine the wall clock
    also counts the time other jobs hold the cores.
    """
    times = {name: [] for name in steps}
    for step in steps.values():  # warm-up
        for i in range(5):
            step(batches[i % len(batches)])
    for i in range(repeats):
        for name, step in steps.items():
            start = time.process_time()
            step(batches[i % len(batches)])
            times[name].append(time.process_time() - start)
    return times


def step_times(baseline_module, calattn_module, batches, repeats) -> dict[str, list]:
    """CPU seconds of each training step of each network on ``batches`` of ``(x, y)``."""
    modules = {"baseline": baseline_module.train(), "CalAttn": calattn_module.train()}
    steps = {}
    for name, module in modules.items():
        optimizer = torch.optim.AdamW(module.parameters(), lr=1e-5)
        steps[name] = lambda batch, m=module, o=optimizer: _train_step(m, o, *batch)
    return alternating_times(steps, batches, repeats)
