"""The experiment's history (the source layers' tuning runs) and each target's transfer
evidence, as ``autotune tune`` computes it.
"""

from __future__ import annotations

from collections import Counter

from history_guided.layers import source_layers
from history_guided.lockstep import Run, lockstep
from history_guided.progress import log


def build_history(store, target, cm, models, size, per_layer, seed, exclude: set[str], tuner_name: str = "random",
                  batch: int = 8, space_options: dict | None = None) -> Counter:
    """Records for the source models' layers (``models``: ``--source`` entries, see
    :func:`source_layers`), as the transfer evidence.

    ``random`` gives an unbiased sample per layer; ``xgb`` tunes each source layer (cold
    XGBoost, ``per_layer`` trials) the way an earlier ``autotune tune`` run would have,
    so history holds tuned winners, which is what users' history actually contains.

    Resumable: a layer that already holds ``per_layer`` records is skipped, and one cut
    short goes on from its records (told to the tuner first), so a history too big for
    one call of the lent GPU is finished by the next.

    Returns the source layers' records counted by the tuner that made them, as the
    records say: an imported or reused history need not be ``tuner_name``'s.
    """
    from search import make_tuner
    from search.tuner import TrialResult
    from templates.meta_schedule_space import MetaScheduleSpace

    layers = [layer for spec in models for layer in source_layers(spec, size)]  # a bad entry: before any write
    store.register_target(target.history_info())
    made_by: Counter = Counter()
    seen = set()
    runs = []
    for layer in layers:
        if layer.workload_key in seen or layer.workload_key in exclude:
            continue  # a target layer in history would be an exact hit, not transfer
        seen.add(layer.workload_key)
        store.register_workload(layer.workload_info())
        have = [r for r in store.records(workload_key=layer.workload_key, target_key=target.key) if r.status != "invalid"]
        made_by.update(r.tuner or "unknown" for r in have)
        if len(have) >= per_layer:
            continue
        space = MetaScheduleSpace(layer.func, target.tvm_target, name=layer.name, **(space_options or {}))
        tuner = make_tuner(tuner_name, space, seed=seed, layer_features=layer.features())
        if have:
            tuner.tell([TrialResult(r.config, r.latency_median, r.status) for r in have])

        def write(results, layer=layer, space=space):
            for res in results:
                store.add_record(workload_key=layer.workload_key, target_key=target.key, space_id=space.space_id, config=res.config,
                                 samples=[res.latency] if res.latency else [],
                                 status=res.status if res.status != "ok" or res.latency else "run_error", tuner=tuner_name)

        runs.append(Run(tuner, layer.workload_key, space, per_layer - len(have), write))
    if runs:
        log(f"history: {len(runs)} of {len(seen)} layers to complete, side by side ({made_by.total()} records so far)")
        lockstep(runs, cm, batch, lambda rnd, active: log(
            f"history: round {rnd}, {len(active)} layers unfinished, {cm.measured} measured; {cm.cost_summary()}"))
    made_by[tuner_name] += sum(run.done for run in runs)
    return +made_by  # without zero counts


def priors_for(store, layer, target, exclude: set[str], other_target_discount: float | None = None, space=None):
    """Match score and transfer evidence exactly as ``autotune tune`` computes them,
    with the experiment's target layers kept out: a reused or imported history may hold
    one (ResNet-50 has ResNet-18's 3x3 64->64 conv), which would be an exact hit.
    Without ``space``, records from a CPU of another vector width are taken as they are."""
    from autotune.target import float_lanes
    from autotune.tune import priors_from_match
    from history.match import match

    extra = {} if other_target_discount is None else {"other_target_discount": other_target_discount}
    m = match(store, layer.workload_info(), target.key, exclude=exclude, **extra)
    return m.score, priors_from_match(store, m, space=space, lanes=float_lanes(target.kind, target.arch))
