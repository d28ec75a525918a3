"""The DAC 2020 experiment, on this machine: trials to come within 5% of the best known
latency, history-guided tuners vs their history-free baselines, real measurements.

1. History: random-search records (real builds and runs) for the tunable layers of
   *other* models (``--source``), written to a throwaway history database.
2. Targets: ResNet-18's first conv plus other layers (``--targets``), none of which is
   in that history (exact hits would make the comparison trivial).
3. For each target layer, each tuner (xgb, tl_xgb, ga, gga) and each seed, tune with real
   measurements until ``--trials``; a config measured once is answered from a shared
   cache afterwards (same layer, same config, same machine), which keeps the experiment
   affordable without changing what any tuner sees. The runs of a layer go side by side
   (:func:`lockstep`), their batches built as one, and so do the history's layers.
4. Best known latency = the best over every measurement of that layer in the
   experiment. Report per layer and tuner the median (over seeds) of trials needed to
   come within 5% of it, and the final latency.

Run:  python benchmarks/bench_history_guided.py --seeds 5 --trials 60 --out FILE
Prints one JSON object (figures recorded in the README).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from typing import Any, Callable

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from _emit import emit  # noqa: E402

#: Each history-guided tuner and the history-free baseline it is measured against.
BASELINE_OF = {"tl_xgb": "xgb", "gga": "ga"}
#: Closeness to the best known latency at which "found" is counted (the paper: 5%).
TOLERANCES = (0.05, 0.10, 0.25)
_T0 = time.perf_counter()


def log(message: str) -> None:
    """A progress line on stderr, stamped with the seconds since start (the lent GPU's
    calls are time-boxed, so the rate of progress is what plans the next call)."""
    print(f"[{time.perf_counter() - _T0:6.0f} s] {message}", file=sys.stderr, flush=True)


def parse_tuner(spec: str) -> tuple[str, dict[str, int | float | str]]:
    """``NAME[:KEY=VALUE;...]`` -> (registered name, constructor options), so variants of
    one tuner run side by side (``tl_xgb:transfer=joint``). Values are numbers where they
    parse as one, else strings; nothing is evaluated."""
    name, _, rest = spec.partition(":")
    opts: dict[str, int | float | str] = {}
    for item in filter(None, rest.split(";")):
        key, sep, text = item.partition("=")
        if not sep:
            raise SystemExit(f"tuner option {item!r} in {spec!r} is not KEY=VALUE")
        for cast in (int, float, str):
            try:
                opts[key] = cast(text)
                break
            except ValueError:
                continue
    return name, opts


def pairs_of(tuners) -> list[tuple[str, str]]:
    """(guided, baseline) tuner specs to compare: every variant of a guided tuner against
    its history-free baseline, the one with the same options where several ran
    (``gga:pop_size=16`` against ``ga:pop_size=16``)."""
    pairs = []
    for t in tuners:
        name, _, options = t.partition(":")
        if name not in BASELINE_OF:
            continue
        bases = [b for b in tuners if b.partition(":")[0] == BASELINE_OF[name]]
        same = [b for b in bases if b.partition(":")[2] == options]
        if same or bases:
            pairs.append((t, (same or bases)[0]))
    return pairs


@functools.lru_cache(maxsize=None)
def layers_of(model: str, size: int):
    """A model's tunable layers, decomposed once per (model, size): every layer spec,
    target or kept out, looks its layer up here."""
    from autotune import decompose, frontend

    # batch norm separate: the layering every recorded run and history file was made in
    _, mod = frontend.load_and_fuse(model, size=size, batch_norm="separate")
    return tuple(l for l in decompose.decompose(mod) if l.tunable and l.op_class in ("conv2d", "depthwise_conv2d", "dense"))


def model_layers(model: str, size: int):
    """:func:`layers_of`, or the benchmark ends with one line naming what is wrong (an
    unknown model, a size it cannot take)."""
    from autotune.errors import AutotuneError

    try:
        return layers_of(model, size)
    except AutotuneError as err:
        raise SystemExit(f"error: {err}") from None


def layer_at(spec: str, size: int):
    """The tunable layer ``MODEL:INDEX`` names (an index into :func:`layers_of`); a bad
    spec ends the benchmark with one line, before anything is measured or written."""
    model, sep, idx = spec.partition(":")
    if not (model and sep and idx.isdigit()):
        raise SystemExit(f"error: {spec!r} is not MODEL:INDEX (for example resnet18:0)")
    layers = model_layers(model, size)
    if int(idx) >= len(layers):
        raise SystemExit(f"error: {model} has {len(layers)} tunable layers at size {size}, so no layer {idx}")
    return layers[int(idx)]


class CachedMeasurer:
    """Real measurements, each distinct (layer, config) measured once.

    With ``path``, every measurement is also appended to that JSON-lines file, and the
    file's lines for this target answer first: a run cut short (the lent GPU's calls
    last 10 minutes) is resumed by the next, whose tuners replay their seeds from the
    file and measure only what the cut run never reached. Lines are data (json.loads),
    never code; a line cut short by a killed run is skipped.
    """

    def __init__(self, target, repeat: int = 3, path: str | None = None):
        from autotune.measure import MeasureOptions, Measurer

        self.measurer = Measurer(target, MeasureOptions(repeat=repeat, min_repeat_ms=10))
        self.target_key = target.key
        self.cache: dict[tuple[str, str], tuple[float | None, str]] = {}
        self.measured = 0
        self.loaded = 0
        self.apply_seconds = 0.0  # scheduling the candidates (the measurer times build and run)
        self.path = path
        self._torn = False  # the file ends in a line cut short: start a new one first
        if path and os.path.exists(path):
            self._load(path)

    def _load(self, path: str) -> None:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                self._torn = not line.endswith("\n")
                try:
                    rec = json.loads(line)
                    if rec["target"] == self.target_key:
                        self.cache[(rec["layer"], rec["config"])] = (rec["latency"], rec["status"])
                        self.loaded += 1
                except (ValueError, KeyError, TypeError):
                    continue

    def _keep(self, kept: list[tuple[tuple[str, str], tuple[float | None, str]]], measured: int) -> None:
        """Cache one batch's new results and append them to the file in one write."""
        self.cache.update(kept)
        self.measured += measured
        if self.path and kept:
            lines = [json.dumps({"target": self.target_key, "layer": layer, "config": config,
                                 "latency": latency, "status": status}) + "\n"
                     for (layer, config), (latency, status) in kept]
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write("\n" * self._torn + "".join(lines))
            self._torn = False

    def measure(self, layer_key: str, space, configs):
        return self.measure_groups([(layer_key, space, configs)])[0]

    def measure_groups(self, groups):
        """Answer several runs' batches with one build batch: ``groups`` is a list of
        (layer key, space, configs), the answer one result list per group.

        One batch keeps every build worker busy: a batch waits for its slowest build (good
        configs, unrolled deep, compile slowest), so a batch of one worker's worth idles
        the rest behind the tail. A config asked twice (two seeds) is measured once."""
        from search.tuner import TrialResult
        from templates import InvalidConfig, config_to_json
        from templates.apply_many import apply_many

        out, asked, rejected = {}, {}, []
        t0 = time.perf_counter()
        for layer_key, space, configs in groups:
            for cfg in configs:
                key = (layer_key, config_to_json(cfg))
                if key in self.cache:
                    out[key] = self.cache[key]
                elif key not in asked:
                    asked[key] = (space, cfg)
        todo = {}
        for key, applied in zip(asked, apply_many(list(asked.values()))):
            if isinstance(applied, InvalidConfig):
                out[key] = (None, "invalid")
                rejected.append((key, out[key]))
            else:
                todo[key] = applied
        self.apply_seconds += time.perf_counter() - t0
        kept = rejected
        if todo:
            kept += [(key, (res.latency, res.status)) for key, res in zip(todo, self.measurer.measure(list(todo.values())))]
        # Rejected configs are written too: a replay must answer them as rejected, not
        # with a neighbour's latency (on CUDA the space rejects a good share of proposals).
        self._keep(kept, measured=len(todo))
        out.update(kept)
        return [[TrialResult(cfg, *out[(layer_key, config_to_json(cfg))]) for cfg in configs]
                for layer_key, space, configs in groups]

    def cost_summary(self) -> str:
        """Where the measurement time went so far (a progress-line suffix)."""
        sec = self.measurer.seconds
        return f"apply {self.apply_seconds:.0f} s, build {sec['build']:.0f} s, run {sec['run']:.0f} s"

    def close(self) -> None:
        self.measurer.close()

    def best_entry(self, layer_key: str) -> tuple[str, float] | None:
        """The layer's fastest valid config (its JSON text) and latency, file lines included."""
        found = [(lat, cfg) for (k, cfg), (lat, st) in self.cache.items() if k == layer_key and lat is not None and st == "ok"]
        if not found:
            return None
        latency, config = min(found)
        return config, latency

    def best(self, layer_key: str) -> float | None:
        entry = self.best_entry(layer_key)
        return entry[1] if entry else None


