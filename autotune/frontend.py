"""ONNX in, fused Relax module out.

Everything that can go wrong with a user's model file is caught here and turned into
one :class:`AutotuneError` line, before TVM gets a chance to print a C++ backtrace.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, OptionError, first_line, quoted_text

#: Held while TVM imports or lowers a model. Its Relax BlockBuilder keeps a process-wide
#: stack, and the import swaps the process's standard output: two API calls on two
#: threads failed inside TVM ("AssertionError", blamed on the model) and left
#: ``sys.stdout`` a buffer, so the rest of the process printed nothing.
_TVM_IMPORT_LOCK = threading.RLock()

_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 6: "int32", 7: "int64", 10: "float16", 11: "float64", 9: "bool", 16: "bfloat16"}


@dataclass
class ModelSpec:
    """A loaded model with every input shape fixed (TVM tunes static shapes)."""

    name: str
    source: str  # "zoo:resnet18" or an absolute path
    proto: Any  # onnx.ModelProto
    input_shapes: dict[str, tuple[int, ...]]
    input_dtypes: dict[str, str]
    output_names: list[str] = field(default_factory=list)
    #: BatchNormalization nodes in the model as given (before any fold): where they run
    #: (``--batch-norm``) changes the layers only when there are some.
    batch_norms: int = 0
    #: Integer inputs that index a table (token ids into an embedding): the table's
    #: length n, ids valid in [-n, n). The compiled ``Gather`` clamps a bad id into the
    #: table (:mod:`autotune.rewrites`) and answers with the wrong row, silently, so
    #: ``run`` refuses given inputs outside this before they get there.
    index_limits: dict[str, int] = field(default_factory=dict)
    #: Integer inputs a Div or Mod divides by: seeded inputs of 0 and 1 divided by zero, a
    #: SIGFPE that killed `run --check` and the tune timing the model, with no word said.
    divisor_inputs: frozenset[str] = frozenset()
    #: The first input's dimension the model declared as its batch by name (``batch``,
    #: ``batch_size``, ``N``... as ``dynamic_axes`` names it), before ``--input-shape``
    #: pinned it; None where no dimension is so named.
    declared_batch_axis: int | None = None
    #: Inputs whose shape ``--input-shape`` gave, with the shape the model declares for
    #: each (``batchx16x64``): what a failure to import or lower at those shapes names.
    given_shapes: dict[str, str] = field(default_factory=dict)

    def given_shapes_hint(self) -> str:
        """`` (at {input_shapes} x=2x20x64; the model declares x as batchx16x64 ...)``, or
        "" where no shape was given: a failure deep in TVM at a shape the model does not
        take read as TVM's own trouble. A template for :meth:`failure`, which names the
        option as the caller spells it (``--input-shape``, ``input_shapes``)."""
        if not self.given_shapes:
            return ""
        from autotune.decompose import shape_text

        given = " ".join(f"{k}={shape_text(list(self.input_shapes[k]))}" for k in self.given_shapes)
        declared = ", ".join(f"{k} as {v}" for k, v in self.given_shapes.items())
        return (f" (at {{input_shapes}} {quoted_text(given)}; the model declares {quoted_text(declared)}, and an "
                "export may fix in its graph a dimension it declares dynamic: do these shapes suit it?)")

    def failure(self, message: str) -> AutotuneError:
        """``message`` with :meth:`given_shapes_hint`: an error that names the shapes given
        by the option they were given with."""
        from autotune.errors import OptionError, quoted_text

        hint = self.given_shapes_hint()
        return OptionError(quoted_text(message) + hint, "input_shapes") if hint else AutotuneError(message)

    def inputs_description(self) -> dict[str, dict[str, Any]]:
        """Each input's shape, dtype and, for ids into a table, the table's length: what an
        exported module's description records and what seeded inputs are drawn from."""
        return {
            k: {"shape": list(v), "dtype": self.input_dtypes.get(k, "float32")}
            | ({"index_limit": self.index_limits[k]} if k in self.index_limits else {})
            | ({"nonzero": True} if k in self.divisor_inputs else {})
            for k, v in self.input_shapes.items()
        }

    @property
    def batch_size(self) -> int:
        """The batch the model runs: its first input's dimension :attr:`batch_axis` (rank 2
        or more; a rank-1 input is one sample). Layers drop it from their batch-invariant
        key, so a file exported at batch 8 matches history tuned at batch 1, as a zoo
        model does."""
        first = next(iter(self.input_shapes.values()), ())
        return int(first[self.batch_axis]) if len(first) >= 2 else 1

    @property
    def batch_axis(self) -> int:
        """Which of the first input's dimensions is the batch: the one the model names so,
        else the second of an LSTM's, GRU's or RNN's sequence in ONNX's default layout
        (time, batch, features; PyTorch's ``nn.LSTM`` without ``batch_first``), else the
        first."""
        name, first = next(iter(self.input_shapes.items()), ("", ()))
        if self.declared_batch_axis is not None and self.declared_batch_axis < len(first):
            return self.declared_batch_axis
        return 1 if len(first) >= 3 and _feeds_sequence_first_recurrence(self.proto, name) else 0

    @property
    def sequence_first(self) -> bool:
        """The batch is the second dimension of a (time, batch, features) input: the
        layers' sequences carry it second too."""
        first = next(iter(self.input_shapes.values()), ())
        return len(first) >= 3 and self.batch_axis == 1

    @property
    def sequences_carry_batch_second(self) -> bool:
        """Layers' (time, batch, features) sequences carry the batch second: the input is
        such a sequence, or an LSTM, GRU or RNN inside runs time first. ``speech`` and
        ``seq2seq`` take batch-first inputs and transpose them for their LSTMs: with the
        batch read from the first dimension alone, those layers' batch-invariant keys
        changed with the batch, and ``compile`` at a new batch gave them TVM's defaults."""
        return self.sequence_first or (self.proto is not None and any(map(_time_first_recurrence, self.proto.graph.node)))

    def batch_description(self) -> dict[str, Any]:
        """The batch as read, for a person to check: ``layers``, reports and modules say it."""
        name = next(iter(self.input_shapes), None)
        return {"size": self.batch_size, "input": name, "axis": self.batch_axis}

    @property
    def digest(self) -> str:
        """Content hash: identifies the model in reports regardless of its file name."""
        return hashlib.sha256(self.proto.SerializeToString()).hexdigest()[:16]


