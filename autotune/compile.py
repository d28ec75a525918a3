"""Apply the best schedules from history to a model and export a deployable module.

Each layer gets its best verified history config when one exists and fits the current
knob space; every other layer keeps TVM's default (dlight on CUDA), so every model
compiles whether or not it was ever tuned. The export is written atomically: a failed
compile leaves no partial ``.so`` behind.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from autotune.budget import DEFAULT_MIN_TRIALS
from autotune.errors import AutotuneError
from autotune.frontend import DEFAULT_BATCH_NORM
from autotune.target import TargetSpec, other_architecture
from autotune.history.location import remove_orphaned_temporaries, temporary_beside
from autotune.history.models import BASELINE_SPACE_PREFIX

DEFAULT_SPACE_PREFIX = BASELINE_SPACE_PREFIX  # the name autotune and the benchmarks use
#: Measured configs below which a layer's winner is thin evidence: tune's own ``min_trials``
#: default, under which it does not reuse a winner either. The H100's history, imported,
#: gave ResNet-18 four winners of one measurement each (one 13 GFLOP/s), and compile said
#: nothing of it.
THIN_HISTORY = DEFAULT_MIN_TRIALS
#: A layer's schedule when it is the winner of the same layer at another batch size.
OTHER_BATCH = "history (other batch)"


def default_space_id(target: TargetSpec) -> str:
    """History's space id for 'TVM's own default schedule' records (the baseline)."""
    return f"{DEFAULT_SPACE_PREFIX}{target.kind}"


@dataclass
class Applied:
    """What compile did per layer (shown to the user, stored next to the export)."""

    layers: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def tuned(self) -> int:
        """Layers given their own history winner."""
        return sum(1 for v in self.layers.values() if v["schedule"] == "history")

    @property
    def thin(self) -> int:
        """Layers given a winner, their own or another batch size's, of fewer than
        :data:`THIN_HISTORY` measured configs."""
        return sum(1 for v in self.layers.values() if v.get("measured_configs", THIN_HISTORY) < THIN_HISTORY
                   and v["schedule"] in ("history", OTHER_BATCH))

    @property
    def changed_layers(self) -> list[str]:
        """The layers given a schedule other than TVM's default."""
        return [name for name, v in self.layers.items() if v["schedule"] in ("history", OTHER_BATCH)]

    @property
    def other_batch(self) -> int:
        """Layers given the winner of the same layer at another batch size."""
        return sum(1 for v in self.layers.values() if v["schedule"] == OTHER_BATCH)


#: How many of a layer's fastest records compile tries, fastest first, for one that applies.
RECORDS_TRIED = 10


def history_target_key(store, target: TargetSpec) -> str:
    """Whose records a build for ``target`` applies. A target with its device here is
    its own key. Built for a device that is not here (``cuda:sm_90`` on a machine with
    no GPU, a CPU named by ``mcpu``), no record can carry this machine's name for it,
    and compiling resnet18 for ``cuda:sm_90`` applied none of an H100's 27 layers: the
    records of the same kind and arch are used, the device's with the most of them where
    history holds several."""
    if store is None or target.has_device:
        return target.key
    same = [t.key for t in store.targets() if (t.kind, t.arch) == (target.kind, target.arch)]
    if target.key in same or not same:
        return target.key
    if len(same) == 1:
        return same[0]
    return max(same, key=lambda key: sum(row["n_ok"] for row in store.summary(key)))