def check_best(cm: CachedMeasurer, layer, space, target) -> dict | None:
    """The layer's fastest measured config against the untuned reference.

    Every ratio the benchmark reports is measured against that latency; it only counts if
    the kernel behind it computes the layer (``autotune tune`` checks its winners the same
    way, :mod:`autotune.verify`). Measured runs only: a replay has no device to run it on.
    """
    from autotune import verify
    from templates import config_from_json

    entry = cm.best_entry(layer.workload_key)
    if entry is None:
        return None
    config, latency = entry
    problem = verify.check(space.apply(config_from_json(config)), layer.func, target)
    return {"config": config, "latency_s": latency, "verified": problem is None, "problem": problem}


class ReplayMeasurer:
    """The measurement file as the device: no build, no run (``--replay FILE``).

    Every tuner variant can then be compared on measurements made elsewhere, say on the
    lent GPU, by anyone, deterministically. A config the file lacks is answered by the
    nearest measured config of that layer (:class:`search.replay.ReplayBench`), an
    approximation counted in ``nearest``, unless the space rejects it: a replay is
    faithful as far as that count is small, and exact for the tuners and seeds that made
    the file.
    """

    def __init__(self, path: str, target_key: str):
        self.tables: dict[str, list[dict]] = {}
        self.target_key = target_key
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                    if rec["target"] != target_key:
                        continue
                    self.tables.setdefault(rec["layer"], []).append(
                        {"config": json.loads(rec["config"]), "latency_median": rec["latency"], "status": rec["status"]})
                except (ValueError, KeyError, TypeError):
                    continue
        self.loaded = sum(len(t) for t in self.tables.values())
        self.measured = 0  # nothing is ever measured
        self.asked = 0
        self.nearest = 0
        self.approximated: dict[str, set[str]] = {}  # layer -> configs answered by the nearest
        self._benches: dict[str, object] = {}

    @staticmethod
    def targets_in(path: str) -> list[str]:
        keys: set[str] = set()
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    keys.add(json.loads(line)["target"])
                except (ValueError, KeyError, TypeError):
                    continue
        return sorted(keys)

    def measure(self, layer_key: str, space, configs):
        from search.replay import ReplayBench
        from search.tuner import TrialResult
        from templates import InvalidConfig, config_to_json

        bench = self._benches.get(layer_key)
        if bench is None:
            self.check_holds([layer_key])
            bench = self._benches[layer_key] = ReplayBench(space, self.tables[layer_key], missing="nearest")
        self.asked += len(configs)
        out = []
        for cfg in configs:
            if config_to_json(cfg) not in bench.table:
                # Files of older runs lack the configs the space rejected: judge those
                # here (the space is the same), so they are not given a latency.
                if not space.applies(cfg):
                    out.append(TrialResult(cfg, None, "invalid"))
                    continue
                self.nearest += 1
                self.approximated.setdefault(layer_key, set()).add(config_to_json(cfg))
            out.append(bench.measure([cfg])[0])
        return out

    def measure_groups(self, groups):
        return [self.measure(layer_key, space, configs) for layer_key, space, configs in groups]

    def check_holds(self, layers: dict[str, str] | list[str]) -> None:
        """End the run with one line unless the file holds a valid measurement of every
        layer (key, or key -> name): for a layer it lacks every answer would be
        "invalid", and its tuner would ask on for ever."""
        names = layers if isinstance(layers, dict) else {key: key for key in layers}
        lacking = [name for key, name in names.items() if not any(r["status"] == "ok" for r in self.tables.get(key, []))]
        if lacking:
            raise SystemExit(f"error: --replay: the file holds no valid measurement on {self.target_key} of "
                             f"{', '.join(lacking)}; a replay answers only layers that were measured")

    def cost_summary(self) -> str:
        return f"replayed, {self.nearest} of {self.asked} answered by the nearest measured config"

    def approximated_in(self, layer_key: str, configs) -> int:
        """How many of ``configs`` (one run's) were answered by the nearest measured config:
        a comparison of tuners is only as faithful as these counts are small, and one
        tuner's approximated answers say nothing of another's."""
        from templates import config_to_json

        got = self.approximated.get(layer_key, set())
        return sum(config_to_json(c) in got for c in configs)

    def best(self, layer_key: str) -> float | None:
        vals = [r["latency_median"] for r in self.tables.get(layer_key, []) if r["status"] == "ok" and r["latency_median"]]
        return min(vals) if vals else None

    def close(self) -> None:
        pass


