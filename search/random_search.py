"""Uniform random search: the baseline every other tuner must beat."""

from __future__ import annotations

from autotune.search.tuner import Tuner
from autotune.templates.space import Config


class RandomTuner(Tuner):
    name = "random"

    def propose(self, n: int) -> list[Config]:
        out: list[Config] = []
        # Oversample so ask() still fills the batch after dropping repeats.
        for _ in range(n * 4):
            cfg = self.space.random_config(self.rng)
            if not self.is_seen(cfg):
                out.append(cfg)
        return out
