"""TVM's own default schedule for a layer: the baseline we report speedups against,
and what compile uses for layers with no tuning history."""

from __future__ import annotations

from autotune.target import TargetSpec


def as_module(func):
    """Wrap one PrimFunc as the ``main`` of a module (what builders and spaces take)."""
    import tvm

    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def _rule_lists():
    """dlight's rule list as relax's CUDA pipeline applies it, then shorter lists: TVM
    0.27's GEMV rule asserts on some kernels (seen on MobileNetV2) instead of declining."""
    from tvm.s_tir import dlight as dl

    return [
        [dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()],
        [dl.gpu.Matmul(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()],
        [dl.gpu.Fallback()],
    ]


def apply_gpu_defaults(mod):
    """dlight default GPU schedules for every PrimFunc not already scheduled, one function
    at a time so that a rule crashing on one kernel does not fail the whole model.
    Must run inside the target's scope (``with target:``)."""
    import tvm
    from tvm import tirx
    from tvm.s_tir import dlight as dl

    for gvar, func in list(mod.functions.items()):
        if not isinstance(func, tirx.PrimFunc) or _is_scheduled(func):
            continue
        single = tvm.IRModule({gvar: func})
        last_err: Exception | None = None
        for rules in _rule_lists():
            try:
                scheduled = dl.ApplyDefaultSchedule(*rules)(single)
                mod.update_func(gvar, scheduled[gvar])
                last_err = None
                break
            except Exception as err:  # try the next, shorter rule list
                last_err = err
        if last_err is not None:
            raise last_err
    return mod


def _is_scheduled(func) -> bool:
    return bool(func.attrs is not None and "tirx.is_scheduled" in func.attrs and int(func.attrs["tirx.is_scheduled"]) == 1)


def default_schedule(func, target: TargetSpec):
    """LLVM: the unscheduled loop nest (what ``relax.build`` emits for CPU);
    CUDA: dlight's default GPU schedule (what ``relax.build`` emits for GPU)."""
    mod = as_module(func)
    if target.kind == "cuda":
        with target.tvm_target:
            mod = apply_gpu_defaults(mod)
    return mod
