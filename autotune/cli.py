"""The ``autotune`` command line. Parsing only: every command calls into the Python API.

Imports of TVM, MLflow and friends happen inside the command functions, so ``--help``
and the history commands start in well under a second.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any, Sequence

from autotune.budget import BUDGET_SPLITS, DEFAULT_MIN_TRIALS
from autotune.frontend import BATCH_NORM_LAYERINGS, DEFAULT_BATCH_NORM
from autotune.half_precision import YARDSTICK_ULPS, ZOO_DTYPES
from autotune.table_layout import Column, plain_table

EXIT_USAGE = 2


# --- shared options ----------------------------------------------------------------------
def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="bundled model name (see 'autotune zoo list') or path/to/model.onnx")
    p.add_argument("--input-shape", action="append", metavar="NAME=DxD..", help="fix an input's shape, e.g. input=1x3x224x224 (repeatable)")
    p.add_argument("--size", type=int, help="zoo models' input size: image side (CNNs), sequence length (transformer, seq2seq), frames (speech) or memories (memnet); default the model's own (see 'autotune zoo list')")
    p.add_argument("--batch-size", type=int, help="zoo models: batch size (default 1)")
    p.add_argument(
        "--batch-norm", choices=BATCH_NORM_LAYERINGS, default=DEFAULT_BATCH_NORM,
        help=f"where inference batch norm runs: weights (folded into the conv's weights), epilogue (in the conv's "
        f"epilogue) or separate (a kernel of its own); default {DEFAULT_BATCH_NORM}. Tune and compile must agree, since "
        "it decides the layers",
    )


def _history_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--history", metavar="PATH|URL", help="history database: SQLite file or SQLAlchemy URL (default $AUTOTUNE_HISTORY or ~/.autotune/history.db)")


def _target_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="auto", help="auto (cuda if a GPU is present, else llvm; the default), llvm, cuda, cuda:sm_XX, or a JSON target dict")


def _json_arg(p: argparse.ArgumentParser, what: str = "print machine-readable JSON") -> None:
    p.add_argument("--json", action="store_true", help=what)


class _Parser(argparse.ArgumentParser):
    """argparse's own mistakes (a bad int, a missing argument, an unknown choice) in one
    line, as every other input error is: not the command's whole usage first."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The innermost (sub)command's parser ends up in the namespace: an unknown flag is
        # then reported against `autotune tune --help`, not the top level's.
        self.set_defaults(cli_parser=self)

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="autotune",
        description="History-guided autotuning of ONNX models with TVM (CUDA or LLVM).",
    )
    parser.add_argument("--version", action="version", version=f"autotune {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("tune", help="tune every layer of a model; results go to history")
    _model_args(p)
    _target_arg(p)
    _history_arg(p)
    p.add_argument("--trials", type=int, default=64, help="measured trials for the whole model (default 64)")
    p.add_argument("--tuner", default="auto", help="auto (by history match; the default), random, xgb, tl_xgb, ga, gga; a tuner named "
                   "tunes every layer history has no winner for (exact hits are still reused), with no one-trial probes")
    p.add_argument("--batch", type=int, default=8, help="configs built and measured per round (default 8)")
    p.add_argument("--min-trials", type=int, default=DEFAULT_MIN_TRIALS,
                   help=f"trials at least for every tuned layer (default {DEFAULT_MIN_TRIALS})")
    p.add_argument(
        "--budget-split", choices=BUDGET_SPLITS, default="adaptive",
        help="how trials are spread over layers: adaptive (chunk by chunk, to the layer expected to save the most "
        "model time, from what was measured; default) or roofline (fixed up front by roofline time)",
    )
    p.add_argument(
        "--no-probes", dest="probes", action="store_false",
        help="with the adaptive split, give a layer history covers closely a full first chunk even when the "
        "budget cannot reach every layer (default: one trial first, the rest when trials remain; only with --tuner auto)",
    )
    p.add_argument("--max-layers", type=int, metavar="N", help="tune only the N layers with the largest estimated time (of those history has no winner for; "
                   "default: every layer)")
    # no argparse defaults: given alone, they meet --tuner (the API's defaults stand otherwise)
    p.add_argument("--high", type=float, help="match score from which the guided GA is used (default 0.8; with --tuner auto)")
    p.add_argument("--low", type=float, help="match score above which transfer XGBoost is used (default 0.05; with --tuner auto)")
    p.add_argument("--seed", type=int, default=0, help="seed of the tuners' own draws (default 0); which configs a tuner "
                   "that learns from measurements proposes also follows the timings, which vary from run to run, and so "
                   "does which layer the adaptive budget split gives trials next (--budget-split roofline does not)")
    p.add_argument("--repeat", type=int, default=5, help="timed repeats per candidate; the median is kept (default 5)")
    p.add_argument("--min-repeat-ms", type=int, default=20, metavar="MS",
                   help="each repeat calls the kernel until it has run this long (default 20)")
    p.add_argument("--rpc", metavar="HOST:PORT:KEY", help="measure on devices registered with an RPC tracker (IPv6: [::1]:9190:KEY)")
    # checked by MeasureOptions, which names the choices: no argparse copy of them
    p.add_argument("--timing", default="launches", metavar="HOW",
                   help="how a CUDA candidate is timed: launches, back to back by TVM's evaluator (default; the host's "
                   "launch rate paces kernels of a few microseconds), or queued behind a spin kernel, GPU time alone "
                   "(CUDA only; each record says which)")
    p.add_argument("--run-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="a candidate that takes longer (with --rpc: its whole session) counts as a timeout (default 30)")
    p.add_argument("--no-verify", action="store_true", help="skip the numerical check of each layer's winner")
    p.add_argument("--no-model-latency", action="store_true", help="skip timing the whole model before and after")
    p.add_argument("--out-dir", help="where the report, CSV and plot go (default ~/.autotune/runs/RUN_ID)")
    p.add_argument("--out", "-o", help="also compile the tuned model and export it here (e.g. model.so)")
    p.add_argument("--mlflow-uri", help="MLflow tracking URI (default $MLFLOW_TRACKING_URI or a local store in ~/.autotune)")
    p.add_argument("--mlflow-experiment", metavar="NAME", help="MLflow experiment (default $MLFLOW_EXPERIMENT_NAME or autotune)")
    p.add_argument("--no-mlflow", action="store_true", help="do not record the run in MLflow")
    p.add_argument("--quiet", action="store_true", help="no progress (bars, or with --json the event lines before the report)")
    _json_arg(p)
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("layers", help="show the layers (fused kernels) of a model")
    _model_args(p)
    _json_arg(p)
    p.set_defaults(func=cmd_layers)

    p = sub.add_parser("compile", help="apply the best history schedules and export a module")
    _model_args(p)
    _target_arg(p)
    _history_arg(p)
    p.add_argument("--out", "-o", required=True, help="output shared library, e.g. model.so")
    _json_arg(p)
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("run", help="load an exported module, run it on seeded inputs, time it")
    p.add_argument("module", help="a .so written by 'autotune compile'")
    p.add_argument("--repeat", type=int, default=10, help="timed runs of the module; the median is reported (default 10)")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated inputs (default 0)")
    p.add_argument("--inputs", metavar="FILE.npz", help="run on these inputs (arrays named as the model's inputs) instead of seeded ones")
    p.add_argument("--save-outputs", metavar="FILE.npz", help="write the outputs there, named as the model names them")
    p.add_argument("--check", metavar="MODEL", help="compare outputs with the ONNX reference evaluator on this model (zoo name or .onnx)")
    p.add_argument("--rtol", type=float, help="relative tolerance of --check (default 1e-3, widened for half-precision outputs "
                   "to two units in their last place, then judged against the model in float32; given, applied as it is)")
    p.add_argument("--atol", type=float, help="absolute tolerance of --check (default 1e-4)")
    _json_arg(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("info", help="versions, targets, GPU/nvcc/NVRTC, where history and MLflow runs live")
    _history_arg(p)
    p.add_argument("--mlflow-uri", help="the MLflow tracking URI to describe (default $MLFLOW_TRACKING_URI or the local store in ~/.autotune)")
    p.add_argument("--measure-roofline", action="store_true",
                   help="measure this CPU's peaks again (the first tune measures them once; run it on an idle machine)")
    _json_arg(p)
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("zoo", help="bundled models")
    zsub = p.add_subparsers(dest="zoo_command", metavar="ACTION")
    p.set_defaults(help_of=p)  # with no ACTION: this command's help, not the top level's
    z = zsub.add_parser("list", help="list bundled models")
    _json_arg(z)
    z.set_defaults(func=cmd_zoo_list)
    z = zsub.add_parser("export", help="write a bundled model as ONNX")
    z.add_argument("name", help="a bundled model (see 'autotune zoo list')")
    z.add_argument("-o", "--out", required=True,
                   help="the ONNX file to write (missing directories are made), or - for standard output")
    z.add_argument("--size", type=int, help="input size: image side (CNNs), sequence length (transformer, seq2seq), frames (speech) or memories (memnet); default the model's own (see 'autotune zoo list')")
    z.add_argument("--batch-size", type=int, default=1, help="batch size (default 1)")
    z.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    z.add_argument("--dtype", choices=ZOO_DTYPES, default="float32",
                   help="float32 (the default), or float16 or bfloat16: weights rounded and every float tensor of that type, as a "
                   "half-precision deployment runs it")
    _json_arg(z)
    z.set_defaults(func=cmd_zoo_export)

    p = sub.add_parser("history", help="inspect, export and import the tuning history")
    hsub = p.add_subparsers(dest="history_command", metavar="ACTION")
    p.set_defaults(help_of=p)  # with no ACTION: this command's help, not the top level's
    h = hsub.add_parser("ls", aliases=["list"], help="one line per layer and target: records, best latency")
    h.add_argument("--target", help="only this target's layers (a key as `history ls` shows it)")
    h.add_argument("--class", dest="op_class", metavar="CLASS",
                   help="only layers of this op class (conv2d, dense, ...: the class column)")
    h.add_argument("--model", help="only layers a tune of this model met (the models column)")
    _history_arg(h)
    _json_arg(h)
    h.set_defaults(func=cmd_history_ls)
    h = hsub.add_parser("runs", help="one line per tuning run: model, target, layering, status, records")
    _history_arg(h)
    _json_arg(h)
    h.set_defaults(func=cmd_history_runs)
    h = hsub.add_parser("show", help="the records of one workload (key, unique prefix or layer name)")
    h.add_argument("key", metavar="KEY", help="a workload key as `history ls` shows it, a unique prefix, or the layer name beside it")
    h.add_argument("--limit", type=int, default=50, help="the N most recent records (default 50; `history best KEY` gives the best)")
    h.add_argument("--target", help="only this target's records (a key as `history ls` shows it)")
    # history's statuses, written out: importing history here loads SQLAlchemy for every command
    h.add_argument("--status", choices=("ok", "build_error", "run_error", "timeout", "invalid", "wrong_result"),
                   help="only records of this status")
    _history_arg(h)
    _json_arg(h)
    h.set_defaults(func=cmd_history_show)
    h = hsub.add_parser("best", help="the best record of one workload")
    h.add_argument("key", metavar="KEY", help="a workload key as `history ls` shows it, a unique prefix, or the layer name beside it")
    _history_arg(h)
    _json_arg(h)
    h.set_defaults(func=cmd_history_best)
    h = hsub.add_parser("export", help="write history as JSON")
    # `-o` as `compile -o` and `zoo export -o` take it, or the file alone
    out = h.add_mutually_exclusive_group(required=True)
    out.add_argument("file", nargs="?", help="output JSON file, or - for stdout")
    out.add_argument("--out", "-o", help="the same, as an option")
    _history_arg(h)
    _json_arg(h, "say what was written as one JSON line: {\"records\": N, \"out\": PATH}")
    h.set_defaults(func=cmd_history_export)
    h = hsub.add_parser(
        "rm", aliases=["remove"], help="remove tuning runs and every record they wrote",
        description="Remove tuning runs and every record they wrote, in one transaction: history reuses an exact "
        "match's winner without measuring it again, so a run timed on a busy machine would otherwise keep deciding "
        "kernels. Other runs' records, the run's report directory and its MLflow run are kept.",
    )
    h.add_argument("run_ids", nargs="+", metavar="RUN", help="a run id as `history runs` shows it, or a unique prefix")
    h.add_argument("--dry-run", "-n", action="store_true", help="say what would be removed; remove nothing")
    h.add_argument("--force", action="store_true",
                   help="remove a run still marked running whose process this machine cannot check (another host's, "
                   "gone for good); a run of a live process here is refused all the same")
    _history_arg(h)
    _json_arg(h)
    h.set_defaults(func=cmd_history_rm)
    h = hsub.add_parser("import", help="merge a JSON export into history (JSON only, validated)")
    h.add_argument("file", help="a JSON export, or - for standard input")
    _history_arg(h)
    _json_arg(h)
    h.set_defaults(func=cmd_history_import)

    p = sub.add_parser("report", help="print a tuning run's summary again and write its plots")
    p.add_argument("run", metavar="RUN", help="the run id tune printed (or any prefix of it no other run shares), a run "
                   "directory holding report.json, or an MLflow run id (its first 4 or more digits do)")
    p.add_argument("--mlflow-uri", help="the MLflow tracking URI the run is in (default $MLFLOW_TRACKING_URI or the local store in ~/.autotune)")
    p.add_argument("--out-dir", help="where to write the plot and CSV (default: none where the run's folder holds them, "
                   "else a folder named after the run)")
    p.add_argument("--history", metavar="PATH|URL", help="the history the run tuned into, asked why a run has no report "
                   "(default $AUTOTUNE_HISTORY or ~/.autotune/history.db)")
    _json_arg(p)
    p.set_defaults(func=cmd_report)
    return parser


# --- commands -------------------------------------------------------------------------------
def _lasting_history(location: str | None, command: str) -> None:
    """Refuse a history that ends with the command (an in-memory SQLite URL): a whole
    tune ran and exited 0 with every measurement thrown away."""
    from autotune.errors import AutotuneError
    from autotune.history.location import in_memory, resolve_location

    if in_memory(resolve_location(location)):
        raise AutotuneError(f"--history {location}: an in-memory database ends with the command, and all that "
                            f"{command} writes with it; give a file or a database server")


def cmd_tune(args) -> int:
    from autotune import api
    from autotune import report as reporting
    from autotune.frontend import parse_input_shapes

    _lasting_history(args.history, "tune")
    # --quiet wins over --json: the report alone, without a progress event per line before it
    mode = "quiet" if args.quiet else ("json" if args.json else "rich")
    report = api.tune(
        args.model, target=args.target, history=args.history, out=args.out, out_dir=args.out_dir,
        mlflow=not args.no_mlflow, mlflow_uri=args.mlflow_uri, mlflow_experiment=args.mlflow_experiment, input_shapes=parse_input_shapes(args.input_shape),
        size=args.size, batch_size=args.batch_size, progress=mode,
        trials=args.trials, tuner=args.tuner, batch=args.batch, seed=args.seed, min_trials=args.min_trials,
        max_layers=args.max_layers, verify=not args.no_verify, model_latency=not args.no_model_latency,
        **{name: getattr(args, name) for name in ("high", "low") if getattr(args, name) is not None},
        batch_norm=args.batch_norm, budget_split=args.budget_split, probes=args.probes,
        repeat=args.repeat, min_repeat_ms=args.min_repeat_ms, rpc=args.rpc, timing=args.timing, run_timeout=args.run_timeout,
    )
    if args.json:
        # the table's figures (share of the measured time, GFLOP/s, roofline) beside the
        # layers, as `report --json` gives them: the run's own JSON left them out
        print(json.dumps(reporting.strict_json({"event": "report", **report, "rows": reporting.summary_rows(report)}),
                         allow_nan=False))
    else:
        print(reporting.format_table(report, **_table_width()))
        if report.get("history_note"):
            print(f"note: {report['history_note']}")
        print(f"report: {report['report_dir']}" + (f"   mlflow run: {report['mlflow_run_id']}" if report.get("mlflow_run_id") else ""))
        export = report.get("export")
        if isinstance(export, dict) and export.get("out"):  # --out wrote it, and nothing said so
            print(f"module: {export['out']} ({export.get('tuned_layers')} of {export.get('layers')} layers from history, "
                  "the rest TVM defaults)")
    return 0


def cmd_layers(args) -> int:
    from autotune import api, decompose
    from autotune.frontend import parse_input_shapes

    found = api.layers(
        args.model, input_shapes=parse_input_shapes(args.input_shape), size=args.size, batch_size=args.batch_size,
        batch_norm=args.batch_norm,
    )
    layers = found["layers"]
    if args.json:
        print(json.dumps({**found, "layers": [l.to_dict() for l in layers]}))
    else:
        print(decompose.format_table(layers, **_table_width()))
        tunable = sum(1 for l in layers if l.tunable)
        flops = sum(l.flops * l.occurrences for l in layers)
        # a small model is no 0.00 GFLOP, nor a tiny one 0.00 MFLOP
        amount = (f"{flops / 1e9:.2f} GFLOP" if flops >= 1e8 else f"{flops / 1e6:.2f} MFLOP" if flops >= 1e4
                  else f"{flops:,.0f} FLOP")
        batch = found["batch"]
        where = f"dimension {batch['axis']} of input {batch['input']!r}" if batch["input"] else "no input"
        print(f"{found['model']}: {len(layers)} layers ({tunable} tunable), {amount}; batch {batch['size']} ({where})")
    return 0


def cmd_compile(args) -> int:
    from autotune import api
    from autotune.compile import THIN_HISTORY
    from autotune.frontend import parse_input_shapes

    shapes = parse_input_shapes(args.input_shape)
    with _status_line(quiet=args.json) as say:
        summary = api.compile(
            args.model, args.out, target=args.target, history=args.history, input_shapes=shapes, size=args.size,
            batch_size=args.batch_size, batch_norm=args.batch_norm, step=say,
        )
    if args.json:
        print(json.dumps(summary))
    else:
        whose = f" (records of {summary['history_target']})" if summary.get("history_target", summary["target"]) != summary["target"] else ""
        borrowed = f", {summary['other_batch_layers']} more from their winners at another batch size" if summary.get("other_batch_layers") else ""
        print(f"wrote {summary['out']} ({summary['target']}): {summary['tuned_layers']} of {summary['layers']} layers from history{whose}"
              f"{borrowed}, the rest TVM defaults")
        for note in ("target_note", "history_note", "tuning_note"):
            if summary.get(note):
                print(f"note: {summary[note]}")
        if summary.get("thin_layers"):
            print(f"note: {summary['thin_layers']} of the layers given a winner from history (their own or another batch "
                  f"size's) had fewer than {THIN_HISTORY} configs measured: "
                  "thin evidence (`autotune tune` the model to deepen it)")
        kernels = summary.get("device_code")
        if kernels and kernels.get("note"):
            print(f"note: {kernels['note']}")
        elif kernels:
            print(f"CUDA kernels carried as {', '.join(kernels.get('entries') or []) or kernels.get('format')}")
    return 0


@contextlib.contextmanager
def _status_line(*, quiet: bool):
    """A spinner with the current step on stderr, where that is a terminal (rich prints
    nothing elsewhere); yields the function that updates it."""
    if quiet:
        yield lambda text: None
        return
    from rich.console import Console

    with Console(stderr=True).status("starting") as status:
        yield lambda text: status.update(f"{text} ...")


def cmd_run(args) -> int:
    from autotune import api

    from autotune.errors import AutotuneError

    try:
        result = api.run(
            args.module, inputs=args.inputs, seed=args.seed, repeat=args.repeat, check=args.check, rtol=args.rtol,
            atol=args.atol, save_outputs=args.save_outputs,
        )
    # a check that could not run, or a Ctrl-C during it: its outputs were written, and said so
    except (AutotuneError, KeyboardInterrupt) as err:
        if getattr(err, "saved_outputs", None) and not args.json:
            print(f"outputs written to {err.saved_outputs}")
        raise
    if args.json:
        from autotune.report import strict_json

        print(json.dumps(strict_json(result), allow_nan=False))  # an infinite error (NaN against a number) as null
    else:
        from autotune.progress import format_latency

        print(f"{result['model']} on {result['target']} (inputs from {result['inputs_from']}): median "
              f"{format_latency(result['latency_median_s'])} (mean {format_latency(result['latency_mean_s'])}, std "
              f"{format_latency(result['latency_std_s'])}, {result['repeat']}x{result['number']} runs)")
        # a cast of kind (int or bool data into a float input) said; float64 into float32 is every numpy user's
        kind = {k: v for k, v in result.get("inputs_cast", {}).items() if v.split(" -> ")[0][:1] in ("i", "u", "b")}
        if kind:
            print("  note: cast to the module's dtypes: " + ", ".join(f"{k} {v}" for k, v in kind.items()))
        if "check" in result:
            c = result["check"]
            tol = c["tolerance"]
            verdict = ("OK" if c.get("conclusive", True) else "OK, inconclusive") if c["ok"] else "MISMATCH"
            print(f"check vs ONNX reference: {verdict} (max abs error {c['max_abs_error']:.3g}; "
                  f"rtol {tol['rtol']:g}, atol {tol['atol']:g}{', widened for half precision' if tol['widened_for_half_precision'] else ''})")
            for o in c.get("within_atol_of_zero", []):
                print(f"  note: the reference's {o['name']} lies within atol of zero (largest {o['reference_max_abs']:.3g}), "
                      f"so any output passes there; give --atol below that to check it")
            # a half-precision output the float32 judge passed is not off
            off = [o for o in c.get("outputs", []) if not o["matched"] and not o.get("float32", {}).get("ok")]
            if not c["ok"] and off and (len(c.get("outputs", [])) > 1 or any("shape" in o for o in off)):
                from autotune.decompose import shape_text

                print("  outputs off: " + ", ".join(
                    f"{o['name']} (shape {shape_text(o['shape'])}, the reference's {shape_text(o['reference_shape'])})"
                    if "shape" in o else f"{o['name']} ({o['max_abs_error']:.3g})" for o in off))
            if "float32" in c:
                f = c["float32"]
                # an evaluator whose own run overflowed is no yardstick: held to units in the last place
                allowed = (f"allowed {f['allowed']:.3g}: its own is past {YARDSTICK_ULPS} units in the last place of the "
                           "output's largest value, and held there" if f.get("reference_capped")
                           else f"allowed: {f['allowed_factor']:g}x that")
                print(f"  half precision, against the model in float32: ours {f['max_abs_error']:.3g} off, the reference "
                      f"evaluator's own {f['reference_max_abs_error']:.3g} off ({allowed})")
        if "saved_outputs" in result:
            print(f"outputs written to {result['saved_outputs']}")
    check = result.get("check", {})
    if not check.get("ok", True):  # a CI log that keeps standard error alone said nothing of why
        print(f"autotune: check failed: outputs differ from the ONNX reference (max abs error {check.get('max_abs_error')})",
              file=sys.stderr)
        return 1
    return 0


def cmd_info(args) -> int:
    from autotune import api
    from autotune.info import format_text

    info = api.info(history=args.history, mlflow_uri=args.mlflow_uri, measure_roofline=args.measure_roofline)
    print(json.dumps(info) if args.json else format_text(info))
    return 0


def cmd_zoo_list(args) -> int:
    from autotune import zoo
    from autotune.decompose import shape_text

    entries = zoo.list_models()
    if args.json:
        print(json.dumps([{"name": e.name, "description": e.description, "default_size": e.default_size,
                           "input": list(e.input_shape(1, e.default_size)), "input_dtype": e.input_dtype} for e in entries]))
    else:
        for e in entries:
            shape = shape_text(list(e.input_shape(1, e.default_size))) + ("" if e.input_dtype == "float32" else f" {e.input_dtype}")
            print(f"{e.name:<12} {shape:<16} {e.description}")
    return 0


def cmd_zoo_export(args) -> int:
    from autotune import zoo

    if args.out == "-":  # a file named "-" (47 MB for ResNet-18), where `history export -` means standard output
        return _zoo_export_to_stdout(args)
    path = zoo.export_model(args.name, args.out, batch_size=args.batch_size, size=args.size, seed=args.seed, dtype=args.dtype)
    if args.json:
        import onnx

        graph = onnx.load(str(path), load_external_data=False).graph
        inputs = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in graph.input}
        # ``dtype`` is the precision asked for; token-id inputs (seq2seq, memnet) stay int64
        input_dtypes = {i.name: str(onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)) for i in graph.input}
        print(json.dumps({"model": args.name, "out": str(path), "inputs": inputs, "input_dtypes": input_dtypes,
                          "seed": args.seed, "dtype": args.dtype}))
    else:
        print(f"wrote {path}")
    return 0


def _zoo_export_to_stdout(args) -> int:
    """``zoo export NAME -o -``: the model's bytes on standard output, for a pipe."""
    from autotune import zoo
    from autotune.errors import AutotuneError

    if args.json:
        raise AutotuneError("--json with -o - : standard output carries the model itself")
    if sys.stdout.isatty():
        raise AutotuneError("not writing an ONNX model to a terminal: give -o FILE, or pipe standard output")
    model = zoo.build_model(args.name, batch_size=args.batch_size, size=args.size, seed=args.seed, dtype=args.dtype)
    sys.stdout.flush()
    sys.stdout.buffer.write(model.SerializeToString())
    sys.stdout.buffer.flush()
    return 0


def cmd_history_ls(args) -> int:
    from autotune.progress import format_latency
    from autotune.history import open_history
    from autotune.history.location import no_history_yet

    rows, workloads, models = [], {}, {}
    if not no_history_yet(args.history):  # before the first tune: an empty listing, not an error
        with open_history(args.history, create=False, readonly=True) as store:
            _check_target(store, args.target)
            rows = store.summary(args.target)
            workloads = {w.key: w for w in store.workloads()}
            for model, _, key in _run_layers(store):
                models.setdefault(key, set()).add(model)
    held = sorted({r["op_class"] for r in rows})
    for r in rows:  # the layer name the text shows, in the JSON too
        w = workloads.get(r["workload_key"])
        r["layer"] = w.descriptor.get("name", "") if w else ""
        # which models' tunes met it: the layer name is the first model's alone
        r["models"] = sorted(models.get(r["workload_key"], ()))
    rows = [r for r in rows if (args.op_class is None or r["op_class"] == args.op_class)
            and (args.model is None or args.model in r["models"])]
    if args.json:
        print(json.dumps(rows))
        return 0
    if not rows:
        # a filter that matches nothing is not an empty history, and a class or model
        # mistyped (Conv2d) is seen beside those there are
        tuned = sorted({m for names in models.values() for m in names})
        print(f"no layers in history match (its classes: {', '.join(held)}; the models tuned: {', '.join(tuned) or 'none'})"
              if held else "history is empty")
        return 0
    # the target key whole (an H100's was cut to 'cuda:sm_90:NVIDIA-H100-80GB-'); a layer's
    # name cut in its middle past 40, where names that share a start differ
    cells = [[r["workload_key"], r["op_class"], _fit(r["layer"], 40), r["target_key"], str(r["n_records"]), str(r["n_ok"]),
              format_latency(r["best_latency"]), ",".join(r["models"]) or "-"] for r in rows]
    print("\n".join(plain_table(_LS_COLUMNS, cells, _terminal_width())))
    return 0


#: `history ls`' columns, those left out first on a narrow terminal last.
_LS_COLUMNS = (
    Column("workload"), Column("class", keep=3), Column("layer"), Column("target", keep=5),
    Column("records", justify="right", keep=4), Column("ok", justify="right", keep=6),
    Column("best", justify="right"), Column("models", keep=2),
)


def _check_target(store, target: str | None) -> None:
    """A --target history does not hold is a typo, not "no records"."""
    known = [t.key for t in store.targets()]
    if target is not None and target not in known:
        from autotune.errors import AutotuneError

        raise AutotuneError(f"history holds no target {target!r}; it holds {', '.join(known) or 'none'}")


def _run_layers(store) -> list[tuple[str, str, str]]:
    """(model, layer name, workload key) of every layer a run of this history named. A
    summary holds anything a run or an import put there (a count of layers, say): only a
    list of layer entries is read."""
    found = []
    for run in store.runs():
        summary = run.get("summary")
        layers = summary.get("layers") if isinstance(summary, dict) else None
        for layer in layers if isinstance(layers, list) else []:
            if isinstance(layer, dict) and isinstance(layer.get("name"), str) and isinstance(layer.get("workload_key"), str):
                found.append((str(run.get("model")), layer["name"], layer["workload_key"]))
    return found


def cmd_history_runs(args) -> int:
    from autotune.layering_hint import run_layering
    from autotune.run_status import stale_run
    from autotune.history import open_history
    from autotune.history.location import no_history_yet

    runs = []
    if not no_history_yet(args.history):  # before the first tune: no runs, not an error
        with open_history(args.history, create=False, readonly=True) as store:
            runs = store.runs()
    for run in runs:
        run["batch_norm"] = run_layering(run)  # runs from before the flag: separate
        if stale_run(run):  # as the next tune or `history rm` will record it
            run["status"] = "killed"
    if args.json:
        print(json.dumps([{k: v for k, v in run.items() if k != "summary"} for run in runs]))
        return 0
    if not runs:
        print("history holds no runs")
        return 0
    # columns as wide as their longest entry, up to a cap: cut at 16, squeezenet1_1_ts_dyn
    # read as the other model squeezenet1_1_ts; the inputs tell one model at two batches apart
    cells = [[run["run_id"][:12], str(run["started_at"] or "")[:19].replace("T", " "), _fit(str(run["model"]), 40),
              _fit(_run_inputs(run), 30), _fit(str(run["target_key"]), 40), _fit(str(run["tuner"]), 10),
              str(run["batch_norm"]), str(run["status"]), str(run["n_records"])] for run in runs]
    print("\n".join(plain_table(_RUNS_COLUMNS, cells, _terminal_width())))
    return 0


#: `history runs`' columns, those left out first on a narrow terminal last.
_RUNS_COLUMNS = (
    Column("run"), Column("started (UTC)", keep=2), Column("model"), Column("inputs", keep=4), Column("target", keep=5),
    Column("tuner", keep=3), Column("batch norm", keep=6), Column("status"), Column("records", justify="right", keep=1),
)


def _run_inputs(run: dict) -> str:
    """A run's input shapes as tuned (``1x4x36x36``; several inputs joined by ``,``), "-"
    for a run recorded before its params carried them."""
    inputs = (run.get("params") or {}).get("inputs")
    if not isinstance(inputs, dict) or not inputs:
        return "-"
    shapes = []
    for info in inputs.values():
        shape = info.get("shape") if isinstance(info, dict) else None
        shapes.append("x".join(str(d) for d in shape) if isinstance(shape, list) else "?")
    return ",".join(shapes)


def _fit(text: str, width: int) -> str:
    """``text`` in ``width`` characters, cut in the middle where longer: names that share a
    start (an export's ``_ts`` and ``_ts_dyn``) stay told apart by their ends."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "~" + text[len(text) - (width - 1 - head):]


def _resolve_key(store, key: str) -> str:
    """A workload by its key or a unique prefix of it, else by the layer name `history ls`
    prints beside it (only the key was taken)."""
    from autotune.history.location import history_option

    workloads = store.workloads()
    names = {w.key: w.descriptor.get("name", "") for w in workloads}
    matches = [w.key for w in workloads if w.key.startswith(key)]
    if not matches:
        matches = [w.key for w in workloads if names[w.key] == key]
        if not matches:
            # history keeps the name a layer had in the first model tuned with it: the same
            # kernel in a later model (ResNet-50's fused_conv2d10_add5_relu4 is ResNet-18's
            # fused_conv2d4_add3_relu2) is found by the name its runs gave it
            matches = sorted({k for _, name, k in _run_layers(store) if name == key} & set(names))
        if len(matches) > 1:
            from autotune.errors import AutotuneError

            shapes = {w.key: _shapes_of(w.descriptor) for w in workloads}  # the name they share tells none apart
            listed = ", ".join(f"{k} ({shapes[k]})" for k in matches[:5]) + (", ..." if len(matches) > 5 else "")
            raise AutotuneError(f"{len(matches)} workloads are layers named {key!r} (of other models or batch sizes): "
                                f"{listed}; give the key")
    if not matches:  # "no workload starts with 'fused_conv2d'" where three layer names did
        from autotune.errors import AutotuneError

        similar = sorted({n for n in names.values() if n.startswith(key)})
        also = f"; layers named {', '.join(similar[:5])}{', ...' if len(similar) > 5 else ''} start so: give one whole" if similar else ""
        raise AutotuneError(f"no workload key starts with {key!r} and no layer is named so{also} "
                            f"(see `autotune history ls{history_option(store.url)}`)")
    return _unique_prefix(key, matches, "workload", f" (see `autotune history ls{history_option(store.url)}`)", labels=names)


def _shapes_of(descriptor: dict) -> str:
    """``1x64x56x56 64x64x3x3 -> 1x64x56x56``: a workload's operands and output, as stored."""
    from autotune.decompose import shape_text

    operands = [*(descriptor.get("inputs") or []), *(descriptor.get("weights") or [])]
    return f"{' '.join(shape_text(s) for s in operands)} -> {shape_text(descriptor.get('output') or [])}"


def _unique_prefix(prefix: str, matches: list[str], what: str, hint: str = "", *, labels: dict[str, str] | None = None) -> str:
    """The one of ``matches`` (the names that start with ``prefix``) the user meant: the
    exact name, else the only match; no match or several is one clear error line, which
    lists the first few of several (it gave only their count)."""
    from autotune.errors import AutotuneError

    if prefix in matches:
        return prefix
    if not matches:
        raise AutotuneError(f"no {what} in history starts with {prefix!r}{hint}")
    if len(matches) > 1:
        shown = ", ".join(f"{m} ({labels[m]})" if labels and labels.get(m) else m for m in matches[:5])
        more = ", ..." if len(matches) > 5 else ""
        raise AutotuneError(f"{prefix!r} matches {len(matches)} {what}s: {shown}{more}; give more characters")
    return matches[0]


def _record_dict(rec) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(rec)


def cmd_history_show(args) -> int:
    from autotune.errors import check_count
    from autotune.progress import format_latency
    from autotune.history import open_history

    check_count(args.limit, "limit")
    with open_history(args.history, create=False, readonly=True) as store:
        key = _resolve_key(store, args.key)
        _check_target(store, args.target)
        recs = store.records(workload_key=key, target_key=args.target, status=args.status, last=args.limit)
        held = store.count_records(workload_key=key, target_key=args.target, status=args.status)
        w = store.workload(key)
    if args.json:
        print(json.dumps({"workload": {"key": w.key, "op_class": w.op_class, "descriptor": w.descriptor, "flops": w.flops}, "records": [_record_dict(r) for r in recs]}))
        return 0
    print(f"{w.key}  {w.op_class}  {w.descriptor.get('name', '')}  {w.flops / 1e6:.1f} MFLOP")
    if not recs:  # the header alone, exit 0, read as a listing cut short
        which = " ".join(f"{flag} {value}" for flag, value in (("--target", args.target), ("--status", args.status)) if value)
        print(f"no records{' of ' + which if which else ''}")
        return 0
    shown = f" (the last {len(recs)} of {held}; --limit shows more)" if held > len(recs) else ""
    wu = max([8, *(len(r.tuner or "") for r in recs)])  # "other batch" pushed the columns after it
    def marks_of(r) -> str:
        # a twin's timing is another config's, whose program it compiled to; queued: timed
        # behind a spin kernel, GPU time alone (a few-us kernel reads lower so)
        return " ".join(m for m, on in (("verified", r.verified), ("twin", r.twin), ("queued", r.timing == "queued")) if on)

    mu = max([13, *(len(marks_of(r)) for r in recs)])  # "verified queued" pushed the error column over
    print(f"{'record':<7} {'status':<12} {'latency':>12} {'tuner':<{wu}} {'run':<12} {'target':<24} {'marks':<{mu}} error{shown}")
    for r in recs:
        lat = format_latency(r.latency_median)
        marks = marks_of(r)
        # the run that made it: where a shared history's record came from (`history runs` says whose)
        print(f"#{r.id:<6} {r.status:<12} {lat:>12} {r.tuner or '-':<{wu}} {(r.run_id or '-')[:12]:<12} {r.target_key:<24} {marks:<{mu}} "
              f"{(r.error or '')[:60]}")
    return 0


def cmd_history_best(args) -> int:
    from autotune.errors import AutotuneError
    from autotune.progress import format_latency
    from autotune.history import open_history

    with open_history(args.history, create=False, readonly=True) as store:
        key = _resolve_key(store, args.key)
        bests = [store.best(key, t.key) for t in store.targets()]
    bests = [b for b in bests if b is not None]
    if not bests:
        raise AutotuneError(f"workload {key} has no successful record")
    if args.json:
        print(json.dumps([_record_dict(b) for b in bests]))
    else:
        for b in bests:
            timed = ", timed queued" if b.timing == "queued" else ""
            print(f"{b.target_key}: {format_latency(b.latency_median)} (record #{b.id}, {b.tuner}, run {b.run_id or '-'}, "
                  f"{b.space_id}{timed})\n  {json.dumps(b.config)}")
    return 0


#: Records from which ``history export`` says how many it is writing before it starts.
EXPORT_SAYS_AT = 50_000


def cmd_history_export(args) -> int:
    from autotune.history import export_json, open_history

    path = args.out or args.file
    if path == "-" and args.json:
        from autotune.errors import AutotuneError

        raise AutotuneError("--json with - : the export itself is the JSON on standard output")
    with open_history(args.history, create=False, readonly=True) as store, store.snapshot():
        held = store.count_records()  # of the state the export writes (history.store snapshot)
        if held >= EXPORT_SAYS_AT and not args.json:
            # on stderr: stdout may be the export; 100,000 records took half a minute, silent
            print(f"exporting {held:,} records", file=sys.stderr, flush=True)
        try:
            n = export_json(store, sys.stdout if path == "-" else path)
            if path == "-":
                sys.stdout.flush()  # a small export's failure came at exit, past any handler
        except BrokenPipeError:  # `history export - | head`: the reader left, as for every other command
            raise
        except OSError as err:  # standard output on a full disk (a file's failure is a HistoryError)
            from autotune.errors import AutotuneError

            raise AutotuneError(f"cannot write the export to standard output: {err.strerror or err}") from None
    if args.json:
        print(json.dumps({"records": n, "out": os.path.abspath(os.path.expanduser(path))}))
    elif path != "-":
        print(f"exported {n} records to {path}")
    return 0


def cmd_history_import(args) -> int:
    from autotune.errors import AutotuneError
    from autotune.history import import_json, open_history

    _lasting_history(args.history, "import")
    name = "standard input" if args.file == "-" else args.file
    if args.file != "-" and not Path(args.file).exists():
        raise AutotuneError(f"file not found: {args.file}")
    from autotune.history.io import export_text, read_export_text

    try:
        if args.file == "-":  # `history export - | history import -`
            data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode("utf-8")
        else:
            data = Path(args.file).read_bytes()
    except OSError as err:
        raise AutotuneError(f"cannot read {name}: {err.strerror or err}") from None
    text = export_text(data, name)  # gzip, a byte-order mark, or a database given by mistake
    del data
    # checked whole before the history is even opened: a bad file changes no byte of it
    export = read_export_text(text, name)
    del text
    _check_import_references(args.history, export)
    with open_history(args.history) as store:
        counts = import_json(store, export)
    n_runs = counts.get("runs_added", 0)
    runs = f", {n_runs} run{'s' if n_runs != 1 else ''}" if n_runs else ""
    print(json.dumps(counts) if args.json else f"imported {counts.get('added', 0)} records ({counts.get('skipped', 0)} already present){runs}")
    if not args.json:
        if unknown := counts.get("runs_unknown", 0):
            print(f"  note: its records name {unknown} run{'s' if unknown != 1 else ''} neither {name} nor history holds (a file "
                  "exported before 2026-11-27 carries none): `history runs` and `history rm` cannot show "
                  f"{'them' if unknown != 1 else 'it'}, and compile cannot say which --batch-norm layering they were tuned with")
        for line in counts.get("versions_differ", []):
            print(f"  note: {line}; history keeps one version per target, the first it knew, so its records are filed under it")
    return 0


def _check_import_references(location: str | None, export) -> None:
    """The workloads and targets an export's records name, looked up in the file and in
    history opened read-only (opening it to write rewrites its header)."""
    from autotune.history import HistoryError, open_history, resolve_location
    from autotune.history.io import check_references
    from autotune.history.location import sqlite_file

    path = sqlite_file(resolve_location(location))
    if path is not None and not path.exists():
        check_references(export, None)
        return
    try:
        store = open_history(location, create=False, readonly=True)
    except HistoryError:  # a database with no history tables yet, say: the import's own checks answer
        return
    with store:
        check_references(export, store)


def cmd_history_rm(args) -> int:
    from autotune.run_status import close_stale_runs, stale_run
    from autotune.history import open_history

    with open_history(args.history, create=False, readonly=args.dry_run) as store:
        # a run whose process is gone is no longer running (a dry run only reads, so it
        # is told which; it refused a SIGKILLed run `history runs` showed as killed)
        gone = {run["run_id"] for run in store.runs() if stale_run(run)} if args.dry_run else set()
        if not args.dry_run:
            close_stale_runs(store)
        run_ids = [_resolve_run(store, prefix) for prefix in args.run_ids]
        if args.force:  # another host's run left running (that host died): its pid cannot be asked from here
            gone |= {run_id for run_id in run_ids if (run := store.run(run_id)) is not None
                     and run["status"] == "running" and not _runs_here(run)}
        removed = store.remove_runs(run_ids, dry_run=args.dry_run, gone=gone)
    if args.json:
        print(json.dumps({"dry_run": args.dry_run, "runs": removed}))
        return 0
    verb = "would remove" if args.dry_run else "removed"
    for run in removed:
        what = f"run {run['run_id']} ({run['status']})" if run["run_row"] else f"run {run['run_id']} (imported records only)"
        print(f"{verb} {what} and its {run['records']} record{'s' if run['records'] != 1 else ''}")
    return 0


def _runs_here(run: dict[str, Any]) -> bool:
    """The run was started on this host (its process, alive or not, is this machine's to ask)."""
    import socket

    return (run.get("params") or {}).get("host") == socket.gethostname()


def _resolve_run(store, prefix: str) -> str:
    from autotune.errors import AutotuneError
    from autotune.history.location import history_option

    if not prefix:
        raise AutotuneError("an empty run id names no run")
    matches = store.run_ids(prefix)
    if prefix not in matches and len(prefix) < MIN_RUN_PREFIX:  # `rm b` removed a run and its records unasked
        raise AutotuneError(f"{prefix!r}: give at least {MIN_RUN_PREFIX} characters of a run id to remove it "
                            f"(see `autotune history runs{history_option(store.url)}`)")
    return _unique_prefix(prefix, matches, "run", f" (see `autotune history runs{history_option(store.url)}`)")


#: The shortest prefix of a run id ``history rm`` takes (a whole id of any length, too).
MIN_RUN_PREFIX = 4


def cmd_report(args) -> int:
    from autotune import api
    from autotune import report as reporting

    from autotune.compile import check_output_dir
    from autotune.errors import AutotuneError

    if args.out_dir:
        check_output_dir(args.out_dir)  # before the report is looked up: a file in its place ended in a traceback
    data = api.report(args.run, mlflow_uri=args.mlflow_uri, history=args.history)
    # a report read from a folder that holds its plots already (the run's own, where tune
    # wrote it) writes no copies into the working directory; one from MLflow, or --out-dir, does
    kept = [] if args.out_dir else reporting.artifacts_on_disk(args.run, data, history=args.history)
    unwritten = None  # why the copies were not written, where the working directory takes no file
    if kept:
        paths = kept
    elif args.out_dir:
        paths = reporting.write_artifacts(data, Path(args.out_dir))
    else:
        try:
            # the run id as report.json gives it, kept to what run ids are made of: "/../../.."
            # in an edited file wrote the copies over files three folders up (a helper's fuzzing)
            named = re.sub(r"[^0-9A-Za-z_-]", "", str(data.get("run_id", "")))[:12] or "run"
            out_dir = check_output_dir(f"autotune-report-{named}")
        except AutotuneError as err:  # the summary is still owed: it had refused to print it at all
            paths, unwritten = [], str(err)
        else:
            paths = reporting.write_artifacts(data, out_dir)
    if args.json:
        # the run's report as tune --json gave it (each layer's match, records drawn on and
        # curve were left out, read only in report.json), with the table's rows beside it
        # strict JSON whatever a figure came to (a NaN is no JSON any reader takes)
        print(json.dumps(reporting.strict_json({**data, "rows": reporting.summary_rows(data),
                                                "files": [str(p) for p in paths],
                                                **({"files_not_written": unwritten} if unwritten else {})}),
                         allow_nan=False))
    else:
        print(reporting.format_table(data, **_table_width()))
        if unwritten:
            print(f"its files not written: {unwritten} (give --out-dir)")
        else:
            print(f"{'its files' if kept else 'wrote'} {', '.join(str(p) for p in paths)}")
    return 0


# --- helpers ----------------------------------------------------------------------------------
def _version() -> str:
    from autotune import __version__

    return __version__


def _working_directory_gone() -> bool:
    try:
        os.getcwd()
    except FileNotFoundError:
        return True
    return False


def _terminal_width() -> int | None:
    """Standard output's width where it is a terminal, else None (a file or pipe: whole lines)."""
    return _table_width().get("width")


def _table_width() -> dict[str, int]:
    """A terminal's width for the tables, where standard output is one: drawn 160 or 200
    columns wide, their box lines wrapped into a garble on an 80-column terminal. A file
    or pipe keeps the tables' own widths, the same on every machine."""
    import shutil

    if not sys.stdout.isatty():
        return {}
    return {"width": max(60, shutil.get_terminal_size().columns)}


def _flag(option: str) -> str:
    """The flag the CLI spells an API option with: ``min_trials`` -> ``--min-trials``."""
    return _FLAGS.get(option) or "--" + option.replace("_", "-")


#: API options the CLI spells otherwise than by the rule
_FLAGS = {"input_shapes": "--input-shape", "mlflow": "--no-mlflow", "probes": "--no-probes"}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        args.cli_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if not getattr(args, "func", None):  # a usage error: its help goes to standard error, not into a script's data
        getattr(args, "help_of", parser).print_help(sys.stderr)
        return EXIT_USAGE
    from autotune.output_encoding import make_printable

    make_printable()  # an ASCII standard output raised UnicodeEncodeError at the table, after the tune
    from autotune.matplotlib_config import settle_matplotlib_config

    settle_matplotlib_config()  # MLflow imports it too
    if os.environ.get("HOME") == "":  # `~` in a path went to / (history.location.user_home)
        from autotune.history.location import user_home

        os.environ["HOME"] = user_home()
    from autotune.errors import stopping_on_sigterm, terminated

    # SQLAlchemy's pool logs a connection it could not close (a second Ctrl-C landing in
    # its rollback) with its traceback, through logging's last resort: 40 lines above
    # the one line that says the tune was stopped. What goes wrong with history reaches
    # the user as an error of ours, not as a log record.
    logging.getLogger("sqlalchemy.pool").addHandler(logging.NullHandler())
    try:
        with stopping_on_sigterm():
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        started = getattr(sys.modules.get("autotune.tune"), "STARTED_RUNS", ())
        kept = "; measurements so far are kept in history" if args.command == "tune" and started else ""
        if args.command == "tune" and getattr(args, "json", False):
            # the event stream's last line: it stopped with no word on standard output, as a crash does
            try:
                print(json.dumps({"event": "terminated" if terminated() else "interrupted",
                                  "run_id": started[-1] if started else None}), flush=True)
            except OSError:  # `tune --json | jq`: Ctrl-C stopped the reader too
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        if terminated():
            print(f"autotune: terminated (SIGTERM){kept}", file=sys.stderr)
            return 128 + signal.SIGTERM
        print(f"autotune: interrupted{kept}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `autotune history ls | head`: the reader left, which is no error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        return 128 + signal.SIGPIPE
    except Exception as err:  # one clear line for the user's mistakes; tracebacks for ours
        from autotune.errors import AutotuneError

        if _working_directory_gone():
            # every relative path, and MLflow's import, failed (tracebacks, or "No such file"
            # of a store that was there); what needs no working directory still runs
            print("autotune: error: the current directory no longer exists (removed while this shell was in it): cd "
                  "to another and run the command again", file=sys.stderr)
            return EXIT_USAGE

        user_errors: tuple[type[BaseException], ...] = (AutotuneError,)
        try:
            from autotune.history import HistoryError

            user_errors += (HistoryError,)
        except ImportError:
            pass
        if isinstance(err, user_errors):
            from autotune.errors import OptionError

            line = err.spelled(_flag) if isinstance(err, OptionError) else str(err)
            # one line, whatever a file name in it holds (a newline split it in two, an
            # escape sequence recoloured the terminal)
            from autotune.output_encoding import printable

            line = printable(line)
            print(f"autotune: error: {line}", file=sys.stderr)
            return EXIT_USAGE
        if isinstance(err, UnicodeError) and not sys.getfilesystemencoding().lower().startswith("utf"):
            # a C locale with UTF-8 mode off: a non-ASCII file name reaches the database
            # URL, MLflow and TVM as text they cannot encode (a traceback, from urllib)
            print(f"autotune: error: a name here is not {sys.getfilesystemencoding()}, this locale's encoding for file "
                  f"names ({err.reason}): run in a UTF-8 locale (LANG=C.UTF-8) or with PYTHONUTF8=1", file=sys.stderr)
            return EXIT_USAGE
        raise


if __name__ == "__main__":
    raise SystemExit(main())