def apply_history(mod, layers, target: TargetSpec, store, *, spaces: dict | None = None, target_key: str | None = None):
    """Replace each layer's PrimFunc with its best history schedule, where there is one
    (records of ``target_key``, by default the target's own).

    A layer history has not measured at this batch size takes the winner of the same
    layer at the nearest batch size it has measured, where that config fits this
    shape: batch rarely changes the winner, and tuning at batch 1 then compiling at
    batch 4 applied none of the tuned schedules (0 of 6 of dqn's layers). Where that
    nearest winner is TVM's default, the default it is. So does a layer history holds no
    tuned config for at this batch size, only TVM's default timed."""
    from autotune.templates.meta_schedule_space import MetaScheduleSpace

    spaces = spaces if spaces is not None else {}
    applied = Applied()
    tvm_target = target.tvm_target
    key = target_key or target.key
    for layer in layers:
        entry: dict[str, Any] = {"workload_key": layer.workload_key, "schedule": "default", "record_id": None}
        applied.layers[layer.name] = entry
        ranked = store.fastest(layer.workload_key, key, limit=RECORDS_TRIED) if store is not None else []

        def space() -> MetaScheduleSpace:
            if layer.workload_key not in spaces:
                spaces[layer.workload_key] = MetaScheduleSpace(layer.func, tvm_target, name=layer.name)
            return spaces[layer.workload_key]

        # the fastest record that applies: one that does not (a config no space holds,
        # imported by hand) left the layer at TVM's default, with a better record unused
        skipped: list[str] = []
        for record in ranked:
            if record.space_id.startswith(DEFAULT_SPACE_PREFIX):
                entry["record_id"] = record.id
                break
            func, note = _scheduled(space(), record)
            if func is None:
                skipped.append(f"#{record.id}: {note}")
                continue
            mod.update_func(mod.get_global_var(layer.name), func)
            entry.update(schedule="history", record_id=record.id, latency=record.latency_median,
                         measured_configs=store.count_measured(layer.workload_key, key, space_id=record.space_id))
            break
        if skipped:
            entry["note"] = ("faster records do not apply: " if entry["schedule"] == "history" or entry["record_id"]
                             else "no record applies: ") + "; ".join(skipped)
        # a layer tuned at this batch keeps what won here, TVM's default included; one
        # that history holds only TVM's default timing for (a tune whose budget never
        # reached it times the default) still takes the winner at another batch size,
        # which that timing had hidden: dqn at batch 8 after a 1-trial tune, 7x slower
        if any(not r.space_id.startswith(DEFAULT_SPACE_PREFIX) for r in ranked):
            continue
        if store is None:
            continue
        other = winner_at_other_batch(store, layer, key, space)
        if other is None:
            continue
        if other.record is None:
            entry["note"] = "no winner of the same layer at another batch size fits this shape"
            continue
        # batch_ratio: the other batch size over this one (their FLOPs' ratio)
        found = {"record_id": other.record.id, "from_workload": other.record.workload_key, "batch_ratio": other.batch_ratio}
        if other.config is None:
            if entry["record_id"] is None:  # TVM's default timed at this batch is the record that stands (it was the other's)
                entry.update(found)
            entry["note"] = "the same layer's winner at the nearest batch size is TVM's default"
            continue
        entry.update(found)
        mod.update_func(mod.get_global_var(layer.name), _scheduled_as_history(other.scheduled))
        entry.update(schedule=OTHER_BATCH,
                     measured_configs=store.count_measured(other.record.workload_key, key, space_id=other.record.space_id))
    return mod, applied


@dataclass
class OtherBatchWinner:
    """The same layer's winner at the nearest batch size whose config fits this shape
    (``config``, mapped onto it, and the layer ``scheduled`` so), or its TVM default
    there (``config`` None); ``record`` None where history holds the layer at other batch
    sizes but no winner fits."""

    record: Any
    batch_ratio: float | None
    config: dict | None
    scheduled: Any = None


def winner_at_other_batch(store, layer, target_key: str, space) -> OtherBatchWinner | None:
    """What ``compile`` applies to a layer history holds only TVM's default timing for at
    this batch size; None where history holds the layer at no other batch size.
    ``space``: a callable giving the layer's knob space (made only when needed)."""
    others = _nearest_batches_first(store.best_at_other_batches(layer.workload_key, layer.batch_invariant_key, target_key), layer.flops)
    for other, flops in others:
        ratio = round(flops / layer.flops, 4) if layer.flops else None
        if other.space_id.startswith(DEFAULT_SPACE_PREFIX):
            return OtherBatchWinner(other, ratio, None)
        mapped = mapped_config(space(), other)
        if mapped is not None:
            return OtherBatchWinner(other, ratio, *mapped)
    return OtherBatchWinner(None, None, None) if others else None


