"""Load an exported module with the TVM runtime, feed it seeded inputs or the user's own
(an ``.npz``), time it, and keep its outputs."""

from __future__ import annotations

import json
import math
import os
import statistics
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from autotune.errors import AutotuneError, first_line


def load_metadata(path: str | os.PathLike) -> dict[str, Any]:
    from autotune.compile import sidecar

    path = Path(os.path.expanduser(os.fspath(path)))
    if not path.exists():
        raise AutotuneError(f"module not found: {path}")
    if path.is_dir():  # it had said the directory's description was missing
        raise AutotuneError(f"{path} is a directory, not a module (a .so that 'autotune compile' writes)")
    if path.suffix.lower() == ".onnx":
        raise AutotuneError(f"{path} is an ONNX model, not a compiled module: 'autotune compile {path} -o "
                            f"{path.with_suffix('.so').name}' makes one to run")
    meta_path = sidecar(path)
    if not meta_path.exists() and path.is_symlink() and sidecar(path.resolve()).exists():
        meta_path = sidecar(path.resolve())  # `latest.so -> v3.so`: the description is v3.so's
    if not meta_path.exists():
        module = path.with_suffix("")
        if path.suffix == ".json" and sidecar(module) == path and module.exists():  # `run m.so.json`
            raise AutotuneError(f"{path} is the description of the module {module}: give the module itself")
        from autotune.compile import is_module_file

        if not is_module_file(path):  # `run notes.json` said notes.json.json was missing
            raise AutotuneError(f"{path} is not a compiled module (the shared library 'autotune compile -o' writes)")
        raise AutotuneError(f"{meta_path} is missing: it is written by 'autotune compile' next to the module")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:  # not UTF-8, not JSON, nested past the decoder
        raise AutotuneError(f"cannot read {meta_path}: {first_line(str(err)) or type(err).__name__}") from None
    if not isinstance(meta, dict) or meta.get("format") != "autotune-module" or not isinstance(meta.get("inputs"), dict):
        raise AutotuneError(f"{meta_path} is not an autotune module description")
    _check_described_inputs(meta["inputs"], meta_path)
    expected = meta.get("module_sha256")  # absent from descriptions written before 2026-11-27
    if expected is not None:
        from autotune.compile import file_sha256

        if file_sha256(path) != expected:
            _check_complete(path)  # a copy cut short: said as such
            raise AutotuneError(f"{meta_path} describes another module than {path} (their contents differ): "
                                "give the description compile wrote beside this module, or compile it again")
    return meta


#: The most elements a described input may hold: past it, seeded inputs are no memory's.
MAX_INPUT_ELEMENTS = 2**34