def source_layers(spec: str, size: int):
    """The layers a ``--source`` entry names: ``MODEL`` (its every tunable layer at the
    experiment's image size), ``MODEL@SIZE`` (at another size), ``MODEL:INDEX`` or
    ``MODEL@SIZE:INDEX`` (one of them). So history can hold a target layer's counterpart
    at another input resolution without the rest of that model (run 38)."""
    head, sep, idx = spec.partition(":")
    model, at, side = head.partition("@")
    if not model or (at and not side.isdigit()) or (sep and not idx.isdigit()):
        raise SystemExit(f"error: --source {spec!r} is not MODEL, MODEL@SIZE, MODEL:INDEX or MODEL@SIZE:INDEX"
                         " (for example resnet50@112:0)")
    size = int(side) if at else size
    return (layer_at(f"{model}:{idx}", size),) if sep else model_layers(model, size)


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


@dataclasses.dataclass
class Run:
    """One tuning run (a tuner on one layer until ``trials`` valid points) in a lockstep."""

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
                if not any(run is g for g in going):
                    on_finish(run)
        room = limit - len(going)
        active, queue = going + queue[:room], queue[room:]
        rnd += 1
        if on_round is not None:
            on_round(rnd, active)


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


def make_run_tuner(spec: str, space, layer, seed: int, priors):
    """The tuner a ``--tuners`` entry names, with its options, for one seed. An unknown
    tuner or option, or options that do not go together, end the benchmark with one line
    (history and the measurement file keep what was measured)."""
    from search import make_tuner

    name, opts = parse_tuner(spec)
    try:
        return make_tuner(name, space, seed=seed, priors=priors, layer_features=layer.features(), **opts)
    except (KeyError, TypeError, ValueError) as err:
        raise SystemExit(f"error: --tuners {spec}: {err}") from None


def trials_to_within(curve, best_known, tol=0.05):
    for i, b in enumerate(curve):
        if b is not None and b <= best_known * (1 + tol):
            return i + 1
    return None


