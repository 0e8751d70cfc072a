"""Two-process DDP run (gloo, CPU) against a single-process run, for test_training.py.

Run as ``python tests/training/_ddp_worker.py OUT_DIR``: writes ``single.pt`` (one process,
batch 8) and ``ddp.pt`` (two processes, batch 4 each, the same data order).

Written to pass on a loaded machine, every time:

- the rendezvous store is a ``TCPStore`` that this (parent) process opens on a port the
  system picks (port 0) and keeps open until both workers have joined: no guessed port
  to collide with, and no store that dies with a worker;
- every wait has a generous, explicit timeout (``TIMEOUT``), far above the run's length
  on an idle core;
- the workers meet at a barrier before tearing the process group down, so that neither
  closes its connections while the other still uses them (a gloo peer that vanishes
  mid-exchange aborts the other process: "terminate called without an active
  exception").
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from reliacal.training import TrainingConfig, fit_module

WORLD_SIZE = 2


def data():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(48, 3, generator=generator)
    y = (x[:, 0] - x[:, 1] > 0).long()
    return TensorDataset(x[:32], y[:32]), TensorDataset(x[32:], y[32:])


def model():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2))
    net[0].bias.requires_grad_(False)  # DDP must cope with frozen parameters
    return net


def config(batch_size, checkpoint_dir=None):
    return TrainingConfig(
        max_epochs=3,
        batch_size=batch_size,
        learning_rate=0.05,
        warmup_epochs=0.5,
        ema_decay=0.9,
        random_state=0,
        device="cpu",
        checkpoint_dir=checkpoint_dir,
    )


def train(batch_size, checkpoint_dir=None):
    net = model()
    initial = {k: v.clone() for k, v in net.state_dict().items()}
    train_data, validation_data = data()
    result = fit_module(
        net,
        F.cross_entropy,
        train_data,
        validation_data=validation_data,
        config=config(batch_size, checkpoint_dir),
    )
    return {
        "state": net.state_dict(),
        "initial": initial,
        "history_len": len(result.history),
        "val_ece": [entry["val_ece"] for entry in result.history],
    }


TIMEOUT = timedelta(minutes=10)
HOST = "127.0.0.1"


def worker(rank, out_dir, port):
    torch.set_num_threads(1)
    if sys.platform.startswith("linux"):
        # Containers often lack a resolvable hostname; the loopback device always works.
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    store = dist.TCPStore(HOST, port, WORLD_SIZE, is_master=False, timeout=TIMEOUT)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD_SIZE, timeout=TIMEOUT)
    try:
        outcome = train(
            batch_size=8 // WORLD_SIZE, checkpoint_dir=str(Path(out_dir) / "checkpoints")
        )
        if rank == 0:
            torch.save(outcome, Path(out_dir) / "ddp.pt")
        # Both are done with every collective before either closes its connections.
        dist.barrier()
    finally:
        dist.destroy_process_group()


def main(out_dir):
    torch.set_num_threads(1)
    torch.save(train(batch_size=8), Path(out_dir) / "single.pt")
    # Port 0: the system picks a free port, held by this process for the whole run.
    store = dist.TCPStore(
        HOST, 0, WORLD_SIZE, is_master=True, timeout=TIMEOUT, wait_for_workers=False
    )
    mp.spawn(worker, args=(out_dir, store.port), nprocs=WORLD_SIZE, join=True)


if __name__ == "__main__":
    main(sys.argv[1])
