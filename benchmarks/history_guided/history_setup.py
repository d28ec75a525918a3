"""The experiment's history (the source layers' tuning runs) and each target's transfer
evidence, as ``autotune tune`` computes it.
"""

from __future__ import annotations

import os
from collections import Counter
from contextlib import closing

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
    from autotune.search import make_tuner
    from autotune.search.tuner import TrialResult
    from autotune.templates.meta_schedule_space import MetaScheduleSpace

    sources = source_records(store, target, models, size, exclude)  # a bad entry: before any write
    store.register_target(target.history_info())
    made_by: Counter = Counter()
    runs = []
    for layer, have in sources:
        store.register_workload(layer.workload_info())
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
        log(f"history: {len(runs)} of {len(sources)} layers to complete, side by side ({made_by.total()} records so far)")
        lockstep(runs, cm, batch, lambda rnd, active: log(
            f"history: round {rnd}, {len(active)} layers unfinished, {cm.measured} measured; {cm.cost_summary()}"))
    made_by[tuner_name] += sum(run.done for run in runs)
    return +made_by  # without zero counts


def source_records(store, target, models, size, exclude: set[str]) -> list[tuple]:
    """Each distinct source layer (``--source`` entries, see :func:`source_layers`) with
    its valid records on ``target`` (none without a ``store``, a history still to make)."""
    layers = [layer for spec in models for layer in source_layers(spec, size)]
    seen: set[str] = set()
    found = []
    for layer in layers:
        if layer.workload_key in seen or layer.workload_key in exclude:
            continue  # a target layer in history would be an exact hit, not transfer
        seen.add(layer.workload_key)
        have = [] if store is None else [r for r in store.records(workload_key=layer.workload_key, target_key=target.key)
                                         if r.status != "invalid"]
        found.append((layer, have))
    return found


def layers_to_complete(store, target, models, size, per_layer, exclude: set[str]) -> list:
    """The source layers whose history holds fewer than ``per_layer`` valid records: what a
    run (or a replay, from its file) must still tune."""
    return [layer for layer, have in source_records(store, target, models, size, exclude) if len(have) < per_layer]


def copy_database(path: str, dest_dir: str, name: str | None = None) -> str:
    """A consistent copy of the SQLite history at ``path`` (SQLite's backup API, so a
    write-ahead log is taken along), for work that must leave the original as it is;
    ``name`` (default: the original's) in ``dest_dir``, replacing what is there."""
    import sqlite3

    dest = os.path.join(dest_dir, name or os.path.basename(path))
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as src, closing(sqlite3.connect(dest)) as out:
        src.backup(out)
    return dest


def priors_for(store, layer, target, exclude: set[str], other_target_discount: float | None = None, space=None):
    """Match score and transfer evidence exactly as ``autotune tune`` computes them,
    with the experiment's target layers kept out: a reused or imported history may hold
    one (ResNet-50 has ResNet-18's 3x3 64->64 conv), which would be an exact hit.
    Without ``space``, records from a CPU of another vector width are taken as they are."""
    from autotune.target import float_lanes
    from autotune.priors import priors_from_match
    from autotune.history.match import match

    extra = {} if other_target_discount is None else {"other_target_discount": other_target_discount}
    m = match(store, layer.workload_info(), target.key, exclude=exclude, **extra)
    return m.score, priors_from_match(store, m, space=space, lanes=float_lanes(target.kind, target.arch))
