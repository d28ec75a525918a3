"""The zoo layers a benchmark argument names: ``MODEL:INDEX`` for a target, ``--source``
entries for history. A bad name ends the benchmark with one line before anything is
measured or written.
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def layers_of(model: str, size: int):
    """A model's tunable layers, decomposed once per (model, size): every layer spec,
    target or kept out, looks its layer up here."""
    from autotune import decompose, frontend

    # batch norm separate: the layering every recorded run and history file was made in
    _, mod = frontend.load_and_fuse(model, size=size, batch_norm="separate")
    return tuple(l for l in decompose.decompose(mod) if l.tunable and l.op_class in ("conv2d", "depthwise_conv2d", "dense"))


def model_layers(model: str, size: int):
    """:func:`layers_of`, or the benchmark ends with one line naming what is wrong (an
    unknown model, a size it cannot take)."""
    from autotune.errors import AutotuneError

    try:
        return layers_of(model, size)
    except AutotuneError as err:
        raise SystemExit(f"error: {err}") from None


def layer_at(spec: str, size: int):
    """The tunable layer ``MODEL:INDEX`` names (an index into :func:`layers_of`); a bad
    spec ends the benchmark with one line, before anything is measured or written."""
    model, sep, idx = spec.partition(":")
    if not (model and sep and idx.isdigit()):
        raise SystemExit(f"error: {spec!r} is not MODEL:INDEX (for example resnet18:0)")
    layers = model_layers(model, size)
    if int(idx) >= len(layers):
        raise SystemExit(f"error: {model} has {len(layers)} tunable layers at size {size}, so no layer {idx}")
    return layers[int(idx)]


def source_layers(spec: str, size: int):
    """The layers a ``--source`` entry names: ``MODEL`` (its every tunable layer at the
    experiment's image size), ``MODEL@SIZE`` (at another size), ``MODEL:INDEX`` or
    ``MODEL@SIZE:INDEX`` (one of them). So history can hold a target layer's counterpart
    at another input resolution without the rest of that model (run 38)."""
    head, sep, idx = spec.partition(":")
    model, at, side = head.partition("@")
    if not model or (at and not side.isdigit()) or (sep and not idx.isdigit()):
        raise SystemExit(f"error: --source {spec!r} is not MODEL, MODEL@SIZE, MODEL:INDEX or MODEL@SIZE:INDEX"
                         " (for example resnet50@112:0)")
    size = int(side) if at else size
    return (layer_at(f"{model}:{idx}", size),) if sep else model_layers(model, size)
