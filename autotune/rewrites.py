"""Rewrites of the imported Relax module, before it is lowered to kernels.

Each replaces one operator's lowering by one TVM already has, where the default is
slow or unsafe on our targets. They run for every target, so that a layer's kernel, and
with it its workload key, does not depend on what it is tuned for.

- Softmax becomes TOPI's ``fast_softmax``: the same four kernels (max, exp, sum,
  normalize) with ``exp`` as TVM's range-reduced polynomial instead of a call to the C
  library's ``expf`` per element, which no schedule vectorizes. On the znver5 the
  attention-sized softmax (4 x 128 x 128) took 49 us instead of 144 with TVM's default
  loop nest, and its largest error against a float64 softmax stayed at float32
  rounding (4.2e-6 relative against 4.0e-6 with ``expf``, over inputs scaled 0.01 to
  1e4). Only softmax: relax's ``FastMathTransform`` also replaces ``erf`` and ``tanh``
  (GELU, LSTM gates), which was not measured here.
- ``take`` (ONNX ``Gather``: embedding lookups) in TVM's default ``fast`` mode reads
  wherever an index points, so an id past the table reads stray memory or crashes the
  process, and TVM warns so on every import. ``clip`` mode clamps each index into the
  table first: one min and max per index, and no out-of-bounds read whatever the
  input. (``run`` refuses such ids up front where it can tell; this covers the rest.)
"""

from __future__ import annotations


def kernel_rewrites():
    """The module pass that applies every rewrite above in one walk of the module."""
    import tvm
    from tvm import relax, topi
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class _Rewrites(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not isinstance(call.op, tvm.ir.Op):
                return call
            if call.op.name == "relax.nn.softmax":
                return self.builder_.call_te(topi.nn.fast_softmax, call.args[0], call.attrs.axis)
            if call.op.name == "relax.take" and call.attrs.mode == "fast":
                return relax.op.take(call.args[0], call.args[1], call.attrs.axis, mode="clip")
            return call

    @tvm.transform.module_pass(opt_level=0, name="AutotuneKernelRewrites")
    def rewrite(mod, _ctx):
        rewriter = _Rewrites(mod)
        for gvar, func in mod.functions_items():
            if isinstance(func, relax.Function):
                rewriter.builder_.update_func(gvar, rewriter.visit_expr(func))
        return rewriter.builder_.get()

    return rewrite