def trials_to_match_baseline(row: dict, guided: str, base: str, trials: int, tol: float = 0.0) -> dict | None:
    """Search-time ratio in the paper's sense: trials each tuner needs to reach the
    baseline's final quality (the median over seeds of its best latency after the full
    budget), or within ``tol`` of it. Median over seeds; a seed that never gets there
    counts as ``trials + 1``.

    Unlike "within 5% of the best known" (the minimum of every measurement of the
    layer, which on a noisy CPU is a lucky outlier few runs get near), this target is
    reached by the baseline itself by construction, so the ratio is rarely censored.
    With ``tol=0`` it is still a coin toss when both tuners end on the same plateau
    (a guided tuner ending 1% above the baseline's median never "reaches" it); a
    tolerance of the size of the timing noise asks when each got *there*.
    """
    tuners = row["tuners"]
    if guided not in tuners or base not in tuners or not tuners[base]["median_final_latency_s"]:
        return None
    goal = tuners[base]["median_final_latency_s"]

    def median_trials(curves) -> float:
        hits = [trials_to_within(c, goal, tol) for c in curves]
        return statistics.median(h if h is not None else trials + 1 for h in hits)

    b, g = median_trials(tuners[base]["curves"]), median_trials(tuners[guided]["curves"])
    return {"goal_s": goal, "base_trials": b, "guided_trials": g, "ratio": b / g}


def final_latencies(curves) -> list[float]:
    """Each seed's best latency after the full budget (seeds that found no valid config
    have none)."""
    return [c[-1] for c in curves if c and c[-1] is not None]


def final_latency_test(row: dict, guided: str, base: str) -> dict | None:
    """Does the guided tuner end worse than its baseline? Medians and means of the seeds'
    final latencies, and Mann-Whitney U p-values that the guided tuner's finals lie
    higher (``p_higher``) or lower (``p_lower``) than the baseline's.

    Why a rank test and not the ratio of medians: finals are often bimodal (on conv2d7,
    transfer XGBoost's ten split between about 290 and 390 us), so the median of a
    handful of seeds moves by a quarter when one seed lands in the other mode, while a
    rank test weighs every seed. With five seeds a side the smallest possible one-sided
    p is 1/252 (0.004): read a large p with few seeds as "not shown", not as "the same".
    """
    from scipy.stats import mannwhitneyu

    tuners = row["tuners"]
    if guided not in tuners or base not in tuners:
        return None
    g, b = (final_latencies(tuners[t]["curves"]) for t in (guided, base))
    if len(g) < 2 or len(b) < 2:
        return None
    return {
        "seeds": [len(b), len(g)],
        "median_s": [statistics.median(b), statistics.median(g)],
        "mean_s": [statistics.fmean(b), statistics.fmean(g)],
        "p_higher": float(mannwhitneyu(g, b, alternative="greater").pvalue),
        "p_lower": float(mannwhitneyu(g, b, alternative="less").pvalue),
        "p_two_sided": float(mannwhitneyu(g, b, alternative="two-sided").pvalue),
    }


def final_latency_verdict(test: dict, alpha: float = 0.05) -> str:
    """One cell: which way the guided tuner's finals differ from the baseline's, if at all."""
    if test["p_higher"] < alpha:
        return f"higher (p = {test['p_higher']:.2g})"
    if test["p_lower"] < alpha:
        return f"lower (p = {test['p_lower']:.2g})"
    return f"no difference shown (p = {test['p_two_sided']:.2g})"


def _trials_cell(v: float, trials: int) -> str:
    """A median trial count; one past the budget (never reached) shows as ``>N``."""
    return f">{trials}" if v > trials else f"{v:g}"


def _final_latency_cells(test: dict | None) -> list[str]:
    """Two table cells for a :func:`final_latency_test`: medians (means), then the verdict."""
    if test is None:
        return ["", ""]
    med, mean = test["median_s"], test["mean_s"]
    return [f"{med[0] * 1e6:.1f} ({mean[0] * 1e6:.1f}) / {med[1] * 1e6:.1f} ({mean[1] * 1e6:.1f})",
            f"{final_latency_verdict(test)}, {test['seeds'][0]} / {test['seeds'][1]}"]


def as_dispatched(row: dict) -> dict | None:
    """``row`` cut down to cold XGBoost and the tuner ``autotune tune`` would give this
    layer (by its match score, default thresholds), named ``"autotune"``: what a user
    gets against tuning with no history, where the paper's pairs compare each guided
    tuner with its own baseline. None when those curves are not in the row.
    """
    from autotune.dispatch import choose

    tuners = row["tuners"]
    pick = choose(row["match_score"], exact=False).tuner
    # the run may name it with options (gga:pop_size=16): dispatch picks the tuner, not them
    runs = [t for t in tuners if t.partition(":")[0] == pick]
    if "xgb" not in tuners or pick == "xgb" or len(runs) != 1:
        return None
    return {**row, "dispatched": runs[0], "tuners": {"xgb": tuners["xgb"], "autotune": tuners[runs[0]]}}


def dispatched_comparison(rows: list[dict], trials: int) -> dict | None:
    """Each layer's dispatched tuner against cold XGBoost (:func:`as_dispatched`): per
    layer the tuner, trials to cold XGBoost's final latency and to within 5% of it, and
    the rank test of the finals; then the median ratios. None when no layer has the
    curves dispatch needs."""
    per_layer = []
    for row in rows:
        d = as_dispatched(row)
        if d is None:
            continue
        per_layer.append({
            "layer": row["layer"], "match_score": row["match_score"], "tuner": d["dispatched"],
            "match_baseline": trials_to_match_baseline(d, "autotune", "xgb", trials),
            "within_5pct_of_baseline": trials_to_match_baseline(d, "autotune", "xgb", trials, 0.05),
            "final_latency_test": final_latency_test(d, "autotune", "xgb"),
        })
    if not per_layer:
        return None
    medians = {k: statistics.median(e[k]["ratio"] for e in per_layer) for k in ("match_baseline", "within_5pct_of_baseline")}
    return {"against": "xgb", "per_layer": per_layer, "median_ratio": medians}


