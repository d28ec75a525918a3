"""How much each layer feature counts in the match score: what the cost models split on,
smoothed across retrainings and runs and kept in history, per target kind and op class.

Half of the weight stays spread evenly (``IMPORTANCE_FLOOR``), and a first model's
importances are blended into even weights, not taken as they are: one model's splits can
sit on a single feature, and with all weight on log2 FLOPs ResNet-18's 7x7 stride-2 stem
scored 0.96 against its 3x3 convs and went to the guided GA, seeded from configs of
another shape. Importance reweighs the features; it never makes a kernel size or a
stride count for nothing.
"""

from __future__ import annotations

import json
from typing import Any

#: Share of the match score's feature weight spread evenly, whatever the models learned.
IMPORTANCE_FLOOR = 0.5
#: Weight of what was learned before against a new model's importances.
DECAY = 0.7


class LearnedImportance:
    """The layer-feature weights of one history for one target kind."""

    def __init__(self, store: Any, target_kind: str) -> None:
        self.store = store
        self.target_kind = target_kind

    def key(self, op_class: str) -> str:
        """History's meta key of an op class's smoothed importances."""
        return f"importance:{self.target_kind}:{op_class}"

    def weights(self, layer: Any) -> list[float] | None:
        """The match score's weights of ``layer``'s features, or None (even weights) where
        nothing was learned for its op class, or a vector of another length was (another
        feature set)."""
        learned = self._stored(layer.op_class)
        n = len(layer.features())
        if not learned or len(learned) != n:
            return None
        return [IMPORTANCE_FLOOR / n + (1 - IMPORTANCE_FLOOR) * w for w in learned]

    def learn(self, layer: Any, tuner: Any, decay: float = DECAY) -> None:
        """Blend ``tuner``'s layer-feature importances (model-based tuners have them) into
        what history keeps for the layer's op class."""
        from autotune.search.similarity import importance_weights

        raw = getattr(tuner, "importance", None)
        if raw is None:
            return
        n = len(layer.features())
        fresh = importance_weights(raw, n)
        old = self._stored(layer.op_class)
        before = old if old is not None and len(old) == n else [1.0 / n] * n  # the even prior
        blended = [decay * o + (1 - decay) * f for o, f in zip(before, fresh)]
        total = sum(blended) or 1.0
        self.store.set_meta(self.key(layer.op_class), json.dumps([float(w) / total for w in blended]))

    def _stored(self, op_class: str) -> list[float] | None:
        text = self.store.get_meta(self.key(op_class))
        return [float(w) for w in json.loads(text)] if text else None
