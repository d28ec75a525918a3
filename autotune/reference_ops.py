"""Operators ONNX's reference evaluator (onnx 1.23) computes otherwise than the ONNX
spec, given to it in their place when ``run --check`` asks it for the ground truth.

A user's trial of unusual models found ``--check`` calling correct modules wrong:

- ``LRN``: its square sum loops over the batch dimension where it means the channels,
  so with a batch of 1 only channel 0 is normalized (0.15 off the spec's formula on a
  4-channel input; AlexNet's small ``alpha`` hid it inside the tolerance).
- ``Softmax``, ``LogSoftmax``, ``Hardmax`` before opset 13: it has only opset 13's
  form (along one axis), where the earlier ones flatten the input into 2-D at ``axis``
  (default 1) and normalize each row. ONNX's version converter rewrites the first two
  but not ``Hardmax``, so the earlier forms are given here.
- ``ConvTranspose`` with ``group`` above 1: it fails ("cannot reshape array of size 81
  into shape (1,2,27)") where the module was right (a helper's numpy agreed to 4e-7),
  and ``run --check`` then ended in an error. The spec's form is given for such models.
- ``BatchNormalization`` at opsets 9 to 13: taken as training (below).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from onnx.reference.op_run import OpRun


class LRN(OpRun):
    """ONNX's LRN: each channel divided by its neighbours' square sum, over channels."""

    op_domain = ""

    def _run(self, x, alpha=None, beta=None, bias=None, size=None):
        if x.ndim < 3:
            raise RuntimeError(f"LRN takes an (N, C, D1, ...) input, not shape {x.shape!r}")
        channels = x.shape[1]
        low, high = math.floor((size - 1) / 2), math.ceil((size - 1) / 2) + 1
        squares = x.astype(np.float64) ** 2
        square_sum = np.zeros_like(squares)
        for c in range(channels):
            square_sum[:, c] = squares[:, max(0, c - low):min(channels, c + high)].sum(axis=1)
        y = x / (bias + (alpha / size) * square_sum) ** beta
        return (y.astype(x.dtype),)


def _rows(x: np.ndarray, axis: int) -> np.ndarray:
    """``x`` as the 2-D matrix opsets 1 to 12 normalize: dims before ``axis`` by the rest."""
    axis = axis if axis >= 0 else axis + x.ndim
    return x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1)


class _Flattened(OpRun):
    op_domain = ""

    def _run(self, x, axis=None):
        axis = 1 if axis is None else axis
        if x.size == 0:
            return (x,)
        rows = _rows(x, axis)
        return (self._normalize(rows).reshape(x.shape).astype(x.dtype),)

    @staticmethod
    def _normalize(rows: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class Softmax(_Flattened):
    @staticmethod
    def _normalize(rows):
        e = np.exp(rows - rows.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)


class LogSoftmax(_Flattened):
    @staticmethod
    def _normalize(rows):
        shifted = rows - rows.max(axis=1, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


class Hardmax(_Flattened):
    @staticmethod
    def _normalize(rows):
        out = np.zeros_like(rows)
        out[np.arange(rows.shape[0]), rows.argmax(axis=1)] = 1
        return out


class ConvTranspose(OpRun):
    """ONNX's ConvTranspose, any number of spatial dimensions and groups: each input
    pixel scatters its kernel-weighted values into the output, ``strides`` apart, then
    ``pads`` are cut from the full result (whose size ``output_padding`` extends)."""

    op_domain = ""

    def _run(self, x, w, b=None, auto_pad=None, dilations=None, group=None, kernel_shape=None, output_padding=None,
             output_shape=None, pads=None, strides=None):
        rank = x.ndim - 2
        group = group or 1
        strides = list(strides or [1] * rank)
        dilations = list(dilations or [1] * rank)
        output_padding = list(output_padding or [0] * rank)
        kernel = list(w.shape[2:])
        spatial = list(x.shape[2:])
        full = [s * (n - 1) + op + (k - 1) * d + 1 for s, n, op, k, d in zip(strides, spatial, output_padding, kernel, dilations)]
        if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            # the spec's total padding to the output shape (given, or the input's times the
            # strides), split by auto_pad
            out = list(output_shape)[-rank:] if output_shape is not None else [n * s for n, s in zip(spatial, strides)]
            total = [max(0, f - o) for f, o in zip(full, out)]
            first = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total]
            pads = first + [t - f for t, f in zip(total, first)]
        pads = list(pads or [0] * (2 * rank))
        in_per_group, out_per_group = x.shape[1] // group, w.shape[1]
        xs = x.astype(np.float64)
        ws = w.astype(np.float64)
        y = np.zeros((x.shape[0], out_per_group * group, *full), dtype=np.float64)
        for g in range(group):
            xg = xs[:, g * in_per_group:(g + 1) * in_per_group]
            wg = ws[g * in_per_group:(g + 1) * in_per_group]
            for offset in itertools.product(*(range(k) for k in kernel)):
                # every input pixel's contribution at this kernel offset: (n, m, *spatial)
                part = np.einsum("nc...,cm->nm...", xg, wg[(slice(None), slice(None), *offset)])
                where = tuple(slice(o * d, o * d + s * (n - 1) + 1, s)
                              for o, d, s, n in zip(offset, dilations, strides, spatial))
                y[(slice(None), slice(g * out_per_group, (g + 1) * out_per_group), *where)] += part
        cut = tuple(slice(p, f - e) for p, e, f in zip(pads[:rank], pads[rank:], full))
        y = y[(slice(None), slice(None), *cut)]
        if b is not None:
            y += b.astype(np.float64).reshape(1, -1, *([1] * rank))
        return (y.astype(x.dtype),)


class BatchNormalization(OpRun):
    """Inference batch norm, for opsets 9 to 13: they have no ``training_mode``, and the
    evaluator, filling in the default momentum, took every node as training and normalized
    by the batch's own statistics (a helper's fuzzing: correct modules read 7.08 off)."""

    op_domain = ""

    def _run(self, x, scale, bias, mean, var, epsilon=None, momentum=None, spatial=None, training_mode=None):
        eps = 1e-5 if epsilon is None else epsilon
        shape = (1, -1) + (1,) * (x.ndim - 2)
        y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * scale.reshape(shape) + bias.reshape(shape)
        return (y.astype(x.dtype),)


def corrected_ops(proto) -> list[type[OpRun]]:
    """The operators to give the evaluator for ``proto``: LRN always, the flattening
    softmax family where the model's default-domain opset is below 13, and the spec's
    ConvTranspose where a node has groups."""
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    ops: list[type[OpRun]] = [LRN]
    if opset is not None and opset < 13:
        ops += [Softmax, LogSoftmax, Hardmax]
    if opset is not None and 9 <= opset < 14 and all(len(node.output) == 1 for node in _nodes(proto.graph)
                                                     if node.op_type == "BatchNormalization"):
        ops.append(BatchNormalization)
    if any(node.op_type == "ConvTranspose" and any(a.name == "group" and a.i > 1 for a in node.attribute)
           for node in _nodes(proto.graph)):
        ops.append(ConvTranspose)
    return ops


def _nodes(graph):
    """Every node of ``graph`` and of the graphs its nodes hold (an If's branches)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _nodes(sub)
