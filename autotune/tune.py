"""``autotune tune``: the measured tuning loop over every layer of a model.

Per layer: match against history, pick a tuner, then ask -> apply -> build/run -> write
to history -> tell, until the layer's share of the budget is spent; finally verify the
winner numerically before it is marked best. Every measurement is committed as it is
made, so a killed run loses nothing and the next run resumes (configs already measured
are never measured again).
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.budget import BUDGET_SPLITS, DEFAULT_MIN_TRIALS, LayerProgress, estimate_seconds, make_schedule, roofline_seconds
from autotune.errors import INT64_MAX, AutotuneError, OptionError, check_choice, check_count, check_flag, interrupt_mark, quoted, keep_interrupts_through_tvm, raise_if_interrupted_since
from autotune.feature_importance import LearnedImportance
from autotune.frontend import BATCH_NORM_LAYERINGS, DEFAULT_BATCH_NORM
from autotune.history import OTHER_BATCH_TUNER, HistoryError
from autotune.layering_hint import history_layering_hint
from autotune.measure import MeasureOptions, Measurement
from autotune.priors import priors_from_match
from autotune.report import format_match
from autotune.run_status import close_stale_runs, concurrent_runs, overlapping_runs
from autotune.target import TargetSpec, float_lanes

if TYPE_CHECKING:
    from autotune.decompose import Layer
    from autotune.frontend import ModelSpec

#: How many of the best candidates to try verifying before giving up on a layer.
VERIFY_CANDIDATES = 3


@dataclass
class TuneOptions:
    trials: int = 64
    tuner: str = "auto"
    batch: int = 8
    seed: int = 0
    min_trials: int = DEFAULT_MIN_TRIALS
    max_layers: int | None = None
    verify: bool = True
    model_latency: bool = True
    high: float = 0.8
    low: float = 0.05
    batch_norm: str = DEFAULT_BATCH_NORM  # where batch norm runs: frontend.BATCH_NORM_LAYERINGS
    budget_split: str = "adaptive"  # how trials are spread over layers: budget.BUDGET_SPLITS
    #: the adaptive split's one-trial first chunk for a layer matched at ``high`` or above
    #: (budget.AdaptiveSchedule.is_probe); only with that split, and where the match
    #: dispatches (tuner "auto")
    probes: bool = True
    probe_at: float | None = None  # the match score from which a layer is probed (None: ``high``)
    #: a layer dispatched cold is matched again before each later chunk, and tuned by the
    #: tuner that match picks once layers tuned since resemble it (tuner "auto" only)
    rematch: bool = True
    measure: MeasureOptions = field(default_factory=MeasureOptions)

    def __post_init__(self) -> None:
        """Refuse a bad value here, where the Python API and the CLI both pass, before
        anything is written: ``trials=0`` or ``high=2`` ran a whole tune before."""
        from autotune.search import TUNERS

        for name in ("trials", "batch"):
            check_count(getattr(self, name), name)
        check_count(self.min_trials, "min_trials")  # 0 ran as 1
        if self.max_layers is not None:
            check_count(self.max_layers, "max_layers")
        check_count(self.seed, "seed", zero_ok=True, maximum=INT64_MAX)
        for name in ("verify", "model_latency", "probes", "rematch"):
            check_flag(getattr(self, name), name)
        check_choice(self.tuner, "tuner", ("auto", *TUNERS))
        check_choice(self.batch_norm, "batch_norm", BATCH_NORM_LAYERINGS)
        check_choice(self.budget_split, "budget_split", BUDGET_SPLITS)
        # both are match scores, in [0, 1]; a low above high would send the layers between
        # them to the guided GA and none to transfer XGBoost, which no one means (high 1
        # turns the guided GA off: short of an exact hit, a match is 0.99 at most)
        if not (_is_number(self.low) and _is_number(self.high) and 0.0 <= self.low <= self.high <= 1.0):
            raise OptionError(
                f"{{low}} and {{high}} are match scores: need 0 <= {{low}} <= {{high}} <= 1, got {{low}} {_score(self.low)} {{high}} {_score(self.high)}",
                "low", "high",
            )
        if self.probe_at is not None and not (_is_number(self.probe_at) and 0.0 <= self.probe_at <= 1.0):
            raise OptionError(f"{{probe_at}} is a match score: need 0 <= {{probe_at}} <= 1, got {_score(self.probe_at)}", "probe_at")
        if not isinstance(self.measure, MeasureOptions):
            raise OptionError(f"{{measure}} must be a MeasureOptions, got {type(self.measure).__name__}", "measure")


def _last_line(err: BaseException) -> str:
    """An error's last line (TVM's own, after its traceback), cut to 300 characters."""
    lines = str(err).strip().splitlines()
    return (lines[-1] if lines else type(err).__name__)[:300]


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _score(value) -> str:
    return f"{value:g}" if _is_number(value) else quoted(value)


def ensure_measurable(target: TargetSpec, rpc: str | None, timing: str = "launches") -> None:
    """Tuning measures: refuse early, before anything is written, when it cannot.

    With ``rpc``, the tracker is asked now whether a server is registered under the key:
    finding out inside the runner costs minutes of failed trials, or hangs for good.
    ``timing`` "queued" is for CUDA kernels: elsewhere it would time as TVM's evaluator
    does while history recorded it as queued.
    """
    if timing == "queued" and target.kind != "cuda":
        raise OptionError(f"{{timing}} queued times CUDA kernels, behind a spin kernel on the GPU; on {target.kind} "
                          "TVM's evaluator is not paced by kernel launches: leave {timing} out", "timing")
    if rpc:
        from autotune.measure import check_rpc

        check_rpc(rpc)
    if not (target.has_device or rpc):
        raise AutotuneError(
            f"cannot measure on {target.kind} ({target.arch}): no such device here (use --target llvm, or --rpc HOST:PORT:KEY)"
        )


@dataclass(frozen=True)
class LoadedModel:
    """A model read, fused and cut into layers.

    Loading comes apart from tuning so a caller can load first: a model that will not
    load then stops the run before history or MLflow is opened, and leaves neither behind.
    """

    spec: ModelSpec
    mod: Any  # tvm.IRModule, fused
    layers: list[Layer]
    batch_norm: str


def load_layers(
    model: str, *, input_shapes=None, size: int | None = None, batch_size: int | None = None, batch_norm: str = DEFAULT_BATCH_NORM
) -> LoadedModel:
    """Read ``model`` (a zoo name or an ONNX path), fuse it and cut it into layers."""
    from autotune import decompose, frontend

    spec, mod = frontend.load_and_fuse(
        model, input_shapes=input_shapes, size=size, batch_size=batch_size, batch_norm=batch_norm
    )
    return LoadedModel(spec, mod, decompose.decompose(mod, batch_size=spec.batch_size, sequence_first=spec.sequences_carry_batch_second), batch_norm)


#: Layers whose shallow history a tune says (the first with its advice), before one line
#: says the rest are not said.
SHALLOW_NOTES = 3
#: The whole model is timed with TVM's defaults and with history's schedules in turn, this
#: many rounds each, at the end of the tune: timed minutes apart, before the tune and
#: after it, the two read 0.98x for a MobileNetV2 whose modules, timed in turn, were 1.46x
#: apart, and 7.05x for an AlexNet at 17.4x (a helper's trial on this 2-core machine, busy).
MODEL_ROUNDS = 3
#: A whole-model timing runs the model this often at least (a warm-up and a timed run a
#: round); where its layers' known timings sum past MODEL_TIMING_LIMIT_S for that many
#: runs, it is skipped with a note (:meth:`TuneSession._model_too_slow_to_time`).
MODEL_RUNS_TIMED = 2 * MODEL_ROUNDS
MODEL_TIMING_LIMIT_S = 120.0
#: The runs this process started in history: an interrupted `autotune tune` says its
#: measurements are kept only where a run had begun (stopped while loading, none was).
STARTED_RUNS: list[str] = []


class TuneSession:
    """One ``autotune tune`` run: owns the measurer, history, tracker and reporter."""

    def __init__(self, target: TargetSpec, store, options: TuneOptions, *, tracker=None, reporter=None) -> None:
        from autotune.progress import make_reporter
        from autotune.tracking import Tracker

        self.target = target
        self.store = store
        self.options = options
        self.tracker = tracker or Tracker.create(False)
        self.reporter = reporter or make_reporter("quiet")
        self.run_id = uuid.uuid4().hex[:12]
        self.importance = LearnedImportance(store, target.kind)
        self._measurer = None
        self.spaces: dict[str, Any] = {}
        self.decomposition: list = []
        self._inputs: dict[str, dict] = {}
        self._interrupts = interrupt_mark()
        #: configs measured this run per op class: new evidence a cold layer's match may gain
        self._measured_by_class: dict[str, int] = {}
        #: layers this run has said a shallow history of (the advice in full once is enough:
        #: a 48-trial ResNet-50 tune printed the same advice 19 times)
        self._told_shallow = 0

    def measurer(self):
        """The session's measurer, made on first use: its build workers start then, so a
        tune asks for it as soon as it knows some layer needs measuring."""
        from autotune.measure import Measurer

        if self._measurer is None:
            self._measurer = Measurer(self.target, self.options.measure)
        return self._measurer

    def close(self) -> None:
        if self._measurer is not None:
            self._measurer.close()
            self._measurer = None

    # --- one model ---------------------------------------------------------------------
    def tune_model(
        self, model: str | LoadedModel, *, input_shapes=None, size: int | None = None, batch_size: int | None = None,
        leave_open: bool = False,
    ) -> dict[str, Any]:
        """Tune ``model``: a zoo name or ONNX path, loaded here with the keywords (batch 1
        unless given), or a :func:`load_layers` result, whose layers are already cut: then
        a loading keyword is refused rather than silently not applied. ``leave_open``: a
        tune that ends well leaves its run running in history, with its summary, for the
        caller to close once it has written what comes after (a report, a module): killed
        meanwhile, the run read "finished" for good, its MLflow run RUNNING."""
        from autotune import roofline
        from autotune.info import build_versions

        opts = self.options
        if isinstance(model, LoadedModel):
            given = [name for name, value in (("input_shapes", input_shapes), ("size", size), ("batch_size", batch_size)) if value is not None]
            if given:
                raise OptionError(
                    f"{{{given[0]}}} is for loading a model, and this one is loaded already: give it to load_layers", given[0]
                )
            if model.batch_norm != opts.batch_norm:
                raise OptionError(
                    f"the model was loaded with {{batch_norm}} {model.batch_norm}, the tune asks for {opts.batch_norm}", "batch_norm"
                )
        ensure_measurable(self.target, opts.measure.rpc, opts.measure.timing)
        keep_interrupts_through_tvm()  # Ctrl-C from here on stops the tune, wherever TVM is
        self._interrupts = interrupt_mark()
        if not isinstance(model, LoadedModel):
            model = load_layers(
                model, input_shapes=input_shapes, size=size, batch_size=batch_size,
                batch_norm=opts.batch_norm,
            )
        spec, mod, layers = model.spec, model.mod, model.layers
        self._inputs = spec.inputs_description()
        # before this run registers its workloads; nor do runs tuning beside it on this host
        # count (of two tunes started together on a new history, only the first said so)
        history_was_empty = not self.store.has_records(excluding_runs=[run["run_id"] for run in concurrent_runs(self.store)])
        self.store.register_target(self.target.history_info())
        for layer in layers:
            self.store.register_workload(layer.workload_info())
        peaks = roofline.peaks_for_target({"kind": self.target.kind, "device_name": self.target.device_name})
        tunable = [l for l in layers if l.tunable]
        est = {l.name: estimate_seconds(l, peaks.peak_flops, peaks.peak_bw) for l in layers}
        total_est = sum(est.values()) or 1.0
        # Layers history already holds a winner for are reused with no trial, so the budget
        # goes to the others: a tune after a partial one spends all the trials it was given.
        reused = {l.name for l in tunable if self._exact_hit(l)}
        pending = [l for l in tunable if l.name not in reused]
        if opts.max_layers is not None:
            chosen = {l.name for l in sorted(pending, key=lambda l: -est[l.name])[: opts.max_layers]}
            pending = [l for l in pending if l.name in chosen]
            tunable = [l for l in tunable if l.name in reused or l.name in chosen]
        if pending:
            self.measurer()  # its build workers start now, while tracking and history get ready
        if len(pending) > 1 and opts.min_trials > opts.trials:  # it ran without a word, one layer tuned
            self.reporter.message(f"note: --min-trials {opts.min_trials} is more than the {opts.trials} trials: one "
                                  f"layer's first chunk may take them all, leaving the other {len(pending) - 1} untuned")
        progress = {
            l.name: LayerProgress(l.name, l.occurrences, l.flops, l.op_class, roofline_seconds(l, peaks.peak_flops, peaks.peak_bw))
            for l in pending
        }
        probing = opts.probes and opts.tuner == "auto" and opts.budget_split == "adaptive"
        schedule = make_schedule(
            opts.budget_split, list(progress.values()), opts.trials, min_trials=opts.min_trials, batch=opts.batch,
            probe_at=(opts.high if opts.probe_at is None else opts.probe_at) if probing else None,
        )
        report: dict[str, Any] = {
            "run_id": self.run_id,
            "model": spec.name,
            "model_source": spec.source,
            # the shapes tuned (a zoo model's size and batch are nowhere else) and the batch
            # as read (which input dimension): its layers' keys leave it out
            "inputs": spec.inputs_description(),
            "batch": spec.batch_description(),
            "target": {"kind": self.target.kind, "arch": self.target.arch, "device_name": self.target.device_name, "config": self.target.config},
            "budget": opts.trials,
            "history": self.store.url,
            # nothing to draw on: the first run, or a mistyped --history path, which tune
            # creates (as it must, the first time) and tuned cold without a word
            "history_was_empty": history_was_empty,
            "tuner": opts.tuner,
            "batch_norm": opts.batch_norm,  # the layering: it decides the layers' keys
            "budget_split": schedule.name,
            "probes": probing,
            "versions": build_versions(),
            "roofline": peaks.to_dict(),
            # where candidates, winners' checks and the model timing ran (None: this machine)
            "rpc": opts.measure.rpc,
            # every option as given, the run's record of how to make it again (the seed,
            # repeat and the batch were nowhere before)
            "options": asdict(opts),
            # None unless timed (``model_latency``), not absent: a reader's key stays there
            "model_latency_before": None,
            "model_latency_after": None,
            # 0: an empty table, which says why (--quiet hears no note)
            "tunable_layers": sum(1 for l in layers if l.tunable),
            "layers": [],
        }
        self.decomposition = layers
        from autotune.tracking import report_params

        # named by the target too: runs of one model on an H100 and a CPU listed alike in MLflow's table
        self.tracker.start(f"tune-{spec.name}-{self.target.kind}", params=report_params(report),
                           tags={"autotune.run_id": self.run_id})
        self.tracker.mark_killed(close_stale_runs(self.store))
        hint = history_layering_hint(self.store, spec, target_key=self.target.key, batch_norm=opts.batch_norm)
        if hint:
            report["history_note"] = hint
        others = concurrent_runs(self.store)
        if others:
            report["concurrent_runs"] = [run["run_id"] for run in others]
        self.store.start_run(
            self.run_id, model=spec.name, target_key=self.target.key, tuner=opts.tuner,
            params={"trials": opts.trials, "tuner": opts.tuner, "batch_norm": opts.batch_norm, "budget_split": opts.budget_split, "probes": opts.probes, "model": spec.source, "pid": os.getpid(), "host": socket.gethostname(),
                    "options": report["options"], "inputs": report["inputs"],
                    # which autotune and TVM made its records: they travel with an export, a report does not
                    "versions": report["versions"]},
        )
        STARTED_RUNS.append(self.run_id)
        status = "failed"
        outcomes: dict[str, dict[str, Any]] = {}
        open_: dict[str, _LayerTuning] = {}
        try:
            planned = [(l.name, 0 if l.name in reused else schedule.planned.get(l.name)) for l in tunable]
            self.reporter.start_model(spec.name, planned, total=opts.trials)
            if hint:
                self.reporter.message(f"note: {hint}")
            if not tunable:  # an empty table and "timing noise" said nothing of why
                self.reporter.message(
                    f"note: {spec.name} has no tunable layer ({len(layers)} kernel{'s' if len(layers) != 1 else ''}, none a "
                    "convolution, matrix product, pooling, softmax, norm or other reduction): nothing to tune, its "
                    "kernels keep TVM's defaults"
                )
            for run in others:
                self.reporter.message(
                    f"note: run {run['run_id']} (pid {run['params']['pid']}) is measuring on this machine too: timings "
                    "taken together run slower, and history keeps them"
                )
            outcomes.update((l.name, self._reuse(l)) for l in tunable if l.name in reused)
            if pending:
                self.reporter.stage(f"timing TVM's default schedule of {len(pending)} layer{'s' if len(pending) != 1 else ''}")
            for layer in pending:  # what an untried layer costs now, to weigh it against the others
                progress[layer.name].default_s = self.default_latency(layer)
            by_name = {l.name: l for l in pending}
            report["schedule"] = []  # [layer, trials] per chunk, in the order given
            while (chunk := self._next_chunk(schedule, progress, by_name, probing)) is not None:
                name, n = chunk
                p = progress[name]
                if name not in open_:
                    open_[name] = self._open_layer(by_name[name], p)
                else:
                    self._rematch_cold(open_[name])
                p.allotted += n
                self.reporter.layer_budget(name, p.allotted)
                report["schedule"].append([name, n])
                measured = self._advance(open_[name], p, n)
                refunded = schedule.refund(n - measured)  # passed on to other layers, if the split does
                p.allotted -= refunded
                # the trials the chunk kept: [mean, 19] had been logged for a layer that ran
                # out of configs after 3, and the schedule summed past the budget spent
                report["schedule"][-1][1] = n - refunded
                open_[name].out["budget"] = p.allotted
                open_[name].out["probe"] = p.probed  # its first chunk was one trial (budget.AdaptiveSchedule.is_probe)
                for other in list(open_):
                    if schedule.done_with(progress[other]):
                        outcomes[other] = self._close_layer(open_.pop(other))
            for name in list(open_):
                outcomes[name] = self._close_layer(open_.pop(name))
            # the budget did not reach these: matched (as history stood), then closed
            unreached = {l.name: self._open_layer(l, progress[l.name], reached=False) for l in pending if l.name not in outcomes}
            from_other_batch = self._time_other_batch_winners([run.layer for run in unreached.values()])
            for name, run in unreached.items():
                outcomes[name] = out = self._close_layer(run)
                if name in from_other_batch:  # applied where it timed faster than TVM's default
                    out["other_batch"] = dict(from_other_batch[name], applied=out.get("best_config") is not None)
            for layer in tunable:
                outcome = outcomes[layer.name]
                # what a roofline split went by; the table's share is of the measured time
                outcome["roofline_share"] = est[layer.name] / total_est
                report["layers"].append(outcome)
            # after the layers' own timings, which the run timeout bounds: they say whether
            # the whole model, timed in this process with no timeout, can be timed at all
            if opts.model_latency:
                self.reporter.stage("timing the model with TVM's defaults and with history's schedules, in turn")
                self._time_models(report, mod, layers)
            # where measuring went: building candidates (TVM, then NVRTC or nvcc on CUDA)
            # against timing them; both zero when history answered every layer
            spent = self._measurer.seconds if self._measurer is not None else {"build": 0.0, "run": 0.0}
            report["measure_seconds"] = {k: round(v, 2) for k, v in spent.items()}
            # candidates that were the same program as one built or timed for another
            # (autotune.program_digest): answered with its timing, not measured again
            report["measure_twins"] = dict(self._measurer.twins) if self._measurer is not None else {}
            # runs that began measuring here after this one did: its timings shared the machine too
            joined = [r for r in overlapping_runs(self.store, self.run_id) if r not in report.get("concurrent_runs", [])]
            if joined:
                report["concurrent_runs"] = [*report.get("concurrent_runs", []), *joined]
            status = "finished"
        except KeyboardInterrupt:
            status = "killed"
            raise
        finally:
            self.reporter.close()
            if status != "finished":
                self._log_unclosed_layers(open_)
            # the run's dispatch decisions and the history records they drew on
            summary = {"layers": [
                {k: layer.get(k) for k in ("name", "workload_key", "match_score", "match", "dispatch", "tuner", "source_weights", "trials", "best_latency", "best_record_id")}
                for layer in report["layers"] or [outcomes[l.name] for l in tunable if l.name in outcomes]
            ]}
            try:
                if status == "finished" and leave_open:
                    self.store.save_run_summary(self.run_id, summary)
                else:
                    self.store.finish_run(self.run_id, status, summary)
            except HistoryError:
                if status == "finished":
                    raise
                # what stopped the tune (a full disk) stops its closing too: said was the
                # closing ("cannot finish run"), not the write that failed first

        return report

    def _next_chunk(self, schedule, progress: dict[str, LayerProgress], by_name: dict, probing: bool):
        """The schedule's next chunk, after the match of every layer not yet visited is
        brought up to date (when probing): tuning a layer raises its twins' matches."""
        if probing:
            waiting = [p for p in progress.values() if not p.allotted]
            summary = self.store.summary(searched_only=True) if waiting else []
            for p in waiting:
                layer = by_name[p.name]
                p.match = self._match(layer, self._space(layer), summary=summary)[0].score
        return schedule.next_chunk(progress)

    def _remote(self):
        """The ``--rpc`` device for one step (a context manager), or None without ``--rpc``.

        One session per step, not per tune: the server serves one session at a time, and
        the runner needs it between steps.
        """
        from contextlib import nullcontext

        from autotune.remote import RemoteDevice

        rpc = self.options.measure.rpc
        return RemoteDevice(rpc, self.target.kind) if rpc else nullcontext(None)

    def _time_models(self, report: dict[str, Any], mod, layers) -> None:
        """``report["model_latency_before"]`` (TVM's defaults) and ``..._after`` (history's
        schedules): each the median of :data:`MODEL_ROUNDS` rounds, the two modules timed
        in turn, so that what else the machine ran weighs on both alike; the rounds go to
        ``model_latency_rounds``. A failure must not lose the tune: it leaves ``None`` and
        its reason under ``model_latency_errors[key]``. So does a model too slow to time
        (:meth:`_model_too_slow_to_time`)."""
        import numpy as np

        built = {}
        for key, use_history in (("model_latency_before", False), ("model_latency_after", True)):
            too_slow = self._model_too_slow_to_time(layers, use_history=use_history)
            if too_slow:
                self._model_not_timed(report, key, too_slow, hint="; --no-model-latency skips it without a word")
                continue
            try:
                built[key], changed = self._build_model(mod, layers, use_history=use_history)
            except Exception as err:
                self._model_not_timed(report, key, _last_line(err))
                continue
            if use_history:  # the layers the timed module runs other than TVM's defaults
                report["model_layers_changed"] = len(changed)
                report["model_changed_layers"] = changed
        if not built:
            return
        rounds: dict[str, list[float]] = {key: [] for key in built}
        try:
            with self._remote() as remote:
                timers = {key: self._model_timer(ex, key, remote) for key, ex in built.items()}
                for _ in range(MODEL_ROUNDS):
                    for key in list(timers):
                        try:
                            rounds[key].append(timers[key]())
                        except Exception as err:
                            self._model_not_timed(report, key, _last_line(err))
                            del timers[key], rounds[key]
        except Exception as err:  # loading either module (over --rpc: the session)
            for key in [key for key in rounds if not rounds[key]]:
                self._model_not_timed(report, key, _last_line(err))
                del rounds[key]
        for key, values in rounds.items():
            report[key] = float(np.median(values))
        report["model_latency_rounds"] = {key.removeprefix("model_latency_"): values for key, values in rounds.items()}

    def _model_not_timed(self, report: dict[str, Any], key: str, reason: str, *, hint: str = "") -> None:
        report[key] = None
        report.setdefault("model_latency_errors", {})[key] = reason
        self.reporter.message(f"model latency not measured: {reason}{hint}")

    def _model_too_slow_to_time(self, layers, *, use_history: bool) -> str | None:
        """Why the whole model is not timed, or None. It is timed in this process,
        :data:`MODEL_RUNS_TIMED` runs at least, with no timeout, and native code does not stop for Ctrl-C
        or SIGTERM: a 20000^2 matmul's untuned loop nest ran on for over ten minutes, deaf
        to both, where its layer's own timings had each stopped at the run timeout. So a
        layer whose TVM default ran past that timeout (and, after tuning, has nothing
        faster in history) skips it, as do layers whose known timings sum past
        :data:`MODEL_TIMING_LIMIT_S` for those :data:`MODEL_RUNS_TIMED` runs."""
        from autotune.compile import default_space_id

        space_id = default_space_id(self.target)
        timeout = self.options.measure.run_timeout
        total = 0.0
        for layer in layers:
            best = self.store.fastest(layer.workload_key, self.target.key, limit=1) if use_history else []
            defaults = self.store.records(workload_key=layer.workload_key, target_key=self.target.key, space_id=space_id)
            timed = [r.latency_median for r in defaults if r.status == "ok" and r.latency_median]
            latency = best[0].latency_median if best else (timed[-1] if timed else None)
            if latency is None:
                if any(r.status == "timeout" for r in defaults):
                    return (f"{layer.name} ran past the {timeout:g} s run timeout with TVM's default schedule, and the "
                            "whole model is timed with no timeout")
                continue
            total += layer.occurrences * latency
        if MODEL_RUNS_TIMED * total > MODEL_TIMING_LIMIT_S:
            return (f"its layers take {total:.1f} s a run as timed, and the whole model's timing runs it "
                    f"{MODEL_RUNS_TIMED} times at least, with no timeout")
        return None

    def _build_model(self, mod, layers, *, use_history: bool):
        """The whole model built for the target: with TVM's defaults, or with history's
        schedules applied (and the layers that then differ from the defaults)."""
        import tvm

        from autotune import compile as compiler

        work = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)
        changed: list[str] = []
        if use_history:
            work, applied = compiler.apply_history(work, layers, self.target, self.store, spaces=self.spaces)
            changed = applied.changed_layers
        return compiler.build(work, self.target), changed

    def _model_timer(self, ex, key: str, remote):
        """A function that times one round of the built model ``ex`` (seconds a run), here
        or, with ``remote``, on the ``--rpc`` server."""
        import tvm
        from tvm import relax

        from autotune.run import seeded_inputs

        dev = self.target.device() if remote is None else remote.device()
        purpose = key.replace("model_latency_", "model-")
        vm = relax.VirtualMachine(ex if remote is None else remote.load(ex, purpose, self.target.tvm_target), dev)
        args = [tvm.runtime.tensor(a, dev) for a in seeded_inputs({"inputs": self._inputs}).values()]
        if remote is None:
            timer = vm.time_evaluator("main", dev, number=1, repeat=1, min_repeat_ms=50)
            return lambda: float(timer(*args).results[0])
        # Over RPC the stateful form: inputs set once, and nothing (a tuple, say)
        # returned across the connection per call.
        vm.set_input("main", *args)
        timer = vm.time_evaluator("invoke_stateful", dev, number=1, repeat=1, min_repeat_ms=50)
        return lambda: float(timer("main").results[0])

    # --- one layer ---------------------------------------------------------------------
    def _layer_outcome(self, layer, m, decision) -> dict[str, Any]:
        return {
            "name": layer.name,
            "op_class": layer.op_class,
            "workload_key": layer.workload_key,
            "occurrences": layer.occurrences,
            "flops": layer.flops,
            "bytes": layer.bytes,
            "match_score": m.score,
            "match": m.to_dict(),
            "dispatch": decision.dispatch,
            "tuner": decision.tuner,
            "trials": 0,
            "budget": 0,  # 0 and no exact hit: the budget ran out first
            "probe": False,
            "resumed": 0,  # this layer's configs measured by earlier runs (told to its tuner, not re-measured)
            "curve": [],
            "failed": {},  # this run's trials that did not time, by status
        }

    def _match(self, layer, space, *, summary=None, exclude=(), tuning: bool = False):
        """The layer's match and dispatch. ``tuning``: the layer was given trials, so an
        exact hit found now (another tune or an import on the same history finished it
        meanwhile) is history to tune from, not a reuse: "reuse" is no tuner, and such a
        tune stopped with a traceback."""
        from autotune import dispatch
        from autotune.history.match import match

        opts = self.options
        m = match(
            self.store, layer.workload_info(), self.target.key, weights=self.importance.weights(layer),
            space_id=space.space_id, summary=summary, min_trials=self._tuned_at(space), exclude=exclude,
        )
        return m, dispatch.choose(m.score, m.exact and not tuning, override=opts.tuner, high=opts.high, low=opts.low)

    def _reuse(self, layer) -> dict[str, Any]:
        """A layer history holds a winner for: its record is the result, with no trial.

        The result is the record ``compile`` applies, checked first where it never was
        (a run killed before its check, an import): the tuned space's best, or TVM's
        default where that is faster. Reported as the space's best, a reused layer read
        0.74x its default while the export ran the default."""
        space = self._space(layer)
        m, decision = self._match(layer, space)
        out = self._layer_outcome(layer, m, decision)
        self.reporter.start_layer(layer.name, 0, decision.tuner, m.score)
        out["default_latency"] = default = self.default_latency(layer)
        with self.tracker.layer(layer.name, params={"tuner": decision.tuner, "op_class": layer.op_class, "trials_budget": 0}, tags={"match_score": f"{m.score:.4f}", "dispatch": decision.dispatch}):
            winner = self._verify_best(layer, space) if self.options.verify else self._applicable_best(layer, space)
            out["best_latency"] = winner.latency_median if winner else None
            out["best_record_id"] = winner.id if winner else None
            out["verified"] = winner.verified if winner else None
            out["speedup"] = _ratio(default, out["best_latency"])
        self.reporter.end_layer(layer.name, out)
        return out

    def _open_layer(self, layer, progress: LayerProgress, *, reached: bool = True) -> "_LayerTuning":
        """Match, dispatch and make the layer's tuner, told what earlier runs measured.

        A layer the budget did not ``reached`` is opened only to be closed: no tuner is
        made, and its start names none (it named the tuner dispatch would have picked,
        with that tuner's warning of shallow history, for a layer given no trial)."""
        space = self._space(layer)
        m, decision = self._match(layer, space, tuning=True)
        out = self._layer_outcome(layer, m, decision)
        self.reporter.start_layer(layer.name, 0, decision.tuner if reached else None, m.score)
        out["default_latency"] = progress.default_s  # timed for every pending layer before tuning
        # its tuner is a param once the layer closes: the budget may not reach it
        self.tracker.open_layer(layer.name, params={"op_class": layer.op_class}, tags={"match_score": f"{m.score:.4f}", "dispatch": decision.dispatch})
        if reached:
            tuner, earlier = self._layer_tuner(layer, space, m, decision, out)
        else:
            tuner, earlier = None, self.store.records(workload_key=layer.workload_key, target_key=self.target.key, space_id=space.space_id)
        out["resumed"] = sum(1 for r in earlier if r.status != "invalid")
        best = min((r.latency_median for r in earlier if r.ok and space.contains(r.config)), default=None)
        return _LayerTuning(layer, space, decision.tuner, tuner, out, best, others_at_match=self._measured_by_class.get(layer.op_class, 0))

    def _layer_tuner(self, layer, space, m, decision, out: dict[str, Any]):
        """The tuner ``decision`` names, with the priors of match ``m``, told every config of
        the layer measured so far (by earlier runs, or this one): none is measured again."""
        from autotune.search import make_tuner
        from autotune.search.tuner import TrialResult, is_shallow, source_depth

        priors = priors_from_match(self.store, m, space=space, lanes=float_lanes(self.target.kind, self.target.arch))
        depth = source_depth(priors)
        out["history_records"] = {"used": len(priors), "restated_for_vector_width": sum(p.restated for p in priors), **depth}
        tuner = make_tuner(decision.tuner, space, seed=self.options.seed, priors=priors, layer_features=layer.features())
        if is_shallow(depth) and decision.tuner in ("gga", "tl_xgb"):
            note = shallow_note(self._told_shallow, layer.name, depth, decision.tuner, handover=getattr(tuner, "handover", 0))
            if note:
                self.reporter.message(note)
            self._told_shallow += 1
        elif not m.neighbours and decision.dispatch == "override" and decision.tuner in ("gga", "tl_xgb"):
            # --tuner gga on a history with nothing like the layer: it starts as a cold one would
            self.reporter.message(f"{layer.name}: {decision.tuner} has no history to draw on (nothing like this layer "
                                  "measured on this target); it starts from its own first draws")
        earlier = self.store.records(workload_key=layer.workload_key, target_key=self.target.key, space_id=space.space_id)
        tuner.tell([TrialResult(r.config, r.latency_median, r.status) for r in earlier if space.contains(r.config)])
        return tuner, earlier

    def _rematch_cold(self, run: "_LayerTuning") -> None:
        """A layer dispatched cold (history held nothing like it) is matched again before each
        later chunk: the layers tuned since are history now. Once it matches some, the cold
        tuner gives way to the one the match picks, as it would in the next tune.

        Its own records are left out of this match: after its first chunk they would make
        it an exact hit, or its own closest neighbour, and tell nothing new.
        """
        if not self.options.rematch or self.options.tuner != "auto" or run.tuner_name != "xgb":
            return
        # only layers of its class measured since its last match can change that match
        others = self._measured_by_class.get(run.layer.op_class, 0) - len(run.out["curve"])
        if others == run.others_at_match:
            return
        run.others_at_match = others
        m, decision = self._match(run.layer, run.space, exclude=(run.layer.workload_key,))
        if decision.tuner == "xgb":
            return
        out = run.out
        run.tuner, _ = self._layer_tuner(run.layer, run.space, m, decision, out)
        out["rematched"] = {"from": run.tuner_name, "at_trial": len(out["curve"])}
        out.update(match_score=m.score, match=m.to_dict(), dispatch=decision.dispatch, tuner=decision.tuner)
        run.tuner_name = decision.tuner
        self.reporter.message(
            f"{run.layer.name}: history now holds layers like it (match {format_match(m.score)}); {decision.tuner} from trial {len(out['curve']) + 1}"
        )

    def _advance(self, run: "_LayerTuning", progress: LayerProgress, trials: int) -> int:
        """Measure up to ``trials`` more configs of the layer; returns how many were measured
        (fewer when its tuner runs out of candidates, which marks the layer exhausted)."""
        opts = self.options
        layer, out = run.layer, run.out
        done, invalid = 0, 0
        lead = self._probe_config(run, progress)
        while done < trials and invalid < 20 * max(trials, 1):
            if lead is not None:
                configs, lead = [lead], None
            else:
                configs = run.tuner.ask(min(opts.batch, trials - done))
            if not configs:
                break
            results, n_measured = self._measure(layer, run.space, configs, run.tuner_name)
            raise_if_interrupted_since(self._interrupts)  # one TVM swallowed while measuring
            run.tuner.tell(results)
            invalid += len(configs) - n_measured
            for res in results:
                if res.status == "invalid":
                    continue
                done += 1
                if not res.ok:
                    out["failed"][res.status] = out["failed"].get(res.status, 0) + 1
                if res.ok and (run.best is None or res.latency < run.best):
                    run.best = res.latency
                step = len(out["curve"]) + 1
                out["curve"].append([step, run.best])
                progress.curve.append(run.best)
                if run.best is not None:
                    self.tracker.log_trial(step, run.best, layer.flops, layer=layer.name)
            self.reporter.trial(layer.name, len(out["curve"]), run.best)
        out["trials"] = len(out["curve"])
        self._note_transfer_share(run)
        self._measured_by_class[layer.op_class] = self._measured_by_class.get(layer.op_class, 0) + done
        run.invalid += invalid
        # What the layer's cost model learned weighs the next layer's match at once: with
        # layers tuned by turns none is closed until the budget is spent.
        self.importance.learn(layer, run.tuner)
        if done < trials:
            progress.exhausted = True
            out["exhausted"] = True  # its tuner had no new config left: the caption says why trials went unused
        return done

    @staticmethod
    def _probe_config(run: "_LayerTuning", progress: LayerProgress):
        """What a probe measures: the closest source layer's winner, mapped (the guided
        GA's :meth:`~autotune.search.ga_tuner.GuidedGATuner.closest_winner`), or None
        for the tuner's own first proposal. Only a probe's one trial, so a layer is
        otherwise searched as the benchmarks search it."""
        if not progress.probed or progress.allotted != 1 or run.out["curve"]:
            return None
        closest = getattr(run.tuner, "closest_winner", None)
        return closest() if closest is not None else None

    def _note_transfer_share(self, run: "_LayerTuning") -> None:
        """What the guided GA took from transfer XGBoost: how many of its first
        population were transfer XGBoost's picks (``model_seeds``), and, said once, that
        it handed a shallow history's layer to transfer XGBoost
        (search.ga_tuner.GuidedGATuner.handover): the report keeps the tuner dispatch
        chose and adds which took over, and after how many configs."""
        picks = getattr(run.tuner, "model_picks", 0)
        if picks and "model_seeds" not in run.out:
            run.out["model_seeds"] = picks  # of its first population, from transfer XGBoost's first batch (run 52)
        at = getattr(run.tuner, "handed_over_at", None)
        if at is None or "handed_over" in run.out:
            return
        to = run.tuner.successor.name
        run.out["handed_over"] = {"to": to, "after_configs": at}
        self.reporter.message(
            f"{run.layer.name}: {run.tuner_name} handed the layer to {to} after {at} measured configs "
            f"(its first population, from history{f' and {picks} of {to} picks' if picks else ''}): history is shallow"
        )

    def _log_unclosed_layers(self, open_: dict[str, "_LayerTuning"]) -> None:
        """What is known of the layers a stopped tune left open, on their MLflow runs: a
        layer's run held its class alone (its params come with the report at the end),
        beside finished ones' six."""
        from autotune.tracking import layer_params

        for name, run in open_.items():
            try:
                self.tracker.log_params({**layer_params(run.out), "trials_budget": run.out.get("budget")}, layer=name)
            except Exception:  # a store gone with the tune must not hide why it stopped
                pass

    def _close_layer(self, run: "_LayerTuning") -> dict[str, Any]:
        """The layer gets no more trials: learn from its tuner, verify its winner, report."""
        layer, out = run.layer, run.out
        out["invalid"] = run.invalid
        if out["trials"] and sum(out["failed"].values()) == out["trials"]:
            from autotune.history.location import history_option

            # a run whose every candidate timed out read '-' in every column, and said no more
            why = ", ".join(f"{status} {n}" for status, n in sorted(out["failed"].items()))
            self.reporter.message(f"{layer.name}: every one of its {out['trials']} trials failed ({why}): "
                                  f"`autotune history show {layer.workload_key[:12]}{history_option(self.store.url)}` has their errors")
        # which source layers the guided tuner ended up believing (search.source_weights)
        out["source_weights"] = dict(getattr(run.tuner, "source_weights", {}))
        try:
            winner = self._verify_best(layer, run.space) if self.options.verify else self._applicable_best(layer, run.space)
        except KeyboardInterrupt:
            self.tracker.close_layer(layer.name, "KILLED")
            raise
        except BaseException:
            self.tracker.close_layer(layer.name, "FAILED")
            raise
        if winner is not None:
            out["best_latency"] = winner.latency_median
            out["best_record_id"] = winner.id
            out["best_config"] = winner.config if winner.space_id == run.space.space_id else None
            out["verified"] = winner.verified
        else:
            out["best_latency"] = None
        out["speedup"] = _ratio(out.get("default_latency"), out.get("best_latency"))
        from autotune.report import budget_ran_out

        if budget_ran_out(out):
            out["tuner"] = None  # none ran (dispatch still says which it would have been)
        self.tracker.log_params({"trials_budget": out["budget"], "tuner": out["tuner"]}, layer=layer.name)
        self.tracker.close_layer(layer.name, "FINISHED")
        self.reporter.end_layer(layer.name, out)
        return out

    def _exact_hit(self, layer) -> bool:
        from autotune.history.match import exact_hit

        space = self._space(layer)
        return exact_hit(self.store, layer.workload_key, self.target.key, space_id=space.space_id, min_trials=self._tuned_at(space)) is not None

    def _tuned_at(self, space) -> int:
        """Measured configs from which history's winner of a layer is reused as it is:
        ``min_trials``, the least a tuned layer gets (the whole space, if smaller)."""
        return max(1, min(self.options.min_trials, space.size))

    def _space(self, layer):
        from autotune.templates.meta_schedule_space import MetaScheduleSpace

        space = self.spaces.get(layer.workload_key)
        if space is None:
            space = self.spaces[layer.workload_key] = MetaScheduleSpace(layer.func, self.target.tvm_target, name=layer.name)
        return space

    def default_latency(self, layer) -> float | None:
        """TVM's default schedule for this layer, measured once and kept in history."""
        from autotune.compile import default_space_id
        from autotune.defaults import default_schedule

        space_id = default_space_id(self.target)
        # timed as this run times: a few-microsecond default reads lower queued than launched
        known = self.store.records(workload_key=layer.workload_key, target_key=self.target.key, space_id=space_id, status="ok",
                                   timing=self.options.measure.timing)
        if known:
            return known[-1].latency_median
        try:
            mod = default_schedule(layer.func, self.target)
        except Exception as err:
            self.reporter.message(f"{layer.name}: no default schedule ({str(err).splitlines()[-1][:120]})")
            return None
        (res,) = self.measurer().measure([mod])
        self.store.add_record(
            workload_key=layer.workload_key, target_key=self.target.key, space_id=space_id, config={},
            samples=res.samples, status=res.status, error=res.error, run_id=self.run_id, tuner="default", verified=True if res.status == "ok" else None,
            twin=res.twin, timing=self.options.measure.timing,
        )
        return res.latency

    def _time_other_batch_winners(self, layers) -> dict[str, dict[str, Any]]:
        """Time, once each, the winner at another batch size that ``compile`` applies to
        a layer the budget did not reach and history holds only TVM's default for at
        this batch (as for TVM's default, outside the budget). The table had shown such
        a layer at its default's latency while the timed model and the export ran the
        other batch's winner; timed here, the faster of the two is what the table shows
        and ``compile`` applies. Returns, per layer timed, where its config came from."""
        from autotune.compile import DEFAULT_SPACE_PREFIX, RECORDS_TRIED, winner_at_other_batch

        todo = []
        for layer in layers:
            # as compile decides it: the layer's usable records here, TVM's default alone
            own = self.store.fastest(layer.workload_key, self.target.key, limit=RECORDS_TRIED)
            if any(not r.space_id.startswith(DEFAULT_SPACE_PREFIX) for r in own):
                continue
            found = winner_at_other_batch(self.store, layer, self.target.key, lambda layer=layer: self._space(layer))
            if found is not None and found.config is not None:
                todo.append((layer, found))
        if todo:
            self.reporter.stage(f"timing the winner at another batch size of {len(todo)} layer{'s' if len(todo) != 1 else ''} "
                                "the budget did not reach")
        timed = {}
        for layer, found in todo:
            results, _ = self._measure(layer, self._space(layer), [found.config], OTHER_BATCH_TUNER)
            timed[layer.name] = {"record_id": found.record.id, "batch_ratio": found.batch_ratio,
                                 "latency": results[0].latency if results and results[0].ok else None}
        return timed

    def _measure(self, layer, space, configs, tuner_name: str):
        """Apply, build and time a batch; every outcome is written to history at once."""
        from autotune.search.tuner import TrialResult
        from autotune.templates import InvalidConfig
        from autotune.templates.apply_many import apply_many

        mods, slots, results = [], [], [None] * len(configs)
        for i, (cfg, applied) in enumerate(zip(configs, apply_many([(space, cfg) for cfg in configs]))):
            if isinstance(applied, InvalidConfig):
                self.store.add_record(
                    workload_key=layer.workload_key, target_key=self.target.key, space_id=space.space_id, config=cfg,
                    samples=[], status="invalid", error=str(applied), run_id=self.run_id, tuner=tuner_name,
                )
                results[i] = TrialResult(cfg, None, "invalid")
            else:
                mods.append(applied)
                slots.append(i)
        measured: list[Measurement] = self.measurer().measure(mods) if mods else []
        for i, res in zip(slots, measured):
            self.store.add_record(
                workload_key=layer.workload_key, target_key=self.target.key, space_id=space.space_id, config=configs[i],
                samples=res.samples, status=res.status, error=res.error, run_id=self.run_id, tuner=tuner_name,
                twin=res.twin, timing=self.options.measure.timing,
            )
            results[i] = TrialResult(configs[i], res.latency, res.status)
        return [r for r in results if r is not None], len(slots)

    def _verify_best(self, layer, space):
        """Check the fastest unverified candidates against the reference until one holds.

        With ``--rpc`` they run on the server (one session for the layer's checks), where
        they were timed; no session there raises :class:`AutotuneError`, and the record
        stays unchecked rather than being marked wrong.
        """
        from autotune import verify

        with self._remote() as remote:
            for _ in range(VERIFY_CANDIDATES):
                rec = self._applicable_best(layer, space)
                if rec is None or rec.verified is True or rec.space_id != space.space_id:  # TVM's default: the reference
                    return rec
                problem = verify.check(space.apply(rec.config), layer.func, self.target, remote=remote)
                self.store.set_verified(rec.id, problem is None, problem)
                if problem is None:
                    return self._applicable_best(layer, space)
                self.reporter.message(f"{layer.name}: record {rec.id} rejected: {problem}")
        return self._applicable_best(layer, space)

    def _applicable_best(self, layer, space):
        """The layer's fastest record that ``compile`` would apply: TVM's default, or a
        config of this space. A faster one it would skip (an imported config this space
        does not hold, or one of an older space version) was the layer's reported best:
        an imported 1-ns record of strings read as a 5.9-million-fold speed-up."""
        from autotune.compile import DEFAULT_SPACE_PREFIX, RECORDS_TRIED, why_not_applicable

        for rec in self.store.fastest(layer.workload_key, self.target.key, limit=RECORDS_TRIED):
            if rec.space_id.startswith(DEFAULT_SPACE_PREFIX) or why_not_applicable(space, rec) is None:
                return rec
        return None