def dispatched_table(result: dict) -> list[str]:
    """Markdown lines comparing each layer's dispatched tuner with cold XGBoost (empty
    when the run lacks the tuners dispatch picks)."""
    trials = result["trials"]
    comparison = dispatched_comparison(result["layers"], trials)
    if comparison is None:
        return []
    lines = ["", "| layer (match) | autotune gives | trials to xgb's final: xgb / it (ratio) | to within 5% of it (ratio) "
                 "| final latency, median (mean) us: xgb / it | it ends (Mann-Whitney, seeds) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for e in comparison["per_layer"]:
        cells = []
        for key in ("match_baseline", "within_5pct_of_baseline"):
            m = e[key]
            base, guided = (_trials_cell(m[k], trials) for k in ("base_trials", "guided_trials"))
            cells.append(f"{base} / {guided} ({m['ratio']:.1f}x)")
        cells += _final_latency_cells(e["final_latency_test"])
        lines.append(f"| {e['layer']} ({e['match_score']:.2f}) | {e['tuner']} | " + " | ".join(cells) + " |")
    lines.append("| median ratio | | " + " | ".join(f"{r:.1f}x" for r in comparison["median_ratio"].values()) + " | | |")
    return lines


def markdown_table(result: dict) -> str:
    """The README's table: median trials to 5% / 25% and final latency per tuner and layer.

    An unreached target shows as ``>N`` (N = the trial budget), and the median counts it
    as N+1, so a median shown as ``>N`` means at least half of the seeds never got there.
    """
    trials = result["trials"]
    tuners = list(result["layers"][0]["tuners"]) if result["layers"] else []

    def fmt(v: float) -> str:
        return _trials_cell(v, trials)

    head = " / ".join(tuners)
    lines = [f"| layer (match) | trials to 5%: {head} | trials to 25%: {head} | final latency (us): {head} |",
             "| --- | --- | --- | --- |"]
    for row in result["layers"]:
        e = row["tuners"]
        to5 = " / ".join(fmt(e[t]["median_trials_to_5pct"]) for t in tuners)
        to25 = " / ".join(fmt(e[t]["median_trials_to_25pct"]) for t in tuners)
        final = " / ".join(f"{e[t]['median_final_latency_s'] * 1e6:.1f}" for t in tuners)
        lines.append(f"| {row['layer']} ({row['match_score']:.2f}) | {to5} | {to25} | {final} |")
    pairs = pairs_of(tuners)
    for tol in (0.0, 0.05):
        within = "" if tol == 0 else f"within {tol:.0%} of "
        lines += ["", "| layer | " + " | ".join(f"trials to {within}{b}'s final latency: {b} / {g} (ratio)" for g, b in pairs) + " |",
                  "| --- |" + " --- |" * len(pairs)]
        ratios: dict[str, list[float]] = {g: [] for g, _ in pairs}
        for row in result["layers"]:
            cells = []
            for g, b in pairs:
                m = trials_to_match_baseline(row, g, b, trials, tol)
                ratios[g].append(m["ratio"])
                cells.append(f"{fmt(m['base_trials'])} / {fmt(m['guided_trials'])} ({m['ratio']:.1f}x)")
            lines.append(f"| {row['layer']} | " + " | ".join(cells) + " |")
        lines.append("| median ratio | " + " | ".join(f"{statistics.median(ratios[g]):.1f}x" for g, _ in pairs) + " |")
    lines += ["", "| layer | " + " | ".join(
        f"final latency, median (mean) us: {b} / {g} | {g} ends (Mann-Whitney, seeds {b} / {g})" for g, b in pairs) + " |",
        "| --- |" + " --- | --- |" * len(pairs)]
    for row in result["layers"]:
        cells = [c for g, b in pairs for c in _final_latency_cells(final_latency_test(row, g, b))]
        lines.append(f"| {row['layer']} | " + " | ".join(cells) + " |")
    lines += dispatched_table(result)
    note = approximation_note(result)
    return "\n".join(lines + ([""] + [note] if note else []))


def approximated_counts(rows: list[dict], *, with_zero: bool = False) -> str:
    """Per tuner over result ``rows``, answers approximated by the nearest measured config
    of all its answers ("tl_xgb 12 of 500 (2%)"); tuners with none only ``with_zero``."""
    asked: dict[str, int] = {}
    approx: dict[str, int] = {}
    for row in rows:
        for t, e in row["tuners"].items():
            if "approximated" in e:
                approx[t] = approx.get(t, 0) + sum(e["approximated"])
                asked[t] = asked.get(t, 0) + sum(len(c) for c in e["curves"])
    return ", ".join(f"{t} {approx[t]:,} of {asked[t]:,} ({approx[t] / max(asked[t], 1):.0%})"
                     for t in approx if approx[t] or with_zero)


def approximation_note(result: dict) -> str:
    """One line naming every tuner whose replayed answers were partly approximated, with
    the share: its figures above are estimates, not measurements. Empty when every answer
    came from the file (or the run measured)."""
    shown = approximated_counts(result["layers"])
    if not shown:
        return ""
    return ("Replayed, and not every answer was in the file: answers approximated by the nearest measured "
            "config, " + shown + ". Those tuners' figures are estimates; measure them before trusting them.")


def plot_results(result: dict, out_dir: str) -> list[str]:
    """One convergence plot per target layer, one curve (median over seeds) per tuner."""
    from autotune.report import plot_convergence

    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for row in result["layers"]:
        tuners = {
            t: [[[i + 1, b] for i, b in enumerate(curve) if b is not None] for curve in e["curves"]]
            for t, e in row["tuners"].items()
        }
        name = row["layer"].replace(":", "_")
        report = {"model": row["layer"], "layers": [], "tuners": tuners}
        paths.append(str(plot_convergence(report, os.path.join(out_dir, f"{name}.png"))))
    return paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=56, help="image side for the zoo models (default 56)")
    parser.add_argument("--source", default="resnet50,vgg11",
                        help="models whose layers form the history; MODEL@SIZE at another image size, MODEL[@SIZE]:INDEX one layer")
    parser.add_argument("--history-trials", type=int, default=48, help="records per history layer")
    parser.add_argument("--history-tuner", default="random", choices=("random", "xgb"),
                        help="how history was made: a random sample, or a cold-XGBoost tuning run per source layer")
    parser.add_argument("--history-seed", type=int, default=1234,
                        help="seed of the history tuner's runs (default 1234); a --tuners seed (0, 1, ...) makes history "
                             "the runs a measurement file already holds for those layers")
    parser.add_argument("--target", default="llvm", help="llvm, or cuda on a GPU machine")
    parser.add_argument("--history-db", help="keep the history here; an existing file is reused and completed, not rebuilt")
    parser.add_argument("--targets", default="resnet18:0,resnet18:1,resnet18:3,resnet18:4,resnet18:7,resnet18:11,mobilenetv2:5",
                        help="MODEL:INDEX of tunable conv/dense layers (index into that model's list)")
    parser.add_argument("--exclude", help="MODEL:INDEX layers kept out of history and matching besides --targets "
                        "(an earlier run's other targets, so a run on fewer targets reuses its history as it was)")
    parser.add_argument("--no-vector-restating", action="store_true",
                        help="take history from a CPU of another vector width as it is (before run 32), "
                        "not restated for this CPU's (templates/vector_width.py)")
    parser.add_argument("--other-target-discount", type=float, metavar="F",
                        help="scale the similarity of history measured on another target by F "
                             "(default: history.match.OTHER_TARGET_DISCOUNT, as autotune tune does)")
    parser.add_argument("--no-shared-memory-estimate", action="store_true",
                        help="CUDA spaces as before 2026-11-26, shared memory left to VerifyGPUCode: the H100 "
                             "measurements made before then replay exactly (templates/shared_memory.py)")
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--tuners", default="xgb,tl_xgb,ga,gga",
                        help="tuners to compare; NAME:KEY=VALUE;... passes options (e.g. tl_xgb:transfer=joint)")
    parser.add_argument("--repeat", type=int, default=3, help="timed repeats per measurement (median kept)")
    parser.add_argument("--measurements", help="JSON-lines file of every measurement: read first, appended to, so a run cut short resumes")
    parser.add_argument("--replay", metavar="FILE",
                        help="answer every measurement from this measurement file (no hardware); an existing --history-db is "
                             "used as it is, a new one is built from the file as the recorded run built it")
    parser.add_argument("--replay-target", help="which target's lines to replay (default: the file's only one)")
    parser.add_argument("--out")
    parser.add_argument("--plot-dir", help="write one convergence plot per layer here")
    parser.add_argument("--from-json", help="print the markdown table of earlier result files, comma-separated (and plot them with --plot-dir)")
    args = parser.parse_args()
    if args.from_json:
        # Several files (comma-separated) of one experiment, e.g. a layer rerun alone,
        # print as one table whose medians cover all their layers.
        parts = []
        for path in args.from_json.split(","):
            with open(path, encoding="utf-8") as fh:
                parts.append(json.load(fh))
        earlier = {**parts[0], "layers": [row for part in parts for row in part["layers"]]}
        print(markdown_table(earlier))
        if args.plot_dir:
            print("\n".join(plot_results(earlier, args.plot_dir)))
        return 0

    from autotune.target import resolve_target
    from history import open_history, split_target_key
    from search.tuner import source_depth
    from templates.meta_schedule_space import MetaScheduleSpace

    t_start = time.perf_counter()
    space_options = {"estimate_shared": False} if args.no_shared_memory_estimate else {}
    target = resolve_target(args.target)
    if args.replay:
        if not os.path.isfile(args.replay):
            raise SystemExit(f"--replay: no measurement file at {args.replay}")
        if not args.history_db:
            raise SystemExit("--replay needs the history it ran with: --history-db of an existing database, "
                             "or of a new one to build from the file with the run's --source and --history-trials")
        keys = ReplayMeasurer.targets_in(args.replay)
        replay_key = args.replay_target or (keys[0] if len(keys) == 1 else None)
        if replay_key not in keys:
            raise SystemExit(f"--replay-target must be one of the file's targets: {', '.join(keys) or 'none found'}")
        kind, arch, device = split_target_key(replay_key)
        if (kind, arch) != (target.kind, target.arch):
            same = f"'{{\"kind\": \"llvm\", \"mcpu\": \"{arch}\"}}'" if kind == "llvm" else f"{kind}:{arch}"
            raise SystemExit(f"--target {target.kind}:{target.arch} does not build the spaces of {replay_key}: use --target {same}")
        # History is filed under the recorded device: the replay must match against it
        # exactly as the recorded run did (another device's records count less).
        target = dataclasses.replace(target, device_name=device)
        cm = ReplayMeasurer(args.replay, replay_key)
        log(f"replaying {cm.loaded} measurements on {replay_key} from {args.replay}")
    else:
        from autotune.errors import AutotuneError
        from autotune.tune import ensure_measurable

        try:  # no run_error lines in the measurement file from a machine without the device
            ensure_measurable(target, None)
        except AutotuneError as err:
            raise SystemExit(f"error: {err}; --replay FILE answers from a measurement file instead") from None
        cm = CachedMeasurer(target, args.repeat, args.measurements)
        if cm.loaded:
            log(f"{cm.loaded} earlier measurements on {target.key} read from {args.measurements}")
    targets = [(spec.partition(":")[0], layer_at(spec, args.size)) for spec in args.targets.split(",")]
    tuners = args.tuners.split(",")
    # A misspelt tuner or option ends the run here, not after the history is built.
    probe_layer = targets[0][1]
    probe_space = MetaScheduleSpace(probe_layer.func, target.tvm_target, name=probe_layer.name, **space_options)
    for spec in tuners:
        make_run_tuner(spec, probe_space, probe_layer, seed=0, priors=[])
    # Kept out of history and matching: recorded with the result, since a replay that keeps
    # out other layers draws on another history and gives other guided curves.
    kept_out = [*args.targets.split(","), *filter(None, (args.exclude or "").split(","))]
    exclude = {layer_at(spec, args.size).workload_key for spec in kept_out}
    db = args.history_db or os.path.join(tempfile.mkdtemp(prefix="bench-hist-"), "history.db")
    fresh_db = not os.path.exists(db)
    if args.replay:  # before any database is written
        must_hold = {layer.workload_key: f"{model}:{layer.name}" for model, layer in targets}
        if fresh_db:
            must_hold.update({layer.workload_key: f"--source {spec}: {layer.name}" for spec in args.source.split(",")
                              for layer in source_layers(spec, args.size) if layer.workload_key not in exclude})
        cm.check_holds(must_hold)
    store = open_history(db)
    # An earlier run's history is the same evidence: only what it lacks is measured. A
    # replay adds nothing to an existing history; a new one it builds from the file, as
    # the recorded run built it (answers the file lacks are counted as approximated).
    history_trials = args.history_trials if (fresh_db or not args.replay) else 0
    made_by = build_history(store, target, cm, args.source.split(","), args.size, history_trials,
                            seed=args.history_seed, exclude=exclude, tuner_name=args.history_tuner, batch=args.batch,
                            space_options=space_options)
    n_hist = made_by.total()
    t_hist = time.perf_counter() - t_start
    log(f"history: {n_hist} records in {t_hist:.0f} s, {', '.join(kept_out)} kept out ({cm.cost_summary()})")

    per_layer = []

    def assemble(rows: list[dict]) -> dict:
        summary = {}
        for guided, base in pairs_of(tuners):
            for what in [f"{int(t * 100)}pct" for t in TOLERANCES] + ["final_latency"]:
                key = f"{base}/{guided}@{what}"
                ratios = [r[key] for r in rows if r.get(key) is not None]
                if ratios:
                    summary[key] = {"median_ratio": statistics.median(ratios), "per_layer": ratios}
            for suffix in ("match_baseline", "within_5pct_of_baseline"):
                ratios = [m["ratio"] for r in rows if (m := r.get(f"{base}/{guided}@{suffix}"))]
                if ratios:
                    summary[f"{base}/{guided}@{suffix}"] = {"median_ratio": statistics.median(ratios), "per_layer": ratios}
        dispatched = dispatched_comparison(rows, args.trials)
        if dispatched is not None:
            summary["dispatched"] = dispatched
        return {
            "benchmark": "trials to within 5% of best known latency (median over seeds)",
            "target": target.key, "size": args.size, "seeds": args.seeds, "trials": args.trials, "batch": args.batch,
            "history": {"models": args.source, "records": n_hist, "tuner": args.history_tuner, "made_by": dict(made_by),
                        "seconds": round(t_hist, 1), "kept_out": kept_out,
                        **({"other_target_discount": args.other_target_discount} if args.other_target_discount is not None else {})},
            "distinct_measurements": cm.measured + cm.loaded, "measured_this_run": cm.measured, "wall_seconds": round(time.perf_counter() - t_start, 1),
            **({"replay": {"file": args.replay, "target": cm.target_key, "asked": cm.asked, "nearest": cm.nearest}} if args.replay else {}),
            "layers": rows, "summary": summary,
            "arguments": {k: v for k, v in vars(args).items() if v is not None},
        }

    def layer_row(model, layer, space, score, priors, runs) -> dict:
        """One target layer's result, once every tuner and seed on it has finished."""
        curves = {t: [runs[t, seed].curve for seed in range(args.seeds)] for t in tuners}
        overhead = {t: [runs[t, seed].overhead / max(len(runs[t, seed].curve), 1) for seed in range(args.seeds)] for t in tuners}
        for (t, seed), run in runs.items():
            final = f"{run.best * 1e6:.1f} us" if run.best is not None else "no valid point"
            log(f"{model}:{layer.name} {t} seed {seed}: {final} after {len(run.curve)} trials")
        if args.replay:
            approximated = {t: [cm.approximated_in(layer.workload_key, [r.config for r in runs[t, seed].tuner.state.results])
                                for seed in range(args.seeds)] for t in tuners}
        best_known = cm.best(layer.workload_key)
        row = {"layer": f"{model}:{layer.name}", "op_class": layer.op_class, "shapes": layer.inputs + layer.weights,
               "attrs": layer.attrs, "match_score": round(score, 3), "priors": len(priors),
               "history_depth": source_depth(priors), "best_known_s": best_known, "tuners": {}}
        if not args.replay:
            row["best_checked"] = checked = check_best(cm, layer, space, target)
            if checked is not None:
                log(f"{model}:{layer.name} fastest config ({checked['latency_s'] * 1e6:.1f} us) "
                    + ("matches the reference" if checked["verified"] else f"DOES NOT match the reference: {checked['problem']}"))
        for t in tuners:
            finals = final_latencies(curves[t])
            entry = {"median_final_latency_s": statistics.median(finals) if finals else None,
                     "overhead_s_per_config": statistics.median(overhead[t]),
                     "curves": curves[t]}
            for tol in TOLERANCES:
                hits = [trials_to_within(c, best_known, tol) for c in curves[t]]
                # an unreached target counts as trials+1 (a lower bound on the true figure)
                capped = [h if h is not None else args.trials + 1 for h in hits]
                entry[f"trials_to_{int(tol * 100)}pct"] = hits
                entry[f"median_trials_to_{int(tol * 100)}pct"] = statistics.median(capped)
            if args.replay:
                entry["approximated"] = approximated[t]  # per seed: answers not in the file
            handed = [getattr(runs[t, seed].tuner, "handed_over_at", None) for seed in range(args.seeds)]
            if any(h is not None for h in handed):
                entry["handed_over_at"] = handed  # per seed: configs measured when transfer XGBoost took over
            row["tuners"][t] = entry
        if args.replay:
            log(f"{model}:{layer.name} answers approximated per tuner ({args.seeds} seeds): "
                + approximated_counts([row], with_zero=True))
        for guided, base in pairs_of(tuners):
            if guided in row["tuners"] and base in row["tuners"]:
                for tol in TOLERANCES:
                    key = f"median_trials_to_{int(tol * 100)}pct"
                    row[f"{base}/{guided}@{int(tol * 100)}pct"] = row["tuners"][base][key] / row["tuners"][guided][key]
                b, g = row["tuners"][base]["median_final_latency_s"], row["tuners"][guided]["median_final_latency_s"]
                row[f"{base}/{guided}@final_latency"] = b / g if b and g else None
                row[f"{base}/{guided}@match_baseline"] = trials_to_match_baseline(row, guided, base, args.trials)
                row[f"{base}/{guided}@within_5pct_of_baseline"] = trials_to_match_baseline(row, guided, base, args.trials, 0.05)
                row[f"{base}/{guided}@final_latency_test"] = final_latency_test(row, guided, base)
        return row

    # Every tuner and seed of a layer side by side, one build batch per round; a layer's
    # last rounds are filled with the next layer's first runs.
    layer_runs = []
    for model, layer in targets:
        space = MetaScheduleSpace(layer.func, target.tvm_target, name=layer.name, **space_options)
        score, priors = priors_for(store, layer, target, exclude, args.other_target_discount,
                                   space=None if args.no_vector_restating else space)
        runs = {(t, seed): Run(make_run_tuner(t, space, layer, seed, priors), layer.workload_key, space, args.trials)
                for t in tuners for seed in range(args.seeds)}
        layer_runs.append((model, layer, space, score, priors, runs))
    layer_of = {id(run): i for i, (*_, runs) in enumerate(layer_runs) for run in runs.values()}
    unfinished = [len(runs) for *_, runs in layer_runs]
    rows: dict[int, dict] = {}

    def finished(run: Run) -> None:
        i = layer_of[id(run)]
        unfinished[i] -= 1
        if unfinished[i]:
            return
        rows[i] = row = layer_row(*layer_runs[i])
        per_layer[:] = [rows[k] for k in sorted(rows)]  # in --targets order, whichever finished first
        printable = {k: v for k, v in row.items() if k != "tuners"}
        printable["tuners"] = {t: {k: v for k, v in e.items() if k != "curves"} for t, e in row["tuners"].items()}
        print(json.dumps(printable), file=sys.stderr, flush=True)
        if args.out:  # partial results survive a run cut short
            with open(args.out, "w", encoding="utf-8") as fh:
                json.dump(assemble(per_layer), fh, indent=1, default=str)

    def progress(rnd: int, active: list[Run]) -> None:
        going = sorted({layer_of[id(run)] for run in active})
        names = ", ".join(f"{layer_runs[i][0]}:{layer_runs[i][1].name}" for i in going)
        log(f"round {rnd}: {len(active)} runs active ({names or 'none'}), {sum(unfinished)} of {len(layer_of)} unfinished "
            f"({cm.measured} measured; {cm.cost_summary()})")

    lockstep([run for *_, runs in layer_runs for run in runs.values()], cm, args.batch, progress,
             max_active=len(tuners) * args.seeds, on_finish=finished)

    result = assemble(per_layer)
    cm.close()
    store.close()
    emit(result, args.out)
    if args.plot_dir:
        plot_results(result, args.plot_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
