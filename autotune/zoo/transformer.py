"""A single transformer encoder block (post-norm, like torch.nn.TransformerEncoderLayer).

Batched MatMuls, Softmax, LayerNormalization and Erf-based GELU: the attention
workload, expressed only with ops TVM's Relax ONNX frontend converts directly.
"""

from __future__ import annotations

import math

import numpy as np

from autotune.zoo.graph import GraphBuilder

D_MODEL = 256
NUM_HEADS = 4
D_FF = 1024


def _layer_norm(g: GraphBuilder, x: str, name: str, output: str | None = None) -> str:
    d = g.shapes[x][-1]
    scale = g.normal(f"{name}.weight", (d,), 0.05, mean=1.0)
    bias = g.normal(f"{name}.bias", (d,), 0.05)
    return g.node("LayerNormalization", [x, scale, bias], g.shapes[x], output=output,
                  axis=-1, epsilon=1e-5)


def _gelu(g: GraphBuilder, x: str) -> str:
    """Exact GELU, 0.5 * x * (1 + erf(x / sqrt(2))), the pattern torch exports at opset 17
    (the fused Gelu op only exists from opset 20)."""
    shape = g.shapes[x]
    if "gelu.inv_sqrt2" not in g.shapes:
        g.const("gelu.inv_sqrt2", np.array(1.0 / math.sqrt(2.0), dtype=np.float32))
        g.const("gelu.one", np.array(1.0, dtype=np.float32))
        g.const("gelu.half", np.array(0.5, dtype=np.float32))
    e = g.node("Erf", [g.node("Mul", [x, "gelu.inv_sqrt2"], shape)], shape)
    e = g.node("Add", [e, "gelu.one"], shape)
    return g.node("Mul", [g.node("Mul", [x, e], shape), "gelu.half"], shape)


def _self_attention(g: GraphBuilder, x: str, name: str) -> str:
    b, s, d = g.shapes[x]
    h, dh = NUM_HEADS, d // NUM_HEADS

    def heads(t: str, proj: str, perm: list[int]) -> str:
        r = g.reshape(t, (b, s, h, dh), name=f"{name}.{proj}.split")
        out_shape = tuple((b, s, h, dh)[p] for p in perm)
        return g.node("Transpose", [r], out_shape, perm=perm)

    q = heads(g.dense(x, d, name=f"{name}.q_proj"), "q", [0, 2, 1, 3])  # [b, h, s, dh]
    k = heads(g.dense(x, d, name=f"{name}.k_proj"), "k", [0, 2, 3, 1])  # [b, h, dh, s]
    v = heads(g.dense(x, d, name=f"{name}.v_proj"), "v", [0, 2, 1, 3])  # [b, h, s, dh]
    scores = g.node("MatMul", [q, k], (b, h, s, s))
    scale = g.const(f"{name}.scale", np.array(1.0 / math.sqrt(dh), dtype=np.float32))
    scores = g.node("Mul", [scores, scale], (b, h, s, s))
    probs = g.node("Softmax", [scores], (b, h, s, s), axis=-1)
    ctx = g.node("MatMul", [probs, v], (b, h, s, dh))
    ctx = g.node("Transpose", [ctx], (b, s, h, dh), perm=[0, 2, 1, 3])
    ctx = g.reshape(ctx, (b, s, d), name=f"{name}.merge")
    return g.dense(ctx, d, name=f"{name}.out_proj")


def transformer(g: GraphBuilder, x: str, output: str) -> str:
    """Encoder block on [batch, seq, 256]: x = LN(x + MHA(x)); x = LN(x + FFN(x))."""
    y = _layer_norm(g, g.add(x, _self_attention(g, x, "self_attn")), "norm1")
    ff = _gelu(g, g.dense(y, D_FF, name="linear1", gain=2.0))
    ff = g.dense(ff, D_MODEL, name="linear2")
    return _layer_norm(g, g.add(y, ff), "norm2", output=output)
