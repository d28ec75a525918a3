"""Numerical check of a tuned kernel against the untuned one, before it is trusted.

A schedule is only a loop transformation, so the tuned kernel must compute what the
plain loop nest computes. The reference always runs on the host CPU (LLVM), so the
check needs nothing beyond the device the candidate itself runs on. With ``--rpc`` that
device is the server's (:mod:`autotune.remote`): the candidate is built here and run
there, where it was timed, and the outputs come back to be compared here.
"""

from __future__ import annotations

import numpy as np

from autotune.remote import RemoteDevice
from autotune.target import TargetSpec


#: One unit in the last place at 1.0 of the narrow floating types. Two right computations
#: of one output that sum in different orders (a schedule's reduction against the plain
#: loop's; our kernel against ONNX's evaluator) round to neighbouring values of the
#: output's type: a bfloat16 neighbour lies 0.8% away, eight times a float32 check's rtol.
UNIT_ROUNDOFF = {"float16": 2.0**-10, "bfloat16": 2.0**-7}


def widened_rtol(rtol: float, *arrays: np.ndarray) -> float:
    """``rtol``, or two units in the last place of the narrowest half-precision array
    among ``arrays`` where that is more."""
    return max(rtol, *(2 * UNIT_ROUNDOFF.get(str(a.dtype), 0.0) for a in arrays))


def outputs_match(got: np.ndarray, want: np.ndarray, *, rtol: float = 1e-3, atol: float = 1e-4, widen: bool = True) -> bool:
    """Whether two computations of one output agree: within ``rtol``/``atol``, with
    ``widen`` the rtol widened for a half-precision output (:func:`widened_rtol`),
    compared in float64 (numpy has no bfloat16 arithmetic of its own)."""
    if got.shape != want.shape:
        return False
    rtol = widened_rtol(rtol, got, want) if widen else rtol
    return bool(np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True))


def max_abs_error(got: np.ndarray, want: np.ndarray) -> float:
    """The largest difference, a NaN (or an infinity) where both have one counted as
    agreement (as :func:`outputs_match` counts it; an all-NaN output read "max abs error
    nan"), and a NaN on one side alone as an infinite error."""
    if got.shape != want.shape:
        return float("inf")
    # at least 1-d: a 0-d output's difference is a numpy scalar, which takes no masked
    # assignment (run --check on a ReduceSum to a scalar ended in a TypeError)
    a, b = np.atleast_1d(got.astype(np.float64)), np.atleast_1d(want.astype(np.float64))
    with np.errstate(invalid="ignore"):
        diff = np.abs(a - b)
    diff[(np.isnan(a) & np.isnan(b)) | (a == b)] = 0.0  # inf against inf is no error either
    diff[np.isnan(diff)] = np.inf
    return float(np.max(diff)) if diff.size else 0.0


#: The range integer data is drawn from: small, so that a sum of products stays exact in
#: any accumulator type a schedule might pick (and far from int32's wrap).
INT_DATA_RANGE = (-8, 8)


def random_args(func, seed: int = 0) -> list[np.ndarray]:
    """Seeded inputs for every parameter (outputs included: they are overwritten)."""
    rng = np.random.default_rng(seed)
    indices = index_params(func)
    arrays = []
    for param in func.params:
        ty = param.ty
        shape = [int(d) for d in ty.shape]
        dtype = str(ty.dtype)
        if dtype.startswith("float") or dtype == "bfloat16":
            arrays.append(rng.uniform(-1.0, 1.0, size=shape).astype(dtype))
        elif dtype == "bool":  # both branches of a Where (all False took one, and a wrong schedule of the other passed)
            arrays.append(rng.integers(0, 2, size=shape).astype(bool))
        elif str(param.name) in indices:  # indices: zeros are always in range
            arrays.append(np.zeros(shape, dtype=dtype))
        else:  # integer data (an int32 matmul): all zeros, any schedule's output matched the reference's zeros
            low, high = INT_DATA_RANGE
            low = max(low, int(np.iinfo(dtype).min))
            arrays.append(rng.integers(low, high + 1, size=shape).astype(dtype))
    return arrays


