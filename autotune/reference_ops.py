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
"""

from __future__ import annotations

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


def corrected_ops(proto) -> list[type[OpRun]]:
    """The operators to give the evaluator for ``proto``: LRN always, the flattening
    softmax family where the model's default-domain opset is below 13."""
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    ops: list[type[OpRun]] = [LRN]
    if opset is not None and opset < 13:
        ops += [Softmax, LogSoftmax, Hardmax]
    return ops