#: Dimension names that say "batch" (``dynamic_axes={"x": {1: "batch"}}``, ``N``, ``bs``).
_BATCH_NAMES = re.compile(r"(?i)(.*batch.*|n|b|bs|bsz)")


def _declared_batch_axis(graph_input) -> int | None:
    """The first dimension of ``graph_input`` the model names as a batch, or None."""
    for axis, dim in enumerate(graph_input.type.tensor_type.shape.dim):
        if dim.dim_param and _BATCH_NAMES.fullmatch(dim.dim_param.strip()):
            return axis
    return None


def _feeds_sequence_first_recurrence(proto, name: str) -> bool:
    """``name`` is the sequence of an ONNX LSTM, GRU or RNN in its default layout (time
    first, batch second), as PyTorch exports an ``nn.LSTM`` without ``batch_first``."""
    if proto is None:
        return False
    for node in proto.graph.node:
        if node.op_type in ("LSTM", "GRU", "RNN") and node.input and node.input[0] == name:
            return _time_first_recurrence(node)
    return False


def _time_first_recurrence(node) -> bool:
    """An ONNX LSTM, GRU or RNN in its default layout: its sequence is (time, batch, features)."""
    return node.op_type in ("LSTM", "GRU", "RNN") and next((a.i for a in node.attribute if a.name == "layout"), 0) == 0


