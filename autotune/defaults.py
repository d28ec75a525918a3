"""TVM's own default schedule for a layer: the baseline we report speedups against,
and what compile uses for layers with no tuning history."""

from __future__ import annotations

from autotune.target import TargetSpec


def as_module(func):
    """Wrap one PrimFunc as the ``main`` of a module (what builders and spaces take)."""
    import tvm

    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def gpu_default_pass():
    """dlight's rule list, as relax's CUDA pipeline applies it."""
    from tvm.s_tir import dlight as dl

    return dl.ApplyDefaultSchedule(
        dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()
    )


def default_schedule(func, target: TargetSpec):
    """LLVM: the unscheduled loop nest (what ``relax.build`` emits for CPU);
    CUDA: dlight's default GPU schedule (what ``relax.build`` emits for GPU)."""
    mod = as_module(func)
    if target.kind == "cuda":
        with target.tvm_target:
            mod = gpu_default_pass()(mod)
    return mod