def index_params(func) -> set[str]:
    """Names of ``func``'s parameters read inside another buffer's indices (a gather's
    positions): what they hold decides where the kernel reads, and only some values are
    in range. Found in the blocks' declared read regions."""
    from tvm.s_tir import Schedule

    params = {str(p.name) for p in func.params}
    sch = Schedule(func)
    found: set[str] = set()
    pending = list(sch.get_child_blocks(sch.get_sblock("root")))
    while pending:
        rv = pending.pop()
        block = sch.get(rv)
        pending += sch.get_child_blocks(rv)
        for region in block.reads:
            source = _source_name(region)
            for rng in region.region:
                found |= {name for name in _loaded(rng.min) | _loaded(rng.extent) if name != source}
    return found & params


def _source_name(node) -> str | None:
    """The buffer a region or load reads: ``source`` in TVM 0.27, ``buffer`` before."""
    source = getattr(node, "source", None)
    source = getattr(node, "buffer", None) if source is None else source
    return None if source is None else str(source.name)


#: The fields of a TIR expression that hold its operands.
_OPERANDS = ("a", "b", "value", "args", "indices", "condition", "true_value", "false_value", "body", "base", "stride")


def _loaded(expr) -> set[str]:
    """Names of the buffers ``expr`` reads, at any depth."""
    names: set[str] = set()
    pending = [expr]
    while pending:
        node = pending.pop()
        if node is None or isinstance(node, (int, float, str)):
            continue
        if type(node).__name__ in ("TensorLoad", "BufferLoad"):
            name = _source_name(node)
            if name is not None:
                names.add(name)
        for field in _OPERANDS:
            try:
                child = getattr(node, field)
            except Exception:  # an FFI object without that field
                continue
            if isinstance(child, (list, tuple)) or type(child).__name__ == "Array":
                pending += list(child)
            elif hasattr(child, "same_as"):  # a TVM node (a load is callable: no test of that)
                pending.append(child)
    return names


def run_module(mod, target, device, arrays: list[np.ndarray], *, remote: RemoteDevice | None = None) -> list[np.ndarray]:
    """Build ``mod`` here and run it on ``device``: a local one, or with ``remote`` the
    ``--rpc`` server's (the library is uploaded there and loaded first)."""
    import tvm

    from autotune.nvrtc_headers import header_cache_for

    # NVRTC's parsed headers, as in the build workers: a tune verifies each layer's winner
    with target, header_cache_for(target.kind.name):
        lib = tvm.compile(mod, target=target)
    if remote is not None:
        lib = remote.load(lib, "verify", target)
    tensors = [tvm.runtime.tensor(a, device) for a in arrays]
    lib["main"](*tensors)
    return [t.numpy() for t in tensors]


def check(
    mod, func, target: TargetSpec, *, remote: RemoteDevice | None = None, seed: int = 0, rtol: float = 1e-3, atol: float = 1e-4
) -> str | None:
    """None when ``mod`` (scheduled) matches ``func`` (reference); else what differs.

    With ``remote`` the candidate runs on that device. Its session is had before the
    candidate is touched: not getting one (an :class:`AutotuneError`) says nothing about
    the candidate, so it is raised, not returned as a failed check. The same holds when
    the candidate fails there and the server then no longer gives a session.
    """
    import tvm

    from autotune.defaults import as_module

    arrays = random_args(func, seed)
    device = target.device() if remote is None else remote.device()
    failure = None
    try:
        got = run_module(mod, target.tvm_target, device, arrays, remote=remote)
    except Exception as err:  # a schedule that builds in a worker but fails here
        where = " on the RPC server" if remote is not None else ""
        failure = f"candidate failed to run{where}: {str(err).strip().splitlines()[-1][:300]}"
    if failure is not None:
        if remote is not None:
            # A crash may have ended the session: the next candidate gets a fresh one, had
            # now, once this one's last references are gone (the server serves one session
            # at a time). A server that no longer answers at all is no fault of the
            # candidate: that AutotuneError stops the tune instead of failing the check.
            del device
            remote.close()
            remote.device()
        return failure
    host = tvm.target.Target({"kind": "llvm"})
    want = run_module(as_module(func), host, tvm.cpu(0), arrays)
    for i, (g, w) in enumerate(zip(got, want)):
        if not outputs_match(g, w, rtol=rtol, atol=atol):
            return f"output {i} differs from the reference: max abs error {max_abs_error(g, w):.3g}"
    return None