def parse_input_shapes(items: list[str] | None) -> dict[str, tuple[int, ...]]:
    """``["input=1x3x224x224"]`` -> ``{"input": (1, 3, 224, 224)}``."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items or []:
        name, sep, dims = item.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            shape = tuple(int(d) for d in dims.lower().replace(",", "x").split("x") if d != "")
            if not shape or any(d < 0 for d in shape):
                raise ValueError
        except ValueError:
            raise AutotuneError(
                f"bad --input-shape {item!r}: expected NAME=DxDx..., e.g. input=1x3x224x224"
            ) from None
        if 0 in shape:  # read as a format error, which it is not
            raise AutotuneError(f"bad --input-shape {item!r}: every dimension must be at least 1 (an input of size 0 "
                                "holds no data to compile for)")
        if name in shapes and shapes[name] != shape:  # the last one given won, unsaid
            from autotune.decompose import shape_text

            raise AutotuneError(f"--input-shape {name} given twice, as {shape_text(list(shapes[name]))} and "
                                f"{shape_text(list(shape))}")
        shapes[name] = shape
    return shapes


class InputShapeError(OptionError):
    """Input shapes given for a model that names inputs it lacks, or gives one another
    rank: said as ``input_shapes``' fault (``--input-shape`` on the command line), which a
    caller with shapes from elsewhere (``run --check`` has a module's) says its own way."""


def load_model(
    model: str,
    *,
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    batch_size: int | None = None,
    size: int | None = None,
    seed: int = 0,
    fold_batch_norm: bool = False,
) -> ModelSpec:
    """Load a zoo model by name or an ONNX file by path, and pin its input shapes.

    ``size`` and ``batch_size`` build a zoo model (batch 1 unless given); a file has its
    own shapes, so they are refused there rather than silently not applied
    (``input_shapes`` changes a file's).

    ``fold_batch_norm`` folds each inference batch norm that follows a convolution into
    that convolution's weights and bias (:mod:`autotune.batch_norm`), so the normalization
    costs nothing at run time.
    """
    import onnx

    from autotune import zoo

    path = Path(model).expanduser()
    if is_zoo_name(model):
        proto = zoo.build_model(model, batch_size=1 if batch_size is None else batch_size, size=size, seed=seed)
        name, source = model, f"zoo:{model}"
    else:
        given = [flag for flag, value in (("size", size), ("batch_size", batch_size)) if value is not None]
        if given and path.is_file():
            dynamic = [] if input_shapes else _dynamic_inputs(path)
            if dynamic:  # "its own input shapes", of a model whose batch it leaves open
                example = ", ".join(f"{n} is {t}" for n, t in dynamic[:3])
                raise OptionError(
                    f"{{{given[0]}}} is for zoo models; {model} is an ONNX file: give its dynamic dimensions with "
                    f"{{input_shapes}} NAME=DxD.. ({example})", given[0], "input_shapes",
                )
            raise OptionError(
                f"{{{given[0]}}} is for zoo models; {model} is an ONNX file with its own input shapes "
                "(change them with {input_shapes})", given[0], "input_shapes",
            )
        if not path.exists():
            hint = "" if model.endswith(".onnx") else f" (and no zoo model named {model!r}; see 'autotune zoo list')"
            raise AutotuneError(f"model file not found: {model}{hint}")
        if path.is_dir():
            raise AutotuneError(f"model path is a directory, not an ONNX file: {model}")
        try:
            proto = onnx.load(str(path))
        except Exception as err:  # protobuf DecodeError and friends
            missing = _unreadable_external_data(path)
            if missing:
                raise AutotuneError(
                    f"{model}: its weights are stored in {missing} beside it (ONNX external data, as torch's "
                    "dynamo exporter writes them), which cannot be read; keep that file next to the model"
                ) from None
            short = _short_external_data(path)
            if short:  # read as "not an ONNX model", of a model whose weights file was cut short
                raise AutotuneError(f"{model}: its weights file {short} beside it is cut short (the model reads past its "
                                    "end): copy it again") from None
            raise AutotuneError(f"{model} is not an ONNX model ({type(err).__name__}: {first_line(err)})") from None
        if not proto.graph.node:
            if path.stat().st_size == 0:
                raise AutotuneError(f"{model} is an empty file, not an ONNX model")
            raise AutotuneError(f"{model} holds no graph nodes: an ONNX model with nothing to compute, nothing to compile")
        # a file name that is not UTF-8 (bytes Python carries as surrogates) could not be
        # written to history as the model's name: a traceback at the run's start
        name, source = _printable(path.stem), str(path.resolve())
    return _pin_shapes(proto, name, source, input_shapes or {}, fold_batch_norm=fold_batch_norm)


def _printable(text: str) -> str:
    """``text`` with any undecodable file-name byte shown as U+FFFD."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def is_zoo_name(model: str) -> bool:
    """Whether ``model`` names a bundled model. A bare zoo name is the zoo's, even with a
    file or folder of that name here (a folder named so by ``--out-dir resnet18`` made
    the next ``tune resnet18`` fail): such a file is loaded as ``./resnet18``."""
    from autotune import zoo

    return model in {e.name for e in zoo.list_models()}


def _external_data(path: Path) -> list[dict[str, str]]:
    """Each external-data entry of the model's weights (``location``, ``offset``,
    ``length``), read without loading the data; none where the model cannot be read."""
    import onnx

    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception:
        return []
    return [{entry.key: entry.value for entry in tensor.external_data} for tensor in proto.graph.initializer
            if tensor.data_location == onnx.TensorProto.EXTERNAL]


def _unreadable_external_data(path: Path) -> str | None:
    """The first external-data file the model's weights name that is not a readable
    file beside it, or None. ``onnx.load`` reports one as a ValidationError about a
    tensor, which read as if the model itself were broken."""
    for entries in _external_data(path):
        location = entries.get("location")
        where = path.parent / location if location else None
        if where is not None and not (where.is_file() and os.access(where, os.R_OK)):
            return location
    return None


def _short_external_data(path: Path) -> str | None:
    """The first external-data file shorter than the weights the model reads from it
    (offset plus length), as ``name (N bytes, M needed)``, or None."""
    for entries in _external_data(path):
        try:
            need = int(entries.get("offset", 0) or 0) + int(entries.get("length", 0) or 0)
            size = (path.parent / entries.get("location", "")).stat().st_size
        except (OSError, ValueError):
            continue
        if need > size:
            return f"{entries.get('location')} ({size:,} bytes, {need:,} needed)"
    return None


def _dynamic_inputs(path: Path) -> list[tuple[str, str]]:
    """(name, shape as declared) of each input of the model at ``path`` with a dimension
    left open, read without its weights' external data; none where it cannot be read."""
    import onnx

    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception:
        return []
    initializers = {init.name for init in proto.graph.initializer}
    return [(i.name, _shape_text(i.type.tensor_type.shape.dim)) for i in proto.graph.input
            if i.name not in initializers and any(not d.HasField("dim_value")
                                                  for d in i.type.tensor_type.shape.dim)]