@dataclass
class _LayerTuning:
    """One layer between its first trials and its verification: the tuner stays alive
    across the chunks a schedule hands it."""

    layer: Any
    space: Any
    tuner_name: str
    tuner: Any
    out: dict[str, Any]
    best: float | None
    invalid: int = 0
    #: configs of other layers of its class this run had measured when it was last matched
    others_at_match: int = 0


def shallow_note(told: int, layer_name: str, depth: dict[str, Any], tuner: str, *, handover: int = 0) -> str | None:
    """What a tune says of the shallow history of its layer after ``told`` such layers:
    the advice once, what history holds for a few more, then one line and no more (a
    24-trial tune printed 16 of them; each layer's ``history_records`` keeps it)."""
    if told < SHALLOW_NOTES:
        return shallow_history_message(layer_name, depth, tuner, brief=told > 0, handover=handover)
    if told == SHALLOW_NOTES:
        return "more layers' history is shallow too: not said again (their history_records in report.json say what it holds)"
    return None


def shallow_history_message(layer_name: str, depth: dict[str, Any], tuner: str, *, brief: bool = False,
                            handover: int = 0) -> str:
    """What a guided tuner's user is told when the history it draws on is shallow; with
    ``brief``, what history holds and no more (the advice was given for an earlier layer).
    ``handover``: the trials after which the guided GA gives the layer to transfer
    XGBoost (0: never); said with its count, as a probe's one trial never gets there."""
    if depth["sources"] == 1:
        held = (f"1 similar layer, at {format_match(depth['nearest_similarity'])}, with {depth['nearest_configs']} measured "
                f"config{'' if depth['nearest_configs'] == 1 else 's'}")
        whose = "its"
    else:
        held = (f"{depth['sources']} similar layers with a median of {depth['per_source_median']:g} measured "
                f"config{'' if depth['per_source_median'] == 1 else 's'} each "
                f"(the most similar, at {format_match(depth['nearest_similarity'])}, holds {depth['nearest_configs']})")
        whose = "their"
    if brief:
        return f"{layer_name}: history is shallow too, {held}"
    return (f"{layer_name}: history is shallow, {held}; {tuner} may settle near {whose} unconverged winners (tuning the "
            "most similar layer longer is what deepens it where it counts)"
            # "if": read as a plan, it promised a hand-over to layers given 1 or 3 trials
            + (f"; given more than {handover} trials (its first population), gga hands the layer to tl_xgb"
               if handover else ""))


def _ratio(default: float | None, best: float | None) -> float | None:
    return default / best if default and best else None
