"""Estimators that train a network for calibration: CalAttn and DIRECTOR."""

from reliacal.finetune.calattn import CalAttnFinetuner
from reliacal.finetune.director import DiffusionReconfigurer

__all__ = ["CalAttnFinetuner", "DiffusionReconfigurer"]