def _nearest_batches_first(found: list[tuple[Any, float]], flops: float) -> list[tuple[Any, float]]:
    """Same layer, other batch sizes: the FLOPs ratio is the batch ratio; nearest in log first."""
    def distance(item: tuple[Any, float]) -> float:
        other = item[1]
        return abs(math.log(other / flops)) if other > 0 and flops > 0 else math.inf

    return sorted(found, key=distance)


def mapped_config(space, record) -> tuple[dict, Any] | None:
    """``record``'s config, from the same layer at another batch size, put onto this
    layer's candidates: the batch spread over the outermost tiles
    (:func:`batch_in_outer_tiles`), else each knob at its nearest candidate as the
    guided tuners map history; the first that applies, with the scheduled PrimFunc, or
    None where neither does (another knob space version, or what the space or the GPU
    checks refuse)."""
    from autotune.search.features import map_config
    from autotune.templates import InvalidConfig

    if record.space_id.rsplit(":", 1)[0] != space.space_id.rsplit(":", 1)[0]:
        return None
    for config in (batch_in_outer_tiles(space, record.config), map_config(space, record.config)):
        if config is None:
            continue
        try:
            scheduled = space.apply(config)["main"]
        except InvalidConfig:
            continue
        return config, scheduled
    return None


def _scheduled_as_history(scheduled) -> Any:
    return scheduled.without_attr("global_symbol").with_attr("tirx.is_scheduled", True)


