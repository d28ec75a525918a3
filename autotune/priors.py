"""History's records of a layer's neighbours, as the guided tuners' transfer evidence
(:class:`autotune.search.tuner.PriorRecord`)."""

from __future__ import annotations

from autotune.target import float_lanes


def priors_from_match(store, m, *, per_workload: int = 2000, space=None, lanes: int | None = None) -> list:
    """The measured configs of a layer's history neighbours, as transfer evidence.

    Latencies compare only within one layer on one target, so a neighbour measured on
    other hardware is its own group (its key names the target too), and its records
    carry the match's weight for other hardware. Given the tuned layer's ``space`` and
    the tuned CPU's float ``lanes``, a record from a CPU of another vector width is
    restated for this one (:mod:`autotune.templates.vector_width`). TVM's default schedule, which
    ``tune`` times and keeps with an empty config, is left out: it has no knob values,
    and as the fastest record of a shortly searched layer it would set the yardstick
    that layer's configs are normalized by. A record of a layer at another batch size
    (the same layer, or one whose batch its description gives) comes with the batch
    spread over its outermost tiles where that fits, as
    ``compile`` applies it (:func:`autotune.compile.batch_in_outer_tiles`): mapped to the
    nearest candidates instead, dqn's batch-1 winners put the batch in the innermost tile,
    and a 16-trial tune at batch 2 ended 1.6x to 2x slower than compiling with them unmeasured."""
    from autotune.compile import batch_in_outer_tiles
    from autotune.history import split_target_key
    from autotune.search.tuner import PriorRecord
    from autotune.templates.vector_width import restate_vector_width, vector_axis_knobs

    vector_knobs = vector_axis_knobs(space.knobs) if space is not None and lanes else []
    priors = []
    for nb in m.neighbours:
        group = nb.workload.key if nb.same_target else f"{nb.workload.key}@{nb.target_key}"
        kind, arch, _ = split_target_key(nb.target_key)
        from_lanes = None if nb.same_target or not vector_knobs else float_lanes(kind, arch)
        for rec in store.records(workload_key=nb.workload.key, target_key=nb.target_key, status="ok", limit=per_workload):
            config = rec.config
            if not config:
                continue
            if from_lanes and from_lanes != lanes:
                config = restate_vector_width(config, vector_knobs, from_lanes, lanes)
            restated = config != rec.config
            if nb.another_batch and space is not None:
                config = batch_in_outer_tiles(space, config) or config
            priors.append(PriorRecord(config, rec.latency_median, nb.similarity, tuple(nb.workload.features), group,
                                      rec.status, nb.target_weight, restated=restated))
    return priors