def _check_described_inputs(inputs: Mapping[str, Any], meta_path: Path) -> None:
    """Each input a description names, checked as compile writes it: a hand-edited or
    damaged one (a shape of null, "x", NaN or 10**12, a dtype numpy does not know) ended
    in one of some 55 tracebacks (a helper's fuzzing)."""
    for name, info in inputs.items():
        where = f"{meta_path} is not a valid module description: input {name!r}"
        if not isinstance(info, dict):
            raise AutotuneError(f"{where} is no object")
        shape = info.get("shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise AutotuneError(f"{where}: its shape is no list of sizes (whole numbers, 0 or more)")
        if math.prod(shape) > MAX_INPUT_ELEMENTS:
            raise AutotuneError(f"{where}: its shape {shape} holds more than {MAX_INPUT_ELEMENTS:,} elements")
        dtype = info.get("dtype", "float32")
        try:  # by the name TVM gives it (">f4" is numpy's float32 too, and no TVM type)
            known = isinstance(dtype, str) and (dtype == "bfloat16" or (np.dtype(dtype).name == dtype
                                                                         and np.dtype(dtype).kind in "fiub"))
        except (TypeError, ValueError):
            known = False
        if not known:
            raise AutotuneError(f"{where}: its dtype {str(dtype)[:40]!r} is no tensor type TVM takes")


def seeded_inputs(meta: dict[str, Any], seed: int = 0) -> dict[str, np.ndarray]:
    """The same inputs for the same seed: lets runs be compared with a reference."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, info in meta["inputs"].items():
        dtype = numpy_dtype(info.get("dtype", "float32"))
        shape = [int(d) for d in info["shape"]]
        if dtype.kind == "f" or dtype.name == "bfloat16":
            out[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu" and dtype.itemsize == 1 and _index_limit(info) is None:
            # 8-bit data (a quantized tensor, an image's bytes) over its whole range: 0 and 1
            # alone, below a DequantizeLinear's zero point of 3, made its output all zeros
            limits = np.iinfo(dtype)
            out[name] = rng.integers(int(limits.min), int(limits.max) + 1, size=shape).astype(dtype)
        else:  # an index over its whole table where the module knows its length (rows 0 and 1 alone
            # of a 50-row embedding were checked), else 0 and 1: masks and flags
            out[name] = rng.integers(0, _index_limit(info) or 2, size=shape).astype(dtype)
        if dtype.kind in "iu" and info.get("nonzero") is True:  # a divisor: 0 is a SIGFPE, not a NaN
            out[name][out[name] == 0] = 1
    return out


def numpy_dtype(name: str) -> np.dtype:
    """numpy's type of a tensor type as TVM names it; bfloat16 is ml_dtypes', which numpy
    does not know by name."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _index_limit(info: Mapping[str, Any]) -> int | None:
    """The table length an integer input indexes, where the module's description gives a sound one."""
    limit = info.get("index_limit")
    # a table of more rows than an int32 holds is no sound one (numpy's bounds error, edited by hand)
    return limit if isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit <= 2**31 - 1 else None


def load_inputs(path: str | os.PathLike, meta: dict[str, Any], casts: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    """The module's inputs from an ``.npz`` file, one array per input name, as
    :func:`check_inputs` accepts them. Read with pickling off: an object array in the
    file is refused, never unpickled."""
    import zipfile

    try:
        with open(path, "rb") as fh:
            magic = fh.read(6)
        # numpy reads what is neither a zip (.npz) nor an .npy as a pickle, and said the
        # file "contains pickled (object) data" of any text file
        if not magic.startswith((b"PK\x03\x04", b"PK\x05\x06", b"\x93NUMPY")):
            raise ValueError("it is not one (no .npz or .npy header)")
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):  # an .npy: a bare array, which is no context manager
            raise ValueError("it holds a single array (.npy), not an .npz of named arrays: save it with "
                             "numpy.savez(FILE, NAME=array), NAME the model's input")
        with data:
            _check_names(data.files, meta["inputs"], str(path))
            _check_stored_shapes(data, meta["inputs"], str(path))
            arrays = {name: data[name] for name in data.files}
    except FileNotFoundError:
        raise AutotuneError(f"inputs file not found: {path}") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        reason = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise AutotuneError(f"cannot read inputs from {path} (an .npz of arrays named as the model's inputs): {reason}") from None
    return check_inputs(arrays, meta, source=str(path), casts=casts)


def _check_names(names: list[str], want: Mapping[str, Any], source: str) -> None:
    """Refuse inputs that are not exactly the module's."""
    missing = [name for name in want if name not in names]
    unknown = [name for name in names if name not in want]
    if missing or unknown:
        said = "; ".join(part for part in (
            f"missing {', '.join(missing)}" if missing else "", f"unknown {', '.join(map(str, unknown))}" if unknown else "",
        ) if part)
        raise AutotuneError(f"{source}: the module takes {', '.join(want)} ({said})")


def _check_stored_shapes(data, want: Mapping[str, Any], source: str) -> None:
    """Refuse an array of another shape than the module's from its ``.npy`` header, before
    numpy reads it: a header claiming 10^12 elements ended in MemoryError (numpy sizes the
    array from the header, whatever the file holds)."""
    from numpy.lib import format as npy

    readers = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}
    members = set(data.zip.namelist())
    for name in data.files:
        if f"{name}.npy" not in members:
            raise AutotuneError(f"{source}: input {name} is not an array (an archive member named {name}.npy)")
        with data.zip.open(f"{name}.npy") as fh:
            reader = readers.get(npy.read_magic(fh))
            if reader is None:  # a version without a public reader: numpy's own load judges it
                continue
            shape, _, dtype = reader(fh)
        if dtype.hasobject:  # numpy's own load says so in its words; these say why
            raise ValueError(f"input {name} is an array of Python objects, which would need unpickling (never done here)")
        if list(shape) != [int(d) for d in want[name]["shape"]]:
            raise AutotuneError(f"{source}: input {name} has shape {list(shape)}, the module takes {want[name]['shape']}")


