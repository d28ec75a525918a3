"""What answers a tuner's batches: real measurements, each distinct one made once and kept
in a JSON-lines file (:class:`CachedMeasurer`), or that file replayed with no hardware
(:class:`ReplayMeasurer`).
"""

from __future__ import annotations

import json
import os
import time

from autotune.measure import TIMINGS

#: How TVM's evaluator timed every line written before 2026-11-28 (lines of another
#: timing say theirs: ``"timing": "queued"``, :mod:`autotune.queued_timing`).
LAUNCHES = TIMINGS[0]


def timing_of(rec: dict) -> str:
    """How a measurement line was timed. Few-microsecond kernels time differently by the
    two ways (the host paces back-to-back launches), so a file's lines answer only runs
    that time as they were timed."""
    timing = rec.get("timing", LAUNCHES)
    return timing if isinstance(timing, str) else LAUNCHES


#: Each replay approximation (``--approximate``) as a sentence says it.
APPROXIMATION_WORDS = {"nearest": "the nearest measured config", "model": "a surrogate model of the measured configs"}


class CachedMeasurer:
    """Real measurements, each distinct (layer, config) measured once.

    With ``path``, every measurement is also appended to that JSON-lines file, and the
    file's lines for this target answer first: a run cut short (the lent GPU's calls
    last 10 minutes) is resumed by the next, whose tuners replay their seeds from the
    file and measure only what the cut run never reached. Lines are data (json.loads),
    never code; a line cut short by a killed run is skipped.
    """

    def __init__(self, target, repeat: int = 3, path: str | None = None, timing: str = LAUNCHES):
        from autotune.measure import MeasureOptions, Measurer

        self.measurer = Measurer(target, MeasureOptions(repeat=repeat, min_repeat_ms=10, timing=timing))
        self.timing = timing  # the file's lines of another timing neither answer nor are answered
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
                    if rec["target"] == self.target_key and timing_of(rec) == self.timing:
                        self.cache[(rec["layer"], rec["config"])] = (rec["latency"], rec["status"])
                        self.loaded += 1
                except (ValueError, KeyError, TypeError):
                    continue

    def _keep(self, kept: list[tuple[tuple[str, str], tuple[float | None, str]]], measured: int) -> None:
        """Cache one batch's new results and append them to the file in one write."""
        self.cache.update(kept)
        self.measured += measured
        if self.path and kept:
            timing = {} if self.timing == LAUNCHES else {"timing": self.timing}  # older lines' form kept
            lines = [json.dumps({"target": self.target_key, "layer": layer, "config": config,
                                 "latency": latency, "status": status, **timing}) + "\n"
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
        from autotune.search.tuner import TrialResult
        from autotune.templates import InvalidConfig, config_to_json
        from autotune.templates.apply_many import apply_many

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

    def cost_seconds(self) -> dict[str, float]:
        """Where the measurement time went so far, wall seconds by phase. Beside build's
        wall time, the seconds each build worker spent building and the batches' slowest
        builds summed: near the first, building is work; near the second, waiting on tails."""
        sec, builder = self.measurer.seconds, self.measurer.builder
        return {"apply": self.apply_seconds, "build": sec["build"], "run": sec["run"],
                "build_busy_per_worker": builder.seconds["busy"] / builder.max_workers,
                "build_device_compile_per_worker": builder.seconds["device_compile"] / builder.max_workers,
                "build_slowest": builder.seconds["slowest"], "build_workers": builder.max_workers,
                "device_compiles_reused": builder.device_compiles_reused}

    def twins(self) -> dict[str, int]:
        """Candidates answered by a twin program's result so far (:meth:`autotune.measure.Measurer.measure`)."""
        return dict(self.measurer.twins)

    def cost_summary(self) -> str:
        """:meth:`cost_seconds` as a progress-line suffix."""
        c = self.cost_seconds()
        device = c["build_device_compile_per_worker"]  # CUDA on a GPU machine: NVRTC
        reused = c["device_compiles_reused"]  # twin programs' sources, not compiled again
        twins = self.twins()
        return (f"apply {c['apply']:.0f} s, build {c['build']:.0f} s, run {c['run']:.0f} s; "
                f"build workers busy {c['build_busy_per_worker']:.0f} s each"
                f"{f' ({device:.0f} s compiling device code, {reused} sources reused)' if device else ''}, slowest builds {c['build_slowest']:.0f} s; "
                f"twin programs answered unmeasured: {twins['not_built']} not built, {twins['not_timed']} built, not timed")

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
    from autotune.templates import config_from_json

    entry = cm.best_entry(layer.workload_key)
    if entry is None:
        return None
    config, latency = entry
    problem = verify.check(space.apply(config_from_json(config)), layer.func, target)
    return {"config": config, "latency_s": latency, "verified": problem is None, "problem": problem}


class ReplayMeasurer:
    """The measurement file as the device: no build, no run (``--replay FILE``).

    Every tuner variant can then be compared on measurements made elsewhere, say on the
    lent GPU, by anyone, deterministically. A config the file lacks is answered by an
    approximation (``approximate``: the nearest measured config of that layer, or a
    surrogate model fitted on its measured configs; :class:`autotune.search.replay.ReplayBench`),
    counted in ``approximations``, unless the space rejects it: a replay is faithful as
    far as that count is small, and exact for the tuners and seeds that made the file.
    """

    def __init__(self, path: str, target_key: str, approximate: str = "nearest", timing: str = LAUNCHES,
                 lines: int | None = None):
        """``lines``: the file's first lines only, as it stood when a replay was recorded: a
        config it lacks is approximated from what the file holds, and later sessions'
        lines changed 14 of 300 approximated answers of a recorded screen."""
        from autotune.search.replay import APPROXIMATIONS

        if approximate not in APPROXIMATIONS:
            raise ValueError(f"approximate must be one of {', '.join(APPROXIMATIONS)}, not {approximate!r}")
        self.approximate = approximate
        self.tables: dict[str, list[dict]] = {}
        self.target_key = target_key
        self.timing = timing
        self.lines = lines if lines is not None else line_count(path)  # said in the result, to replay it again
        for rec in records(path, timing=timing, lines=(0, lines)):
            if rec["target"] == target_key:
                self.tables.setdefault(rec["layer"], []).append(
                    {"config": rec["config"], "latency_median": rec["latency"], "status": rec["status"]})
        self.loaded = sum(len(t) for t in self.tables.values())
        self.measured = 0  # nothing is ever measured
        self.asked = 0
        self.approximations = 0
        self.approximated: dict[str, set[str]] = {}  # layer -> configs answered by the approximation
        self._benches: dict[str, object] = {}

    @staticmethod
    def targets_in(path: str, timing: str = LAUNCHES) -> list[str]:
        return sorted({rec["target"] for rec in records(path, timing=timing)})

    def measure(self, layer_key: str, space, configs):
        from autotune.search.replay import ReplayBench
        from autotune.search.tuner import TrialResult
        from autotune.templates import config_to_json

        bench = self._benches.get(layer_key)
        if bench is None:
            self.check_holds({layer_key: layer_key})
            bench = self._benches[layer_key] = ReplayBench(space, self.tables[layer_key], missing=self.approximate)
        self.asked += len(configs)
        out = []
        for cfg in configs:
            if config_to_json(cfg) not in bench.table:
                # Files of older runs lack the configs the space rejected: judge those
                # here (the space is the same), so they are not given a latency.
                if not space.applies(cfg):
                    out.append(TrialResult(cfg, None, "invalid"))
                    continue
                self.approximations += 1
                self.approximated.setdefault(layer_key, set()).add(config_to_json(cfg))
            out.append(bench.measure([cfg])[0])
        return out

    def measure_groups(self, groups):
        return [self.measure(layer_key, space, configs) for layer_key, space, configs in groups]

    def check_holds(self, names: dict[str, str]) -> None:
        """End the run with one line unless the file holds a valid measurement of every
        layer (key -> name to say): for a layer it lacks every answer would be
        "invalid", and its tuner would ask on for ever."""
        lacking = [name for key, name in names.items() if not any(r["status"] == "ok" for r in self.tables.get(key, []))]
        if lacking:
            raise SystemExit(f"error: --replay: the file holds no valid measurement on {self.target_key} of "
                             f"{', '.join(lacking)}; a replay answers only layers that were measured")

    def cost_seconds(self) -> None:
        """A replay spends no measurement time."""
        return None

    def twins(self) -> None:
        """A replay builds nothing."""
        return None

    def cost_summary(self) -> str:
        return f"replayed, {self.approximations} of {self.asked} answered by {self.approximation_words}"

    @property
    def approximation_words(self) -> str:
        """What answered the configs the file lacks, as a sentence says it."""
        return APPROXIMATION_WORDS[self.approximate]

    def approximated_in(self, layer_key: str, configs) -> int:
        """How many of ``configs`` (one run's) were answered by the approximation:
        a comparison of tuners is only as faithful as these counts are small, and one
        tuner's approximated answers say nothing of another's."""
        from autotune.templates import config_to_json

        got = self.approximated.get(layer_key, set())
        return sum(config_to_json(c) in got for c in configs)

    def exact_trials(self, layer_key: str, results) -> int:
        """Trials of one run (its results in order; rejected configs are no trial) before
        its first approximated answer: a ratio decided within them is
        as measured, however many answers came approximated after."""
        from autotune.templates import config_to_json

        got = self.approximated.get(layer_key, set())
        trials = 0
        for res in results:
            if config_to_json(res.config) in got:
                break
            trials += res.status != "invalid"
        return trials

    def best(self, layer_key: str) -> float | None:
        vals = [r["latency_median"] for r in self.tables.get(layer_key, []) if r["status"] == "ok" and r["latency_median"]]
        return min(vals) if vals else None

    def close(self) -> None:
        pass


def line_count(path: str) -> int:
    """How many lines the measurement file has (what a result says it replayed)."""
    with open(path, "rb") as fh:
        return sum(1 for _ in fh)


def records(path: str, *, parse_configs: bool = True, lines: tuple[int, int | None] | None = None,
            timing: str = LAUNCHES):
    """The measurement file's records, each config parsed (or, without ``parse_configs``,
    as the file writes it); a line that is not a whole record (a run killed mid-write) is
    skipped. ``lines``: only lines ``start`` to ``stop`` (zero-based, stop excluded; None:
    to the end), e.g. what one session appended, or the file as it stood before.
    ``timing``: only lines timed so (:func:`timing_of`). Data only: json.loads, nothing run."""
    start, stop = lines if lines is not None else (0, None)
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh):
            if number < start:
                continue
            if stop is not None and number >= stop:
                break
            try:
                rec = json.loads(line)
                if timing_of(rec) != timing:
                    continue
                yield {"target": rec["target"], "layer": rec["layer"],
                       "config": json.loads(rec["config"]) if parse_configs else str(rec["config"]),
                       "latency": rec["latency"], "status": rec["status"]}
            except (ValueError, KeyError, TypeError):
                continue
