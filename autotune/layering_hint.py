"""Point at ``--batch-norm`` when history's runs of a model used another layering.

Where batch norm runs decides which kernels a model has, and so their workload keys: a
history tuned with batch norm separate (the only layering before 2026-11-24) gives no
exact hit to a tune or compile that folds it into the weights. Without a word, a user
sees only "0 of 27 layers from history". Runs store their layering in their params, so
the hint costs one query and no second model load.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping

#: The layering of runs recorded before runs stored one: batch norm was always separate.
LAYERING_BEFORE_RECORDED = "separate"


def run_layering(run: Mapping[str, Any]) -> str:
    return str((run.get("params") or {}).get("batch_norm") or LAYERING_BEFORE_RECORDED)


def layering_hint(runs: Iterable[Mapping[str, Any]], *, model: str, target_key: str, batch_norm: str) -> str | None:
    """A one-line note when ``model`` was tuned on ``target_key`` only with other layerings.

    Silent when any run of the model on that target used ``batch_norm``: its records then
    match, and a second layering is the user's own choice.
    """
    counts = Counter(
        run_layering(run) for run in runs if run.get("model") == model and run.get("target_key") == target_key
    )
    if not counts or counts.get(batch_norm):
        return None
    others = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    total = sum(counts.values())
    runs_text = f"{total} run{'s' if total > 1 else ''} of {model} on this target"
    its = "their" if total > 1 else "its"
    if len(others) == 1:
        made = f"{'all ' if total > 1 else ''}tuned with --batch-norm {others[0][0]}"
    else:
        made = ", ".join(f"{n} with --batch-norm {name}" for name, n in others)
    return (
        f"history has {runs_text}, {made}; {its} layers have other keys than --batch-norm {batch_norm} "
        f"gives, so {its} winners do not apply as they are: pass --batch-norm {others[0][0]} to reuse them"
    )


def history_layering_hint(store, spec, *, target_key: str, batch_norm: str) -> str | None:
    """:func:`layering_hint` over ``store``'s runs of the loaded model ``spec``.

    None without a store, and for a model with no batch norm: every layering gives it
    the same layers, so another layering's runs are exact hits already."""
    if store is None or not spec.batch_norms:
        return None
    return layering_hint(store.runs(), model=spec.name, target_key=target_key, batch_norm=batch_norm)