def batch_in_outer_tiles(space, config: dict) -> dict | None:
    """``config`` with each tiling the batch size changed rescaled in its outermost level
    (thread blocks on a GPU, the parallel loop on a CPU), the rest as tuned; None where a
    tiling does not divide so. The nearest tiling, as the guided tuners map history, put
    the batch in the threads' and inner tiles: on the H100, batch 1's winners of three
    ResNet-50 convs then overran shared memory or registers at batch 4, which spread over
    blocks applied cleanly (2026-11-27)."""
    moved = dict(config)
    for knob in space.knobs:
        value = config.get(knob.name)
        if knob.kind != "tile" or not isinstance(value, (list, tuple)) or not value:
            continue
        extent, was = math.prod(knob.candidates[0]), math.prod(value)
        if extent == was:
            continue
        if extent % was == 0:
            tile = [value[0] * (extent // was), *value[1:]]
        elif was % extent == 0 and value[0] % (was // extent) == 0:
            tile = [value[0] // (was // extent), *value[1:]]
        else:
            return None
        moved[knob.name] = tile
    return moved if space.contains(moved) else None


def why_not_applicable(space, record) -> str | None:
    """Why ``compile`` would skip ``record``'s config for this space without trying it
    (None: it tries it). ``tune`` asks the same before it reports a layer's best, so that
    what it reports is what ``compile`` applies."""
    if record.space_id != space.space_id:
        return "history config is for another knob space version"
    if not space.contains(record.config):  # said "another knob space version" of a value out of range
        return "history config holds values this layer's knob space does not"
    return None


def _scheduled(space, record) -> tuple[Any, str | None]:
    """``record``'s config applied to the layer's space: the scheduled PrimFunc, or None
    and why it does not apply."""
    from autotune.templates import InvalidConfig

    reason = why_not_applicable(space, record)
    if reason is not None:
        return None, reason
    try:
        scheduled = space.apply(record.config)["main"]
    except InvalidConfig as err:
        return None, f"history config no longer valid: {err}"
    return _scheduled_as_history(scheduled), None


def build(mod, target: TargetSpec):
    """Relax module (fused, partly scheduled) -> VM executable for ``target``."""
    from tvm import relax

    from autotune.defaults import apply_gpu_defaults
    from autotune.errors import interrupt_mark, raise_if_interrupted_since
    from autotune.nvrtc_headers import header_cache_for

    tvm_target = target.tvm_target
    mark = interrupt_mark()
    try:  # one NVRTC compile for the whole model: it reuses the headers the verifications parsed
        with tvm_target, header_cache_for(target.kind):
            if target.kind == "cuda":
                mod = apply_gpu_defaults(mod)
            executable = relax.build(mod, target=tvm_target, relax_pipeline=relax.get_pipeline("default"))
    except Exception as err:
        raise_if_interrupted_since(mark)
        lines = [ln for ln in str(err).splitlines() if ln.strip()]
        culprit = _failing_kernel(mod, tvm_target)
        where = f" in layer {culprit} (`autotune layers` describes it)" if culprit else ""
        raise AutotuneError(f"compiling the model for {target.kind} failed{where}: {(lines[-1] if lines else err)}") from None
    raise_if_interrupted_since(mark)  # the default pipeline folds constants too
    return executable


def _failing_kernel(mod, tvm_target) -> str | None:
    """The first kernel that fails to build on its own, named as ``layers`` names it: a
    message from deep in TVM (an internal check) says nothing of which op it stopped at.
    Asked only once the model's build has failed; None when every kernel builds alone
    (the failure is in the model's own code, not a kernel's)."""
    import tvm
    from tvm import tirx

    for gvar, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        try:
            with tvm_target:
                tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target=tvm_target)
        except KeyboardInterrupt:
            raise
        except Exception:
            return gvar.name_hint
    return None


#: What an output of each kind may replace where a file is there already: an earlier
#: output of its kind (by its first bytes) or an empty file. ``zoo export -o`` and
#: ``run --save-outputs`` wrote over the history database, ``zoo export`` over a module.
OUTPUT_KINDS: dict[str, tuple[str, tuple[bytes, ...]]] = {
    "module": ("a compiled module (a shared library)",
               (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe", b"\xca\xfe\xba\xbe", b"MZ")),
    "onnx": ("an ONNX model", (b"\x08",)),  # a ModelProto's first field, ir_version
    "npz": ("saved outputs (.npz)", (b"PK\x03\x04", b"PK\x05\x06")),
    "description": ("a module's description (the JSON compile writes beside it)", (b"{",)),
}


def file_head(path: str | os.PathLike, size: int = 16) -> bytes | None:
    """The first ``size`` bytes of a file, which say what kind it is; None where it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return fh.read(size)
    except OSError:
        return None


def is_module_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` starts as a shared library does (ELF, Mach-O, PE); unreadable: assumed so."""
    head = file_head(path)
    return head is None or head.startswith(OUTPUT_KINDS["module"][1])


def check_replaceable(out: Path, kind: str | None) -> None:
    """Refuse to replace a SQLite database (a history, an MLflow store, anyone's) with any
    output, and a file of another kind with one of ``kind``'s (:data:`OUTPUT_KINDS`). A
    symlink is replaced itself, its target kept (:func:`write_atomically`): nothing to refuse."""
    if os.path.islink(out):
        return
    try:
        mode = os.stat(out).st_mode
    except OSError:  # none there (or unreadable: said where it is written)
        return
    if stat.S_ISDIR(mode):  # said by check_output_path
        return
    if not stat.S_ISREG(mode):  # a named pipe hung the read below; a device became a file
        raise AutotuneError(f"cannot write {out}: it is no regular file (a named pipe, a device): give a file's name")
    head = file_head(out)
    if not head:  # empty, or unreadable
        return
    if head.startswith(b"SQLite format 3\x00"):
        raise AutotuneError(f"cannot write {out}: it is a SQLite database (a history or an MLflow store?): give the "
                            "output another name")
    if kind is not None:
        what, magics = OUTPUT_KINDS[kind]
        if not head.startswith(magics):
            raise AutotuneError(f"cannot write {out}: a file is there that is not {what}, as an earlier output "
                                "would be: remove it first, or give another name")


def check_output_path(out: str | os.PathLike, kind: str | None = None, *, replaceable: bool = True) -> Path:
    """Fail before any work when ``out`` could not be written, or would replace what is
    not an earlier output of ``kind`` (:func:`check_replaceable`; ``replaceable=False``
    leaves that to a caller that checks its inputs first, whose message is the clearer).

    Missing parent directories are fine (they are made when the file is written, as
    ``zoo export`` does): what must hold is that the nearest existing one is a directory
    this process may write in, and that ``out`` itself is not a directory.
    """
    text = os.fspath(out)
    if text.endswith(("/", os.sep)):  # written as a file of the folder's name
        raise AutotuneError(f"cannot write {text}: the name ends in '/', a folder's; give a file name")
    out = Path(os.path.expanduser(text))  # `--out=~/m.so` reaches us unexpanded: it wrote ./~/m.so
    # beside the name as given, not where a symlink of that name points: the module
    # replaces the link there, and a temporary file in the link target's folder, on
    # another file system, could not be renamed over it (after the whole tune)
    ancestor = Path(os.path.abspath(out)).parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    limit = _name_max(ancestor)
    if len(os.fsencode(out.name)) > limit:  # before anything asks the file system of it (a traceback)
        raise AutotuneError(f"cannot write {out.name[:40]}...: the name is {len(os.fsencode(out.name))} bytes, "
                            f"more than a file name here may hold ({limit})")
    if out.is_dir():
        raise AutotuneError(f"cannot write {out}: it is a directory")
    if not ancestor.is_dir():
        raise AutotuneError(f"cannot write {out}: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise AutotuneError(f"cannot write {out}: directory {ancestor} is not writable")
    if replaceable:
        check_replaceable(out, kind)
    _probe_writable(out, ancestor)
    return out


#: Names ``-o`` may not end in: each says a file that is no shared library (TVM writes
#: an archive of objects for ``.tar``, which ``run`` cannot load), or one of the inputs.
_NOT_A_LIBRARY = (".onnx", ".tar", ".tar.gz", ".tgz", ".zip", ".o", ".a", ".json", ".npz", ".npy", ".pt", ".pth")


def check_module_path(out: str | os.PathLike, *, inputs: Sequence[str | os.PathLike] = (),
                      history: str | os.PathLike | None = None) -> Path:
    """:func:`check_output_path` for an exported module: a shared library's name, and not
    one of ``inputs`` (``compile m.onnx -o m.onnx`` replaced the model with the module) or
    the ``history`` file (``-o h.db`` replaced the whole history with the module, and a
    tune went on writing through its open connection into the module's bytes)."""
    if history is not None:
        check_not_history(out, history)
    out = check_output_path(out, replaceable=False)
    name = out.name.lower()
    wrong = next((s for s in _NOT_A_LIBRARY if name.endswith(s)), None)
    if wrong:
        raise AutotuneError(f"cannot write the module to {out}: a {wrong} name is not a shared library's "
                            f"(the module is one, for `autotune run` or tvm.runtime.load_module): give e.g. "
                            f"{out.name[: -len(wrong)] or 'model'}.so")
    check_not_an_input(out, inputs)
    check_replaceable(out, "module")
    check_replaceable(sidecar(out), "description")
    return out


def check_not_history(out: str | os.PathLike, history: str | os.PathLike) -> None:
    """Refuse an output path that is the history database (a file path or a ``sqlite:///``
    URL; a server's URL names no file here), or one of SQLite's files beside it."""
    from autotune.history.location import resolve_location, sqlite_file

    path = sqlite_file(resolve_location(history))
    if path is None:
        return
    target = Path(out).expanduser().absolute()
    # SQLite keeps its side files beside the database a symlink names, not the link
    for base in dict.fromkeys((path.absolute(), path.resolve())):
        for suffix in ("", "-wal", "-shm", "-journal"):
            name = Path(f"{base}{suffix}")
            try:
                same = target == name or (target.exists() and name.exists() and os.path.samefile(target, name))
            except OSError:
                same = False
            if same:
                what = f"the history database {path}" + (f" (its {suffix[1:]} file)" if suffix else "")
                raise AutotuneError(f"cannot write {out}: it is {what} (give the output another name)")


def check_not_an_input(out: str | os.PathLike, inputs: Sequence[str | os.PathLike]) -> None:
    """Refuse to write over a file this command reads: the user's model or module is
    theirs to keep, whatever they named the output."""
    out = Path(out)
    for given in inputs:
        path = Path(given).expanduser()
        try:
            same = out.exists() and path.exists() and os.path.samefile(out, path)
        except OSError:
            same = False
        if same:
            raise AutotuneError(f"cannot write {out}: it is the input {given} itself (give the output another name)")


def _probe_writable(out: Path, folder: Path) -> None:
    """Write (and remove) a file in ``folder``: permission bits do not tell, for root, a
    read-only mount, root-squashed NFS or /proc, which were found once a whole tune had
    run (with a traceback, for a report folder)."""
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".autotune-probe-"):
            pass
    except OSError as err:
        raise AutotuneError(f"cannot write {out}: {folder} takes no new file ({err.strerror or err})") from None


def check_output_dir(folder: str | os.PathLike) -> Path:
    """Fail before any work when reports could not be written in ``folder``: a file in
    its place was found only once a whole tune had run."""
    folder = Path(os.path.expanduser(os.fspath(folder)))
    if folder.exists() and not folder.is_dir():
        raise AutotuneError(f"cannot write the report in {folder}: it is a file, not a directory")
    if folder.is_symlink() and not folder.exists():  # made as a folder after the tune: "File exists"
        raise AutotuneError(f"cannot write the report in {folder}: it is a symlink to {os.readlink(folder)}, which "
                            "does not exist (make that folder, or give another)")
    check_output_path(folder / "report.json")
    return folder


def _name_max(folder: Path) -> int:
    """The longest file name, in bytes, ``folder``'s file system takes (255 where it will not say)."""
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return 255


def make_parent(out: Path) -> Path:
    """``out``'s directory (as named, a symlink not followed), made if missing; only once
    the file is about to be written, so a run that fails earlier leaves no empty
    directory behind. What killed writes left there is cleared."""
    parent = Path(os.path.abspath(out)).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise AutotuneError(f"cannot write {out}: {err.strerror or err}") from None
    remove_orphaned_temporaries(parent)
    return parent


def write_atomically(out: Path, write: Callable[[Path], None], *, suffix: str = ".tmp") -> Path:
    """``out`` written whole or not at all: ``write`` fills a temporary file beside it
    (named ending in ``suffix``), which is then renamed over ``out``. Not mkstemp: its
    0600 mode would survive the rename; a unique name suffices."""
    out = Path(os.path.expanduser(os.fspath(out)))
    parent = make_parent(out)
    tmp = temporary_beside(parent, suffix)
    try:
        write(tmp)
        os.replace(tmp, out)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise AutotuneError(f"cannot write {out}: {err.strerror or err}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out


def cross_linker(target: TargetSpec) -> str | None:
    """The C++ compiler that links a CPU module for another architecture's triple
    (``aarch64-linux-gnu-g++``), None for the host's own; refused before any work where
    there is none (the host's linker failed on the objects after the whole build)."""
    triple = target.config.get("mtriple") if target.kind == "llvm" else None
    if not other_architecture(triple):
        return None
    for name in (f"{triple}-g++", f"{triple}-c++", f"{triple}-clang++"):
        if shutil.which(name):
            return name
    raise AutotuneError(f"cannot link a module for {triple} here: no {triple}-g++ (a cross compiler) on PATH")


def export(executable, out: str | os.PathLike, metadata: dict[str, Any], *, fpack_imports=None,
           cc: str | None = None) -> Path:
    """Write ``out`` (.so) and ``out.json`` (inputs, target, schedules) atomically.

    ``fpack_imports`` replaces how the imported modules are linked in (see
    ``device_code.fatbin_packer``); ``cc`` links (:func:`cross_linker`)."""
    out = check_output_path(out, "module")
    check_replaceable(sidecar(out), "description")
    parent = make_parent(out)
    # a fresh name, not mkstemp's file: the linker kept its 0600 mode as 0711, a module
    # no other user could load (dlopen reads it)
    tmp = str(temporary_beside(parent, ".so"))
    meta_tmp = tmp + ".json"
    try:
        with _owned_tvm_temporaries():
            executable.export_library(tmp, **({"fpack_imports": fpack_imports} if fpack_imports else {}), **({"cc": cc} if cc else {}))
        if metadata.get("target_kind", "llvm") == "llvm":
            _check_loads(tmp, out)
        # the description names its module by content: another model's description of the
        # same shapes (copied beside it) was taken as this one's
        metadata = {**metadata, "module_sha256": file_sha256(tmp)}
        with open(meta_tmp, "w", encoding="utf-8") as fh:
            json.dump(metadata, fh, indent=2, sort_keys=True)
        os.replace(tmp, out)
        os.replace(meta_tmp, sidecar(out))
    except BaseException as err:  # Ctrl-C too: it left the half-written module beside ``out``
        for path in (tmp, meta_tmp):
            if path and os.path.exists(path):
                os.remove(path)
        if isinstance(err, AutotuneError) or not isinstance(err, Exception):
            raise
        raise AutotuneError(f"exporting {out} failed: {failure_line(str(err)) or err}") from None
    return out


@contextlib.contextmanager
def _owned_tvm_temporaries() -> Iterator[None]:
    """TVM's objects of an export (a 46 MB ``devc.o`` for ResNet-18) made in a folder that
    names this process: killed outright during the link, the process left TVM's
    ``/tmp/tmpXXXX`` behind for good; such folders are cleared by the next build or export
    (:func:`autotune.measure.remove_orphaned_exports`)."""
    import tempfile

    from autotune.measure import owned_temporary_folder, remove_orphaned_exports

    remove_orphaned_exports()
    folder, before = owned_temporary_folder(), tempfile.tempdir
    tempfile.tempdir = folder
    try:
        yield
    finally:
        tempfile.tempdir = before
        shutil.rmtree(folder, ignore_errors=True)


#: What marks the line of a tool's output that says why it failed.
_FAILURE_MARKS = ("No space left", "final link failed", "error:", "Error:", "cannot ", "undefined reference")


def failure_line(text: str) -> str:
    """The line of a failed build's message that says why: the first that reads as an
    error, else the last. TVM ends a failed link with the command it ran, and a full
    disk read "Command line: /usr/bin/g++ -shared ..." with ld's reason above it."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip() and not line.strip().startswith("Command line:")]
    # not a header that announces what follows ("Compilation error:"), nor a warning
    # ("ld: warning: cannot find entry symbol") above the error
    return next((line for line in lines if any(mark in line for mark in _FAILURE_MARKS) and not line.endswith(":")
                 and "warning:" not in line), lines[-1] if lines else "")


def _check_loads(path: str, out) -> None:
    """A CPU module is loaded back before it is written out: TVM exported a module it
    then could not load (a model whose weight had a dimension of size 0: "Invalid DLTensor
    file format"), and compile had said it wrote it. (A CUDA module may be built where no
    GPU is to load it on.)"""
    import tvm

    try:
        tvm.runtime.load_module(path)
    except Exception as err:
        lines = str(err).strip().splitlines()
        raise AutotuneError(f"exporting {out} failed: TVM wrote a module it cannot load back "
                            f"({lines[-1] if lines else type(err).__name__}); nothing was written") from None


def output_info(mod, names: list[str]) -> list[dict[str, Any]]:
    """Each output the module's ``main`` returns, in order (a tuple's fields flattened as
    ``run`` flattens them): its name, shape (None where not static) and dtype."""
    from autotune.frontend import output_types, static_shape

    return [{"name": names[i] if i < len(names) else f"output{i}", "shape": static_shape(ty),
             "dtype": str(getattr(ty, "dtype", "")) or None} for i, ty in enumerate(output_types(mod))]


def file_sha256(path: str | os.PathLike) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sidecar(path: str | os.PathLike) -> Path:
    return Path(str(path) + ".json")


def compile_model(
    model: str,
    out: str | os.PathLike,
    *,
    target: TargetSpec,
    store=None,
    input_shapes=None,
    size: int | None = None,
    batch_size: int | None = None,
    batch_norm: str = DEFAULT_BATCH_NORM,
    step: Callable[[str], None] | None = None,
    own_run: str | None = None,
) -> dict[str, Any]:
    """The whole ``autotune compile`` command as a function: returns its summary.

    ``step`` hears what is being done, phase by phase (the CLI shows it as a status line:
    a CUDA build with nvcc takes 10-20 s). ``own_run``: the tune exporting its module,
    still running in history, which is not another tune still tuning."""
    from autotune import decompose, frontend
    from autotune.device_code import fatbin_packer
    from autotune.errors import keep_interrupts_through_tvm
    from autotune.info import build_versions
    from autotune.layering_hint import history_layering_hint

    keep_interrupts_through_tvm()
    say = step or (lambda text: None)

    out = check_module_path(out, inputs=[model], history=getattr(store, "location", None))
    if target.kind == "cuda":
        from autotune.device_code import check_arch_compiles

        check_arch_compiles(target.arch)
    linker = cross_linker(target)
    say(f"loading {model}")
    spec, mod = frontend.load_and_fuse(
        model, input_shapes=input_shapes, size=size, batch_size=batch_size, batch_norm=batch_norm
    )
    layers = decompose.decompose(mod, batch_size=spec.batch_size, sequence_first=spec.sequences_carry_batch_second)
    tunable = sum(layer.tunable for layer in layers)  # as tune counts them (a reshape had made 19 of 18)
    say(f"applying history's schedules to {tunable} layers")
    history_key = history_target_key(store, target)
    mod, applied = apply_history(mod, layers, target, store, target_key=history_key)
    hint = history_layering_hint(store, spec, target_key=history_key, batch_norm=batch_norm)
    tuning = _tuning_note(store, spec.name, {layer.workload_key for layer in layers if layer.tunable}, own_run)
    say(f"building for {target.key}")
    executable = build(mod, target)
    if target.kind == "cuda":
        say("compiling the CUDA kernels with nvcc")
    fpack_imports, kernels = fatbin_packer(executable, target.tvm_target)
    say(f"writing {out}")
    metadata = {
        "format": "autotune-module",
        "version": 1,
        "model": spec.name,
        "source": spec.source,
        "model_digest": spec.digest,
        "target": target.config,
        "target_kind": target.kind,
        "target_key": target.key,
        "history_target_key": history_key,
        "inputs": spec.inputs_description(),
        # the order the module takes them in: ``inputs`` is an object, written with sorted keys
        "input_order": list(spec.input_shapes),
        "batch": spec.batch_description(),
        "outputs": spec.output_names,
        # what each output is, for a caller with no model to ask (names alone before)
        "output_info": output_info(mod, spec.output_names),
        "batch_norm": batch_norm,
        "layers": applied.layers,
        "device_code": kernels,
        "versions": build_versions(),
    }
    if spec.source.startswith("zoo:"):
        metadata["zoo"] = {"name": spec.name, "size": size, "batch_size": spec.batch_size}
    path = export(executable, out, metadata, fpack_imports=fpack_imports, cc=linker)
    return {
        "out": str(path),
        "metadata": str(sidecar(path)),
        "model": spec.name,
        "target": target.key,
        "history_target": history_key,
        "layers": tunable,
        "tuned_layers": applied.tuned,
        "other_batch_layers": applied.other_batch,
        "thin_layers": applied.thin,
        "device_code": kernels,
        "schedules": applied.layers,
        "history_note": hint,
        # a tune of this history still running: its later winners are not in the module
        "tuning_runs": tuning[0],
        "tuning_note": tuning[1],
    }


def _tuning_note(store, model: str, workload_keys: set[str], own_run: str | None = None) -> tuple[list[str], str | None]:
    """The runs still tuning on ``store`` this model's layers (a run of this model, or one
    that has measured one of its layers), and a line saying what that means for the module
    (a compile during a tune said nothing of it; one of AlexNet was told of a ResNet-18 tune)."""
    from autotune.run_status import runs_in_progress

    if store is None:
        return [], None
    running = [run for run in runs_in_progress(store) if run["run_id"] != own_run
               and (run["model"] == model or store.run_touched(run["run_id"], workload_keys))]
    if not running:
        return [], None

    def where(run) -> str:
        params = run.get("params") or {}
        return f" (pid {params['pid']} on {params['host']})" if params.get("pid") and params.get("host") else ""

    named = ", ".join(f"{run['run_id']}{where(run)}" for run in running[:3]) + (", ..." if len(running) > 3 else "")
    runs = "run" if len(running) == 1 else "runs"
    verb = "is" if len(running) == 1 else "are"
    return ([run["run_id"] for run in running],
            f"{runs} {named} {verb} still tuning on this history: the module has the winners found so far; "
            "compile again when it ends for the rest")
