"""Deterministic, plausible numbers for a DQN/PPO-like run: loss curves and model quality."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class EpochResult:
    train_loss: float
    val_loss: float


class LossCurve:
    """Exponential decay towards a floor with noise; each fold starts a little better."""

    def __init__(self, fold: int, rng: random.Random, decay: float = 0.25) -> None:
        self._rng = rng
        self._start = 2.0 * 0.85**fold + rng.uniform(0.0, 0.2)
        self._floor = 0.05 + rng.uniform(0.0, 0.05)
        self._decay = decay

    def epoch(self, epoch_in_fold: int) -> EpochResult:
        clean = self._floor + (self._start - self._floor) * math.exp(-self._decay * epoch_in_fold)
        train = clean * (1.0 + self._rng.uniform(-0.03, 0.03))
        val = clean * (1.08 + self._rng.uniform(-0.03, 0.05))
        return EpochResult(train_loss=train, val_loss=val)


def quality_from_loss(val_loss: float) -> tuple[float, float, float, float]:
    """Accuracy, F1, precision, recall that improve as the validation loss falls."""
    accuracy = max(0.0, min(1.0, 1.0 - 0.35 * val_loss))
    precision = max(0.0, min(1.0, accuracy - 0.02))
    recall = max(0.0, min(1.0, accuracy - 0.04))
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return accuracy, f1, precision, recall