def check_inputs(arrays: Mapping[str, Any], meta: dict[str, Any], *, source: str = "inputs",
                 casts: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    """Exactly the module's inputs, each of its shape; a dtype numpy casts without loss
    of kind (float64 data for a float32 input) is cast, any other refused. Each cast is
    noted in ``casts`` where given (``{"x": "int32 -> float32"}``): int data fed to a
    float module ran with no word of it."""
    want = meta["inputs"]
    _check_names(list(arrays), want, source)
    out: dict[str, np.ndarray] = {}
    for name, info in want.items():
        array = np.asarray(arrays[name])
        dtype = numpy_dtype(info.get("dtype", "float32"))
        if list(array.shape) != [int(d) for d in info["shape"]]:
            raise AutotuneError(f"{source}: input {name} has shape {list(array.shape)}, the module takes {info['shape']}")
        if array.dtype != dtype:
            if not np.can_cast(array.dtype, dtype, casting="same_kind"):
                raise AutotuneError(f"{source}: input {name} is {array.dtype}, the module takes {dtype}")
            with np.errstate(over="ignore", invalid="ignore"):
                narrow = array.astype(dtype)
            # float data, or int data (100000 into float16 became inf unsaid); bfloat16 is
            # no numpy float kind, so the narrow side is asked by name
            if np.issubdtype(array.dtype, np.number) and str(dtype) in ("float16", "bfloat16", "float32") and (
                np.isinf(narrow.astype(np.float32)) & np.isfinite(array)
            ).any():
                # numpy warned of an overflow in the cast, and the check then read NaN
                import ml_dtypes  # its finfo knows bfloat16 too

                top = float(np.abs(array[np.isfinite(array)]).max())
                raise AutotuneError(f"{source}: input {name} holds values up to {top:g}, past what {dtype} holds "
                                    f"({float(ml_dtypes.finfo(dtype).max):g}): the module takes {dtype}")
            if casts is not None:
                casts[name] = f"{array.dtype} -> {dtype}"
            array = narrow
        limit = _index_limit(info)
        lo, hi = (array.min(), array.max()) if limit is not None and array.size else (0, 0)
        if limit is not None and not (-limit <= lo and hi < limit):
            bad = hi if hi >= limit else lo
            raise AutotuneError(
                f"{source}: input {name} holds {bad}; it indexes a table of {limit}, so its values must lie in [{-limit}, {limit})"
            )
        out[name] = np.asarray(array, order="C")  # ascontiguousarray would make a scalar input 1-d
    return out


def output_names(meta: dict[str, Any], count: int) -> list[str]:
    """The module's outputs as the model names them, where the description names each
    once; else ``output_0``, ``output_1``..."""
    names = list(meta.get("outputs") or [])
    if len(names) != count or len(set(names)) != len(names):
        names = [f"output_{i}" for i in range(count)]
    return names


def save_outputs(path: str | os.PathLike, outputs: list[np.ndarray], meta: dict[str, Any]) -> Path:
    """The outputs as an ``.npz``, named as the model names them (``output_0``... where the
    module does not say); written whole or not at all. bfloat16 outputs are written as
    float32 (exactly): an ``.npz`` has no bfloat16, and numpy would read them back as
    untyped two-byte records."""
    from autotune.compile import check_output_path, write_atomically

    out = check_output_path(path, "npz")
    names = output_names(meta, len(outputs))
    # np.savez adds ".npz" to a name without it: the temporary name keeps it
    arrays = [a.astype(np.float32) if a.dtype.name == "bfloat16" else a for a in outputs]
    return write_atomically(out, lambda tmp: np.savez(tmp, **dict(zip(names, arrays))), suffix=".tmp.npz")


def load(path: str | os.PathLike, meta: dict[str, Any]):
    """(VirtualMachine, device) for an exported module on the device it was built for."""
    import tvm
    from tvm import relax

    kind = meta.get("target_kind", "llvm")
    dev = tvm.cuda(0) if kind == "cuda" else tvm.cpu(0)
    if kind == "cuda" and not dev.exist:
        raise AutotuneError(f"{path} was built for CUDA but no GPU is available here")
    _check_complete(path)
    try:
        lib = tvm.runtime.load_module(str(path))
        # in the try: a shared library that is no Relax module (a description copied beside
        # another .so) loaded, and the VM ended in a traceback
        return relax.VirtualMachine(lib, dev), dev
    except Exception as err:
        versions = meta.get("versions") if isinstance(meta.get("versions"), dict) else {}
        built = versions.get("tvm")
        other = f" (built with TVM {built}, this is TVM {tvm.__version__})" if built and built != tvm.__version__ else ""
        raise AutotuneError(f"cannot load {path}: {str(err).strip().splitlines()[-1]}{other}") from None


def _sidecar_name(path: str | os.PathLike) -> str:
    from autotune.compile import sidecar

    return sidecar(Path(path)).name


def argument_order(path: str | os.PathLike, meta: dict[str, Any], vm) -> list[str]:
    """The module's inputs in the order its ``main`` takes them. A sidecar's ``inputs``
    are an object, whose keys were written sorted: until 2026-11-27 a model with inputs
    ``zeta, alpha`` was fed ``alpha`` first, and its outputs came out wrong with no
    error. The module's own parameter names decide where they name the inputs; else the
    sidecar's ``input_order``."""
    names = list(meta["inputs"])
    try:
        params = [str(vm._get_function_param_name("main", i)) for i in range(int(vm._get_function_arity("main")))]
    except Exception:  # a runtime that cannot say: the sidecar's word alone
        params = None
    if params is not None and len(params) != len(names):
        raise AutotuneError(f"{path} takes {len(params)} inputs but its description lists {len(names)}: "
                            f"is {_sidecar_name(path)} the module's own?")
    if params is not None and sorted(params) == sorted(names):
        return params
    order = meta.get("input_order")
    if isinstance(order, list) and sorted(order) == sorted(names):
        return order
    if len(names) > 1:
        raise AutotuneError(f"{path}: its description does not say in which order it takes its {len(names)} "
                            "inputs (written before 2026-11-27); compile it again")
    return names


def _check_complete(path: str | os.PathLike) -> None:
    """Refuse a shared library cut short (a copy interrupted): the dynamic loader maps
    what its headers promise, and reading past the file's end killed the process with a
    bus error and no word. Other files are left for the loader to judge."""
    import struct

    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        head = fh.read(64)
        if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
            return
        wide, order = head[4] == 2, "<" if head[5] == 1 else ">"
        if wide and len(head) < 64:
            return
        phoff, shoff = struct.unpack_from(order + ("QQ" if wide else "II"), head, 0x20 if wide else 0x1C)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", head, 0x36 if wide else 0x2A)
        need = max(phoff + phentsize * phnum, shoff + shentsize * shnum)
        if need <= size and phnum:  # each segment's bytes, where the program headers say
            fh.seek(phoff)
            table = fh.read(phentsize * phnum)
            for i in range(phnum):
                entry = table[i * phentsize:(i + 1) * phentsize]
                offset, filesz = (struct.unpack_from(order + "QQQQ", entry, 8)[0::3] if wide
                                  else struct.unpack_from(order + "IIII", entry, 4)[0::3])
                need = max(need, offset + filesz)
    if need > size:
        raise AutotuneError(f"cannot load {path}: it is cut short ({size} bytes, its headers need {need}); copy it again")


def run_module(
    path: str | os.PathLike,
    *,
    seed: int = 0,
    repeat: int = 10,
    number: int = 0,
    warmup: int = 2,
    inputs: Mapping[str, np.ndarray] | None = None,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Outputs and latency statistics (seconds) of the exported module on ``inputs``
    (checked by :func:`check_inputs`), or on seeded ones; ``meta`` is its description
    where the caller has read it (:func:`load_metadata` digests the whole module)."""
    import tvm

    meta = load_metadata(path) if meta is None else meta
    vm, dev = load(path, meta)
    inputs = seeded_inputs(meta, seed) if inputs is None else check_inputs(inputs, meta)
    args = [tvm.runtime.tensor(inputs[name], dev) for name in argument_order(path, meta, vm)]
    try:
        result = vm["main"](*args)
    except Exception as err:  # TVM's argument checks: a description that is not the module's
        raise AutotuneError(f"running {path} failed: {first_line(err)}; is {_sidecar_name(path)} "
                            "the module's own description?") from None
    outputs = _flatten(result)
    samples, number = time_calls(lambda: vm["main"](*args), dev.sync, repeat=repeat, number=number, warmup=warmup)
    return {
        "module": str(path),
        "model": meta.get("model"),
        "target": meta.get("target_key"),
        "inputs": {k: list(v.shape) for k, v in inputs.items()},
        "outputs": [list(o.shape) for o in outputs],
        "latency_median_s": statistics.median(samples),
        "latency_mean_s": statistics.fmean(samples),
        "latency_std_s": statistics.pstdev(samples),
        "repeat": repeat,
        "number": number,
        "output_arrays": outputs,
    }


def time_calls(
    call: Callable[[], Any], sync: Callable[[], Any], *, repeat: int, number: int = 0, warmup: int = 2
) -> tuple[list[float], int]:
    """Seconds per call in each of ``repeat`` batches of ``number`` back-to-back calls
    (0: as many as take about 50 ms), after ``warmup`` calls; and that ``number``. The
    loop ``run`` times a module with, and what a benchmark times a vendor call with, so
    both pay the same per-call costs."""
    import time

    for _ in range(warmup):
        call()
    sync()
    if not number:  # enough calls per repeat for ~50 ms
        t0 = time.perf_counter()
        call()
        sync()
        number = max(1, min(1000, int(0.05 / max(time.perf_counter() - t0, 1e-6))))
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            call()
        sync()
        samples.append((time.perf_counter() - t0) / number)
    return samples, number


def _flatten(result) -> list[np.ndarray]:
    if hasattr(result, "numpy"):
        return [result.numpy()]
    out: list[np.ndarray] = []
    for item in result:
        out.extend(_flatten(item))
    return out


def onnx_reference(model_path_or_proto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Outputs of the ONNX reference evaluator: the ground truth for ``--check``.

    The evaluator keeps some operators only in their newer versions (onnx 1.23 has
    ``DequantizeLinear`` from opset 19 on, and refuses a quantized model of opset 17). Such
    a model is converted up to the version the evaluator has, by ONNX's own version
    converter, and evaluated there; a model the converter cannot take keeps the
    evaluator's error."""
    import onnx
    from onnx import version_converter
    from onnx.reference import ReferenceEvaluator

    from autotune.reference_ops import corrected_ops

    proto = onnx.load(str(model_path_or_proto)) if isinstance(model_path_or_proto, (str, os.PathLike)) else model_path_or_proto
    tried: set[int] = set()
    while True:
        try:
            # with the evaluator's own slips corrected (autotune.reference_ops): it called
            # correct LRN and opset-11 softmax modules wrong
            # numpy's overflow warnings are the evaluator's (a float16 LayerNorm squares
            # past 65504), printed mid-check: the half-precision verdict says what they mean
            with memory_capped() as cap, np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                return [np.asarray(o) for o in ReferenceEvaluator(proto, new_ops=corrected_ops(proto)).run(None, inputs)]
        except MemoryError:
            raise AutotuneError(
                "the ONNX reference evaluator ran out of memory computing this model's outputs"
                + (f" ({cap.limit_bytes / 2**30:.1f} GB was available to it)" if cap.limit_bytes else "")
                + ": check it on smaller inputs, or run it without --check"
            ) from None
        except RuntimeError as err:
            newer = _opset_the_evaluator_has(str(err))
            if newer is None or newer in tried:
                raise
            tried.add(newer)
            try:
                proto = version_converter.convert_version(proto, newer)
            except Exception:
                raise err from None


class memory_capped:
    """Within it, this process may grow by what the machine has available, no more: an
    allocation past that raises MemoryError. The reference evaluator is plain numpy,
    and unbounded (a 3x3 conv on an 8192x8192 image took it past 23 GB in `run --check`,
    and the kernel's OOM killer ended the process, and any other, without a word).
    Linux only (``/proc``); elsewhere, and where the limit cannot be set, no cap."""

    def __init__(self) -> None:
        self.limit_bytes = 0
        self._old = None

    def __enter__(self) -> "memory_capped":
        try:
            import resource

            available = _meminfo_bytes("MemAvailable")
            with open("/proc/self/statm", encoding="ascii") as fh:
                size = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            old = resource.getrlimit(resource.RLIMIT_AS)
            limit = size + int(0.9 * available)
            if available <= 0 or (old[0] != resource.RLIM_INFINITY and old[0] <= limit):
                return self
            resource.setrlimit(resource.RLIMIT_AS, (limit, old[1]))
            self._old, self.limit_bytes = old, int(0.9 * available)
        except (ImportError, OSError, ValueError):
            pass
        return self

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, self._old)


def _meminfo_bytes(field: str) -> int:
    """A ``/proc/meminfo`` figure in bytes (0 where it cannot be read)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _opset_the_evaluator_has(message: str) -> int | None:
    """The lowest newer opset the evaluator implements an operator in, from its error
    ("No implementation for operator 'X' domain '' and version 17, found 19, 21, None.")."""
    import re

    found = re.search(r"No implementation for operator '[^']+' domain '' and version (\d+), found ([^.]*)", message)
    if not found:
        return None
    version = int(found.group(1))
    newer = [int(v) for v in re.findall(r"\d+", found.group(2)) if int(v) > version]
    return min(newer) if newer else None
