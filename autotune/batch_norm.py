"""Fold inference batch norm into the convolution before it, in the ONNX graph.

``BN(conv(x, W) + b) = conv(x, W * s) + (b - mean) * s + beta`` with
``s = gamma / sqrt(var + eps)`` per output channel, so the normalization costs nothing at
run time and the conv's epilogue is one bias add. The fold is done here, on the
initializers with numpy, because the libraries that offer it do more than fold:
onnxsim's optimizer runs it only together with its other rewrites (the installed build
fuses attention into an ``Attention`` op that TVM's frontend cannot import), ONNX's own
optimizer leaves the arithmetic as graph nodes for a constant folder, and TVM's
``FoldBatchnormToConv2D`` needs ``FoldConstant`` after it, which compiles every weight
product (6-16 s per model load here).
"""

from __future__ import annotations

from collections import Counter
from typing import Any


def fold_into_conv(proto) -> tuple[Any, int]:
    """A copy of ``proto`` with each foldable batch norm folded into its conv; and how many.

    Foldable: a ``Conv`` whose only consumer is a ``BatchNormalization`` in inference mode
    (one output), with the weight, bias and every batch norm parameter an initializer, and
    the conv's output not a graph output. Anything else is left as it was.
    """
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.ModelProto()
    model.CopyFrom(proto)
    graph = model.graph
    nodes = list(graph.node)
    inits = {t.name: t for t in graph.initializer}
    consumers = Counter(name for node in nodes for name in _reads(node))
    graph_outputs = {o.name for o in graph.output}
    producer = {out: i for i, node in enumerate(nodes) for out in node.output}

    drop: set[int] = set()
    for i, bn in enumerate(nodes):
        if bn.op_type != "BatchNormalization" or len(bn.output) != 1 or _attr(bn, "training_mode", 0):
            continue
        conv = nodes[producer[bn.input[0]]] if bn.input[0] in producer else None
        if conv is None or conv.op_type != "Conv":
            continue
        if consumers[conv.output[0]] != 1 or conv.output[0] in graph_outputs:
            continue
        arrays = _fold_operands(conv, bn, inits)
        if arrays is None:
            continue
        weight, bias, gamma, beta, mean, var, epsilon = arrays
        dtype = onnx.helper.tensor_dtype_to_np_dtype(inits[conv.input[1]].data_type)
        with np.errstate(all="ignore"):  # judged just below, not warned of on stderr
            scale = gamma / np.sqrt(var + epsilon)
            new_weight = (weight * scale.reshape(-1, *([1] * (weight.ndim - 1)))).astype(dtype)
            new_bias = ((bias - mean) * scale + beta).astype(dtype)
        if not (np.isfinite(new_weight).all() and np.isfinite(new_bias).all()) and all(
                np.isfinite(a).all() for a in arrays[:-1]):
            continue  # the product overflows the weights' type where conv and batch norm apart may not
        # new initializers under new names: the old ones may be shared with other nodes
        names = []
        for suffix, array in (("bn_weight", new_weight), ("bn_bias", new_bias)):
            name = _fresh(inits, f"{conv.output[0]}_{suffix}")
            inits[name] = numpy_helper.from_array(array, name)
            graph.initializer.append(inits[name])
            names.append(name)
        del conv.input[1:]
        conv.input.extend(names)
        conv.output[0] = bn.output[0]
        drop.add(i)

    if drop:
        kept = [node for i, node in enumerate(nodes) if i not in drop]
        del graph.node[:]
        graph.node.extend(kept)
        used = {name for node in graph.node for name in _reads(node)} | graph_outputs
        _remove_named(graph.initializer, {t.name for t in graph.initializer} - used)
        _remove_named(graph.input, {t for t in inits if t not in used})  # old IRs list initializers as inputs
    return model, len(drop)


#: The weight types a fold keeps exactly enough: integer or boolean weights are not a
#: float conv's, and folding would round the normalization into them.
_FLOAT_TYPES = frozenset({1, 10, 11, 16})  # FLOAT, FLOAT16, DOUBLE, BFLOAT16


def _fold_operands(conv, bn, inits) -> tuple | None:
    """The conv's weight and bias and the batch norm's gamma, beta, mean, var (float64)
    and epsilon, where they make a fold that computes what the two nodes did; else None.

    The checker passes a model whose initializers disagree in shape with each other (it
    checks no shapes of constants), and the fold had broadcast such ones wrongly or ended
    in numpy's ValueError: those, and any that is not a float, are left for TVM to read."""
    import numpy as np
    from onnx import numpy_helper

    if len(conv.input) < 2 or len(bn.input) != 5 or not all([conv.input[1], *bn.input[1:5]]):
        return None
    names = [conv.input[1], *(conv.input[2:3] if len(conv.input) > 2 and conv.input[2] else []), *bn.input[1:5]]
    if not all(name in inits and inits[name].data_type in _FLOAT_TYPES for name in names):
        return None
    epsilon = _attr(bn, "epsilon", 1e-5)
    if not isinstance(epsilon, float):
        return None
    try:
        weight, *vectors = (numpy_helper.to_array(inits[name]).astype(np.float64) for name in names)
    except ValueError:  # raw data of the wrong length for its dims
        return None
    channels = weight.shape[0] if weight.ndim >= 3 else None
    if channels is None or any(v.shape != (channels,) for v in vectors):
        return None
    bias = vectors[0] if len(vectors) == 5 else np.zeros(channels)
    return (weight, bias, *vectors[-4:], epsilon)


def _reads(node):
    """The names ``node`` reads, with those its subgraphs (If, Loop, Scan bodies) read from
    the outer scope: a conv output read there is not the batch norm's alone."""
    yield from node.input
    for attr in node.attribute:
        for graph in [attr.g] if attr.HasField("g") else list(attr.graphs):
            for inner in graph.node:
                yield from _reads(inner)


def _remove_named(field, names: set[str]) -> None:
    for item in [item for item in field if item.name in names]:
        field.remove(item)


def _attr(node, name: str, default):
    from onnx import helper

    for attr in node.attribute:
        if attr.name == name:
            return helper.get_attribute_value(attr)
    return default


def _fresh(taken, base: str) -> str:
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    return name
