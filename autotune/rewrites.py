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
- A half-precision (float16, bfloat16) convolution or matmul accumulates in float32 and
  rounds its result to the model's type once, as cuDNN and cuBLAS do by default. TVM's
  frontend gives them the inputs' type as their accumulator: a float16 model of a conv
  and a 14,400-deep dense layer then came out 3% off a float64 reference at its softmax
  (0.0030 absolute), where ONNX's reference evaluator was 8e-5 off. TVM's own
  ``ToMixedPrecision`` does the same to a float16 model, but also turns float32
  operators into float16, which a model that keeps some in float32 must not have.
- A half-precision batch norm that stays an operator (``--batch-norm separate``) runs
  in float32 between casts. TOPI's ``batch_norm`` adds its float epsilon to the
  variance, which promotes to float32, so its output is float32 where the operator
  says float16; fused with a ReLU6 after it (MobileNetV2), the kernel stored that
  float32 into a float16 buffer, and TVM refused it as ill-formed (``layers``,
  ``tune`` and ``compile`` stopped with its traceback).
- A bfloat16 layer norm runs in float32 between casts: TVM lowers it in float32 and
  float16 only, and a bfloat16 transformer stopped at "lowering the model to TIR".
- A bfloat16 ArgMax or ArgMin reads its input widened to float32, which holds every
  bfloat16 value exactly, so the index is the same: TVM's bfloat16 legalization widened
  the running maximum but not the variable it is bound to, and the build stopped with an
  internal check (a bfloat16 seq2seq's greedy decode).
"""

from __future__ import annotations


def kernel_rewrites():
    """The module pass that applies every rewrite above in one walk of the module."""
    import tvm
    from tvm import relax, topi
    from tvm.relax.expr_functor import PyExprMutator, mutator

    accumulating = _accumulating_ops(relax)

    @mutator
    class _Rewrites(PyExprMutator):
        def __init__(self, mod):
            super().__init__(mod)
            #: each half-precision batch norm's tuple, as computed in float32 and cast back
            self._half_batch_norms = {}

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not isinstance(call.op, tvm.ir.Op):
                return call
            if call.op.name in accumulating:
                half = _half_accumulator(call)
                if half is not None:
                    make, fields = accumulating[call.op.name]
                    wide = make(*call.args, **{f: getattr(call.attrs, f) for f in fields}, out_dtype=ACCUMULATOR)
                    return relax.op.astype(wide, half)
                return call
            if call.op.name == "relax.nn.layer_norm" and str(getattr(call.args[0].ty, "dtype", "")) == "bfloat16":
                a = call.attrs
                wide = relax.op.nn.layer_norm(*(relax.op.astype(arg, ACCUMULATOR) for arg in call.args), a.axes,
                                              a.epsilon, a.center, a.scale)
                return relax.op.astype(wide, "bfloat16")
            if call.op.name in ("relax.argmax", "relax.argmin") and str(getattr(call.args[0].ty, "dtype", "")) == "bfloat16":
                make = relax.op.argmax if call.op.name == "relax.argmax" else relax.op.argmin
                return make(relax.op.astype(call.args[0], ACCUMULATOR), call.attrs.axis, call.attrs.keepdims)
            if call.op.name == "relax.nn.softmax":
                return self.builder_.call_te(topi.nn.fast_softmax, call.args[0], call.attrs.axis)
            if call.op.name == "relax.take" and call.attrs.mode == "fast":
                return relax.op.take(call.args[0], call.args[1], call.attrs.axis, mode="clip")
            return call

        def visit_var_binding_(self, binding):
            from autotune.half_precision import HALF_TYPES

            value = binding.value
            if isinstance(value, relax.TupleGetItem) and value.tuple_value in self._half_batch_norms:
                # read straight from the widened batch norm, with no alias between: through
                # the tuple, or an alias, fusion stopped (a ReLU6 after went into a kernel of its own)
                return self._bind_as(binding.var, self._half_batch_norms[value.tuple_value][value.index])
            if not (isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.nn.batch_norm"):
                return super().visit_var_binding_(binding)
            call = self.visit_expr(value)
            dtype, a = str(getattr(call.args[0].ty, "dtype", "")), call.attrs
            if dtype not in HALF_TYPES or a.training:
                return super().visit_var_binding_(binding)
            wide = self.builder_.emit(relax.op.nn.batch_norm(
                *(relax.op.astype(arg, ACCUMULATOR) for arg in call.args), a.axis, a.epsilon, a.center, a.scale,
                a.momentum, a.training,
            ))
            out = self.builder_.emit(relax.op.astype(relax.TupleGetItem(wide, 0), dtype))
            # in inference the moving statistics come out as they went in
            fields = (out, call.args[3], call.args[4])
            self._half_batch_norms[binding.var] = fields
            return self._bind_as(binding.var, relax.Tuple(fields))

        def _bind_as(self, var, value):
            """``value`` in place of ``var``'s old value. A variable of the dataflow block
            is replaced where it is used (no alias between, which fusion would stop at);
            one the block outputs keeps its name, as what follows the block reads it (a
            dataflow variable of ours in its place was read outside the block)."""
            if isinstance(var, relax.DataflowVar):
                self.set_var_remap(var, value if isinstance(value, relax.Var) else self.builder_.emit(value))
            else:
                self.builder_.emit_normalized(relax.VarBinding(var, value))

        def visit_tuple_getitem_(self, op):
            fields = self._half_batch_norms.get(op.tuple_value)
            if fields is not None:
                return fields[op.index]
            return super().visit_tuple_getitem_(op)

    @tvm.transform.module_pass(opt_level=0, name="AutotuneKernelRewrites")
    def rewrite(mod, _ctx):
        rewriter = _Rewrites(mod)
        for gvar, func in mod.functions_items():
            if isinstance(func, relax.Function):
                rewriter.builder_.update_func(gvar, rewriter.visit_expr(func))
        return rewriter.builder_.get()

    return rewrite


#: What a half-precision convolution or matmul accumulates in.
ACCUMULATOR = "float32"
_CONV = ("strides", "padding", "dilation", "groups", "data_layout", "kernel_layout", "out_layout")


def _accumulating_ops(relax) -> dict:
    """Relax operators that reduce products, by name: their constructor and the
    attributes it takes besides ``out_dtype``."""
    nn = relax.op.nn
    transposed = (*_CONV[:2], "output_padding", *_CONV[2:])
    return {
        "relax.nn.conv1d": (nn.conv1d, _CONV),
        "relax.nn.conv2d": (nn.conv2d, _CONV),
        "relax.nn.conv3d": (nn.conv3d, _CONV),
        "relax.nn.conv1d_transpose": (nn.conv1d_transpose, transposed),
        "relax.nn.conv2d_transpose": (nn.conv2d_transpose, transposed),
        "relax.matmul": (relax.op.matmul, ()),
    }


def _half_accumulator(call) -> str | None:
    """The half type ``call`` accumulates in, when its inputs are half and its
    accumulator is their type (none given, or the same); None otherwise."""
    from autotune.half_precision import HALF_TYPES

    dtypes = {str(getattr(arg.ty, "dtype", "")) for arg in call.args}
    if len(dtypes) != 1:
        return None
    (dtype,) = dtypes
    out = call.attrs.out_dtype
    if dtype in HALF_TYPES and (out is None or str(out) in ("", "void", dtype)):
        return dtype
    return None