def _shape_text(dims) -> str:
    """An ONNX input's shape as the model declares it: ``batchx3xHxW`` (an unnamed
    dynamic dimension is ``?``); every one read ``N`` before."""
    return "x".join(str(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0 else (d.dim_param or "?") for d in dims)


#: The largest dimension an input may have: TVM's loop extents are 32-bit (2^31 + 10
#: "cannot tile a loop with 0 or negative extent"; 2^31 - 100 builds).
MAX_DIMENSION = 2**31 - 1


def _pin_shapes(
    proto, name: str, source: str, overrides: dict[str, tuple[int, ...]], *, fold_batch_norm: bool = False
) -> ModelSpec:
    import onnx

    if proto.functions:
        # the dynamo exporter's model-local functions (a Gelu of its own): TVM's frontend
        # knows no such operator, and they were refused as another operator set's
        import onnx.inliner

        proto = onnx.inliner.inline_local_functions(proto)
    initializers = {init.name for init in proto.graph.initializer}
    graph_inputs = [i for i in proto.graph.input if i.name not in initializers]
    unknown = set(overrides) - {i.name for i in graph_inputs}
    if unknown:
        names = ", ".join(i.name for i in graph_inputs)
        raise InputShapeError(f"{{input_shapes}} names unknown input(s) {quoted_text(', '.join(sorted(unknown)))}; "
                              f"model inputs: {quoted_text(names)}", "input_shapes")
    shapes: dict[str, tuple[int, ...]] = {}
    dtypes: dict[str, str] = {}
    for inp in graph_inputs:
        ttype = inp.type.tensor_type
        dtypes[inp.name] = _ONNX_DTYPES.get(ttype.elem_type, "float32")
        if inp.name in overrides:
            declared = list(ttype.shape.dim)
            if declared and len(declared) != len(overrides[inp.name]):
                raise InputShapeError(
                    f"{{input_shapes}} {quoted_text(inp.name)} has rank {len(overrides[inp.name])}, the model's input has "
                    f"rank {len(declared)}", "input_shapes",
                )
            shapes[inp.name] = overrides[inp.name]
            continue
        dims = []
        for d in ttype.shape.dim:
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(d.dim_value)
            elif d.HasField("dim_value") and d.dim_value == 0:
                # declared 0, not dynamic: "dynamic" sent the user to --input-shape, which refuses 0
                raise InputShapeError(
                    f"input {quoted_text(repr(inp.name))} has a dimension of size 0 ({quoted_text(_shape_text(ttype.shape.dim))}): "
                    f"it holds no data, and autotune compiles models whose inputs do; give it a size with "
                    f"{{input_shapes}} {quoted_text(inp.name)}=...", "input_shapes",
                )
            else:
                raise OptionError(
                    f"input {quoted_text(repr(inp.name))} has a dynamic shape ({quoted_text(_shape_text(ttype.shape.dim))}); "
                    f"fix it with {{input_shapes}} {quoted_text(inp.name)}=...", "input_shapes",
                )
        shapes[inp.name] = tuple(dims)
    for inp_name, shape in shapes.items():
        if max(shape, default=0) > MAX_DIMENSION:
            # a loop's extent past 32 bits wraps negative in TVM's schedules: tune stopped in
            # a ScheduleError traceback, after `layers` had reported 23 million GFLOP
            raise InputShapeError(f"input {quoted_text(inp_name)} has a dimension of {max(shape):,}, past the "
                                  f"{MAX_DIMENSION:,} a loop may run here", "input_shapes")

    if overrides or _computes_shapes(proto):
        proto = _simplify(proto, shapes)
    batch_norms = sum(1 for node in proto.graph.node if node.op_type == "BatchNormalization")
    try:  # before the fold: it read a malformed conv or batch norm's weights as given (a fuzzing trial's tracebacks)
        onnx.checker.check_model(proto)
    except Exception as err:
        raise AutotuneError(f"invalid ONNX model {source}: {first_line(err)}") from None
    if not proto.graph.output:  # compiled to an empty module that computed nothing
        raise AutotuneError(f"{source} declares no graph outputs: an ONNX model that returns nothing, nothing to compile")
    if fold_batch_norm:
        from autotune.batch_norm import fold_into_conv

        proto, _ = fold_into_conv(proto)
    outputs = [o.name for o in proto.graph.output]
    integers = [n for n, d in dtypes.items() if d.startswith(("int", "uint"))]
    return ModelSpec(
        name=name, source=source, proto=proto, input_shapes=shapes, input_dtypes=dtypes, output_names=outputs,
        batch_norms=batch_norms, index_limits=index_limits(proto, integers), divisor_inputs=divisor_inputs(proto, integers),
        declared_batch_axis=_declared_batch_axis(graph_inputs[0]) if graph_inputs else None,
        given_shapes={i.name: _shape_text(i.type.tensor_type.shape.dim) for i in graph_inputs if i.name in overrides},
    )


def index_limits(proto, integer_inputs: list[str]) -> dict[str, int]:
    """For each of ``integer_inputs`` that a ``Gather`` takes as its indices into a
    constant table, the table's extent along the gathered axis (the least, where several
    tables share the ids)."""
    tables = {init.name: list(init.dims) for init in proto.graph.initializer}
    limits: dict[str, int] = {}
    for node in proto.graph.node:
        if node.op_type != "Gather" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        ids, dims = node.input[1], tables.get(node.input[0])
        if ids not in integer_inputs or not dims:
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if -len(dims) <= axis < len(dims):
            limits[ids] = min(limits.get(ids, dims[axis]), dims[axis])
    return limits


def divisor_inputs(proto, integer_inputs: list[str]) -> frozenset[str]:
    """Those of ``integer_inputs`` a ``Div`` or ``Mod`` divides by, directly: an integer
    division by zero is no NaN but a SIGFPE, which ends the process."""
    return frozenset(node.input[1] for node in proto.graph.node
                     if node.op_type in ("Div", "Mod") and node.domain in ("", "ai.onnx") and len(node.input) > 1
                     and node.input[1] in integer_inputs)


def _computes_shapes(proto) -> bool:
    """PyTorch exports often compute shapes at run time; TVM wants them folded first."""
    return any(n.op_type in {"Shape", "ConstantOfShape", "Range", "NonZero"} for n in proto.graph.node)


def _simplify(proto, shapes: dict[str, tuple[int, ...]]):
    """Fold shape computations with onnxsim for the pinned input shapes.

    Constant folding and shape inference only: onnxsim's optimizer passes rewrite ops
    (batch norm into the conv; in the installed build, attention into an ``Attention``
    op TVM's frontend cannot import), and the layers a model decomposes into must not
    depend on whether ``--input-shape`` was given."""
    try:
        import onnxsim
    except ImportError:  # optional: without it we hand the graph to TVM as is
        return _set_input_dims(proto, shapes)
    try:
        with _TVM_IMPORT_LOCK, _stderr_shut():  # its C++ warns of each node it could not fold, which we then leave to TVM
            simplified, ok = onnxsim.simplify(
                proto, overwrite_input_shapes={k: list(v) for k, v in shapes.items()}, perform_optimization=False
            )
    except Exception:
        return _set_input_dims(proto, shapes)
    return simplified if ok else _set_input_dims(proto, shapes)


def _set_input_dims(proto, shapes: dict[str, tuple[int, ...]]):
    for inp in proto.graph.input:
        if inp.name in shapes:
            dims = inp.type.tensor_type.shape.dim
            del dims[:]
            for v in shapes[inp.name]:
                dims.add().dim_value = v
    return proto


def to_relax(spec: ModelSpec):
    """Import into Relax with weights bound as constants (they travel in the export)."""
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    from autotune.errors import keep_interrupts_through_tvm

    keep_interrupts_through_tvm()  # the first TVM work of every command

    from autotune.frontend_gaps import refuse_frontend_gaps
    from autotune.recurrent import unroll_recurrent

    proto, _ = unroll_recurrent(spec.proto)  # TVM has no LSTM/GRU/RNN converter
    proto = _constants_as_tensors(proto)
    refuse_frontend_gaps(proto, spec.source)  # nodes it would import, and compute otherwise
    _refuse_foreign_domains(proto, spec.source)
    supported = set(_get_convert_map()) | {"Constant", "If"}
    missing = sorted({n.op_type for n in proto.graph.node} - supported)
    if missing:
        raise AutotuneError(
            f"{spec.source}: ONNX op(s) not supported by TVM's ONNX frontend: {', '.join(missing)}"
        )
    opset = max((o.version for o in spec.proto.opset_import if o.domain in ("", "ai.onnx")), default=None)
    with _TVM_IMPORT_LOCK:
        return _from_onnx(spec, proto, opset)


#: A Constant's attributes other than ``value`` that TVM 0.27's frontend does not read ("no
#: value in Constant"), with the tensor type each holds; dynamo and onnxscript write them.
_CONSTANT_FORMS = {"value_float": 1, "value_floats": 1, "value_int": 7, "value_ints": 7}  # FLOAT, INT64


def _constants_as_tensors(proto):
    """``proto`` with each Constant of a scalar or list attribute given its ``value`` tensor
    instead (a copy where any is changed), as ONNX defines them to mean."""
    import onnx
    from onnx import helper

    found = [(i, a) for i, node in enumerate(proto.graph.node) if node.op_type == "Constant" and node.domain in ("", "ai.onnx")
             for a in node.attribute if a.name in _CONSTANT_FORMS]
    if not found:
        return proto
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    for i, attr in found:
        node = model.graph.node[i]
        value = helper.get_attribute_value(attr)
        dims = [] if attr.name in ("value_float", "value_int") else [len(value)]
        tensor = helper.make_tensor(node.output[0], _CONSTANT_FORMS[attr.name], dims, [value] if not dims else list(value))
        kept = [a for a in node.attribute if a.name != attr.name]
        del node.attribute[:]
        node.attribute.extend([*kept, helper.make_attribute("value", tensor)])
    return model


#: The onnxruntime contrib operators (domain ``com.microsoft``) TVM's ONNX frontend has
#: converters written for; it converts every node by its op type alone, whatever its domain.
MICROSOFT_OPS = frozenset({"Attention", "BiasGelu", "EmbedLayerNormalization", "FastGelu", "Gelu", "SkipLayerNormalization"})


def _refuse_foreign_domains(proto, source: str) -> None:
    """Refuse a node of an operator set other than ONNX's: TVM's frontend reads only the op
    type, so a custom ``com.example.Relu`` was compiled as ONNX's Relu, whatever it does."""
    for node in proto.graph.node:
        if node.domain in ("", "ai.onnx") or (node.domain == "com.microsoft" and node.op_type in MICROSOFT_OPS):
            continue
        raise AutotuneError(
            f"{source}: node {node.name or node.output[0]!r} is {node.op_type} of the operator set {node.domain!r}, "
            "not ONNX's; TVM's ONNX frontend would compile it as ONNX's operator of that name (or not at all)"
        )


#: Opsets below this one: where TVM's frontend fails on such a model, converting it is suggested.
OLD_OPSET = 13


def _from_onnx(spec: ModelSpec, proto, opset):
    """TVM's import, its printing kept for the message a failure is owed."""
    import tvm
    from tvm.relax.frontend.onnx import from_onnx

    printed = io.StringIO()  # the frontend prints which operator failed, on standard output
    try:
        with contextlib.redirect_stdout(printed):
            mod = from_onnx(
                proto,
                shape_dict={k: list(v) for k, v in spec.input_shapes.items()},
                dtype_dict=spec.input_dtypes,
                opset=opset,
                keep_params_in_input=False,
            )
    except Exception as err:
        if isinstance(err, tvm.error.OpNotImplemented):
            message = f"{spec.source}: {first_line(err)}"
        else:
            converting = re.match(r"Error converting operator (\w+)", printed.getvalue())
            where = f" at {converting.group(1)}" if converting else ""
            message = f"{spec.source}: TVM's ONNX frontend failed{where}: {first_line(err)}"
            if opset is not None and opset < OLD_OPSET:
                # a Slice of opset 9's attributes failed in "Cannot cast NoneType to list of
                # Expr", and imported once converted
                message += (f" (the model is at opset {opset}, older than TVM's frontend is written for: "
                            "onnx.version_converter.convert_version(model, 17) may make it one that imports)")
        _drop_quietly(err)
        raise (AutotuneError(message) if isinstance(err, tvm.error.OpNotImplemented) else spec.failure(message)) from None
    sys.stdout.write(printed.getvalue())
    return mod


def _drop_quietly(err: BaseException) -> None:
    """Let ``err`` go now, with standard error shut: the frontend's half-built module goes
    with its traceback, and TVM warns of it ("BlockBuilder destroyed with remaining
    blocks") under the one line the user is owed."""
    import gc
    import traceback

    with _stderr_shut():
        traceback.clear_frames(err.__traceback__)  # the frames' locals hold the module being built
        err.__traceback__ = None
        gc.collect()


@contextlib.contextmanager
def _stderr_shut():
    """Standard error at the descriptor, so C++ (``std::cerr``) writes go too."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def lowering_passes(*, batch_norm_in_epilogue: bool = False) -> list:
    """TVM's passes from an imported Relax module to fused TIR kernels, in order (what
    :func:`fuse` runs, folding the importer's constants in numpy before them)."""
    return [*(_inference_passes() if batch_norm_in_epilogue else []), *_kernel_passes()]


def _inference_passes() -> list:
    """Batch norm and the other inference-time composites into elementwise ops."""
    from tvm import relax

    return [relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings()]


def _kernel_passes() -> list:
    from tvm import relax

    from autotune.rewrites import kernel_rewrites

    return [
        kernel_rewrites(),
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
        relax.transform.DeadCodeElimination(),
    ]


def fuse(mod, *, batch_norm_in_epilogue: bool = False):
    """Legalize to TIR and fuse: each remaining PrimFunc is one kernel TVM will emit.

    ``batch_norm_in_epilogue`` first rewrites inference-time composites (batch norm above
    all) into the elementwise ops they are, as TVM's own tuning pipeline does, so that
    fusion puts them in the epilogue of the convolution before them: a subtract, a
    divide, a multiply and an add per output element. Folding batch norm into the
    weights instead (:func:`load_model`) leaves one add, and measured faster (README).
    """
    import tvm

    from autotune.errors import interrupt_mark, keep_interrupts_through_tvm, raise_if_interrupted_since
    from autotune.importer_constants import fold_importer_constants

    keep_interrupts_through_tvm()
    fold = fold_importer_constants()
    # with batch norm in the epilogue, fold the constant parts of its decomposition too
    inference = [*_inference_passes(), fold] if batch_norm_in_epilogue else []
    seq = tvm.transform.Sequential([fold, *inference, *_kernel_passes()])
    mark = interrupt_mark()
    try:
        with _TVM_IMPORT_LOCK:
            fused = seq(mod)
    except Exception as err:
        raise_if_interrupted_since(mark)
        raise AutotuneError(f"lowering the model to TIR failed: {first_line(err)}") from None
    raise_if_interrupted_since(mark)  # FoldConstant drops an interrupt and goes on
    return fused


BATCH_NORM_LAYERINGS = ("separate", "epilogue", "weights")
#: Where batch norm runs unless told otherwise (``--batch-norm``). Folded into the
#: weights, tuned ResNet-18 and MobileNetV2 ran faster than with batch norm separate in 11
#: of 14 seeds on LLVM (0.90x the time in the geometric mean, Wilcoxon p = 0.049;
#: ``benchmarks/bench_batch_norm_fold.py --schedules tuned``, README), with 41 -> 24 and
#: 107 -> 55 kernel launches per inference.
DEFAULT_BATCH_NORM = "weights"


#: ONNX's element types as TVM names them (the ones a model's outputs take).
_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
                10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16"}


def output_types(mod) -> list[Any]:
    """The types of what the module's ``main`` returns, a tuple's fields flattened in order
    (as ``run`` flattens the outputs)."""
    from tvm import relax

    leaves: list[Any] = []

    def walk(ty) -> None:
        if isinstance(ty, relax.TupleType):
            for part in ty.fields:
                walk(part)
        else:
            leaves.append(ty)

    walk(mod["main"].ret_ty)
    return leaves


def static_shape(ty) -> list[int] | None:
    """A tensor type's shape, or None where it is not known at compile time."""
    values = getattr(getattr(ty, "shape", None), "values", None)
    if values is None or not all(hasattr(d, "value") or isinstance(d, int) for d in values):
        return None
    return [int(d) for d in values]


def check_declared_outputs(spec: ModelSpec, mod) -> None:
    """Refuse a module whose outputs are not the shapes and types the model declares.

    TVM's frontend imports some nodes without error and computes them otherwise than
    ONNX: a ConvTranspose's ``output_shape`` was ignored (1x5x14x16 where ONNX gives
    1x5x15x16), LayerNormalization's optional Mean and InvStdDev came back as 0-d zeros.
    Tune and compile went through and only ``run --check`` said MISMATCH. A dimension or
    type the model leaves open, or outputs that do not pair up one to one, are not judged.
    """
    from autotune.decompose import shape_text

    leaves = output_types(mod)
    declared = list(spec.proto.graph.output)
    if len(leaves) != len(declared):
        return
    makers = {out: node for node in spec.proto.graph.node for out in node.output}
    for ours, theirs in zip(leaves, declared):
        tensor = theirs.type.tensor_type
        shape = static_shape(ours)
        if shape is None:
            continue
        dtype = str(getattr(ours, "dtype", ""))
        problems = []
        if tensor.HasField("shape"):
            dims = list(tensor.shape.dim)
            if len(dims) != len(shape) or any(d.HasField("dim_value") and d.dim_value != n for d, n in zip(dims, shape)):
                problems.append(f"shape {shape_text(shape)} where the model declares "
                                f"{_shape_text(dims) if dims else 'a scalar'}")
        want = _ONNX_DTYPES.get(tensor.elem_type)
        if want is not None and dtype and dtype != want:
            problems.append(f"type {dtype} where the model declares {want}")
        if problems:
            maker = makers.get(theirs.name)
            by = f" (made by {maker.op_type} {maker.name or maker.output[0]!r})" if maker is not None else ""
            raise AutotuneError(
                f"{spec.source}: TVM's ONNX frontend gives output {theirs.name!r}{by} {' and '.join(problems)}: it "
                "computes a node on the way otherwise than ONNX does, and the module's outputs would be wrong"
            )


def load_and_fuse(model: str, *, batch_norm: str = DEFAULT_BATCH_NORM, **kwargs):
    """Convenience for commands: (spec, fused Relax IRModule); ``kwargs`` go to
    :func:`load_model`.

    ``batch_norm`` says where inference batch norm runs: ``separate`` (a kernel of its
    own, with the ReLU and residual add after it), ``epilogue`` (in the epilogue of the
    convolution before it) or ``weights`` (folded into that convolution's weights and
    bias; a batch norm after anything else stays separate).
    """
    if batch_norm not in BATCH_NORM_LAYERINGS:
        raise AutotuneError(f"batch_norm must be one of {', '.join(BATCH_NORM_LAYERINGS)}, not {batch_norm!r}")
    if kwargs.get("input_shapes") and is_zoo_name(model):
        # a zoo model is built for its size and batch: another batch failed in TVM's
        # frontend at a Reshape, and a size its checks refuse got through
        raise OptionError(
            f"{{input_shapes}} is for ONNX files; {model} is a zoo model: give it {{size}} and {{batch_size}}",
            "input_shapes", "size", "batch_size",
        )
    spec = load_model(model, fold_batch_norm=batch_norm == "weights", **kwargs)
    imported = to_relax(spec)
    check_declared_outputs(spec, imported)
    try:
        return spec, fuse(imported, batch_norm_in_epilogue=batch_norm == "epilogue")
    except AutotuneError as err:
        if not spec.given_shapes:
            raise
        raise spec.failure(str(err)) from None
