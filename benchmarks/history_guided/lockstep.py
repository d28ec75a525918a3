"""Many tuning runs side by side: one build batch per round."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable


@dataclasses.dataclass(eq=False)
class Run:
    """One tuning run (a tuner on one layer until ``trials`` valid points) in a lockstep.
    Runs compare and hash by identity: two seeds' runs may hold equal fields."""

    tuner: Any
    layer_key: str
    space: Any
    trials: int
    on_results: Callable[[list], None] | None = None
    done: int = 0
    best: float | None = None
    curve: list[float | None] = dataclasses.field(default_factory=list)
    overhead: float = 0.0  # seconds in ask and tell: model training and search, no measurement


def lockstep(runs: list[Run], cm, batch: int, on_round: Callable[[int, list[Run]], None] | None = None,
             max_active: int | None = None, on_finish: Callable[[Run], None] | None = None) -> None:
    """Drive ``runs`` side by side: each round asks every active run for its next batch,
    measures all the batches as one (``cm.measure_groups``) and tells each run its
    results.

    Each run sees what it would see alone: a distinct config is measured once and then
    answered from the cache whichever run asks first. Only the order of measurements
    changes, and with it how full the build workers are: on the GPU machine one run's
    batch of 16 left 15 of 16 workers waiting on the slowest build.

    With ``max_active``, at most that many runs are active, in list order, and a run that
    finishes makes room for the next: one layer's last rounds, where a few runs are left
    (conv2d1 on the H100: a round of 30 new configs took 21 s, one of 258 took 55 s), are
    filled with the next layer's first, so only the last layer's tail runs part-empty.
    ``on_finish`` is told of each finished run.
    """
    queue = [r for r in runs if r.done < r.trials]
    limit = max_active or len(queue) or 1
    active, queue = queue[:limit], queue[limit:]
    rnd = 0
    while active:
        asked = []
        for run in active:
            t0 = time.perf_counter()
            asked.append(run.tuner.ask(min(batch, run.trials - run.done)))
            run.overhead += time.perf_counter() - t0
        live = [(run, cfgs) for run, cfgs in zip(active, asked) if cfgs]  # no config left: done
        answers = cm.measure_groups([(run.layer_key, run.space, cfgs) for run, cfgs in live]) if live else []
        for (run, _), results in zip(live, answers):
            t0 = time.perf_counter()
            run.tuner.tell(results)
            run.overhead += time.perf_counter() - t0
            for res in results:
                if res.status == "invalid":
                    continue
                run.done += 1
                if res.ok and (run.best is None or res.latency < run.best):
                    run.best = res.latency
                run.curve.append(run.best)
            if run.on_results is not None:
                run.on_results(results)
        going = [run for run, _ in live if run.done < run.trials]
        if on_finish is not None:
            for run in active:
                if run not in going:  # by identity (eq=False)
                    on_finish(run)
        room = limit - len(going)
        active, queue = going + queue[:room], queue[room:]
        rnd += 1
        if on_round is not None:
            on_round(rnd, active)
