"""The bundled model zoo: ONNX models built in code with seeded random weights.

Tuning only needs a model's architecture (operator types and static shapes),
so the zoo builds the real torchvision / transformer architectures offline
instead of downloading trained weights. Same name + arguments + seed always
gives a byte-identical model, so tuning records can be tied to a workload.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx

from autotune.errors import AutotuneError
from autotune.half_precision import ZOO_DTYPES
from autotune.zoo.alexnet import MIN_SIZE as ALEXNET_MIN_SIZE
from autotune.zoo.alexnet import alexnet
from autotune.zoo.autoencoder import SIDE_MULTIPLE, autoencoder
from autotune.zoo.dqn import ACTIONS, FRAMES
from autotune.zoo.dqn import MIN_SIZE as DQN_MIN_SIZE
from autotune.zoo.dqn import dqn
from autotune.zoo.graph import GraphBuilder
from autotune.zoo.memnet import VOCAB as MEMNET_VOCAB
from autotune.zoo.memnet import memnet
from autotune.zoo.mobilenet import mobilenetv2
from autotune.zoo.resnet import resnet18, resnet50
from autotune.zoo.seq2seq import VOCAB as SEQ2SEQ_VOCAB
from autotune.zoo.seq2seq import seq2seq
from autotune.zoo.speech import CHARACTERS, FEATURES, speech
from autotune.zoo.transformer import D_MODEL, transformer
from autotune.zoo.vgg import vgg11

__all__ = ["ZooEntry", "list_models", "get_entry", "build_model", "export_model"]

INPUT_NAME = "input"
OUTPUT_NAME = "output"
NUM_CLASSES = 1000


@dataclass(frozen=True)
class ZooEntry:
    """What a caller needs to know to feed a zoo model without building it first.

    ``default_size`` / ``min_size`` are the image side for CNNs and the
    sequence length otherwise. ``kind`` is ``"image"`` (NCHW input
    with ``channels`` channels, ``outputs`` scores out), ``"reconstruction"``
    (an image in, the same shape out), ``"sequence"`` ([batch, seq, channels] in,
    [batch, seq, outputs or channels] out), ``"translation"`` (int64 token ids
    [batch, seq] below ``vocab`` in, [batch, seq, outputs] scores out) or
    ``"language_model"`` (token ids [batch, seq] in, [batch, outputs] scores of the
    next token out).
    """

    name: str
    description: str
    input_name: str
    default_size: int
    min_size: int
    kind: str = "image"
    channels: int = 3
    outputs: int | None = None
    vocab: int | None = None

    @property
    def input_dtype(self) -> str:
        """``int64`` for models fed token ids, ``float32`` otherwise."""
        return "int64" if self.vocab else "float32"

    def input_shape(self, batch_size: int, size: int) -> tuple[int, ...]:
        """Static shape of the ``input`` tensor for this batch size and size."""
        if self.vocab:
            return (batch_size, size)
        if self.kind == "sequence":
            return (batch_size, size, self.channels)
        return (batch_size, self.channels, size, size)

    def output_shape(self, batch_size: int, size: int) -> tuple[int, ...]:
        """Static shape of the ``output`` tensor (logits for CNNs, hidden states otherwise)."""
        if self.kind in ("sequence", "translation"):
            return (batch_size, size, self.outputs or self.channels)
        if self.kind == "reconstruction":
            return self.input_shape(batch_size, size)
        return (batch_size, self.outputs or NUM_CLASSES)


_Builder = Callable[[GraphBuilder, str, str], str]

_REGISTRY: dict[str, tuple[ZooEntry, _Builder]] = {
    e.name: (e, fn)
    for e, fn in (
        (ZooEntry("resnet18", "ResNet-18 (basic blocks, BatchNorm), torchvision layout",
                  INPUT_NAME, 224, 32), resnet18),
        (ZooEntry("resnet50", "ResNet-50 (bottleneck blocks, BatchNorm), torchvision v1.5 layout",
                  INPUT_NAME, 224, 32), resnet50),
        (ZooEntry("vgg11", "VGG-11 (config A, no BatchNorm), torchvision layout",
                  INPUT_NAME, 224, 32), vgg11),
        (ZooEntry("alexnet", "AlexNet, torchvision variant",
                  INPUT_NAME, 224, ALEXNET_MIN_SIZE), alexnet),
        (ZooEntry("mobilenetv2", "MobileNetV2 (inverted residuals, depthwise convs, ReLU6)",
                  INPUT_NAME, 224, 32), mobilenetv2),
        (ZooEntry("transformer",
                  "Transformer encoder block (d_model 256, 4 heads, FFN 1024, GELU); "
                  "size is the sequence length",
                  INPUT_NAME, 128, 1, kind="sequence", channels=D_MODEL), transformer),
        (ZooEntry("dqn", f"Deep Q-network (Nature 2015 Atari agent): {FRAMES} stacked frames in, "
                  f"{ACTIONS} action values out", INPUT_NAME, 84, DQN_MIN_SIZE, channels=FRAMES,
                  outputs=ACTIONS), dqn),
        (ZooEntry("autoencoder", "Convolutional autoencoder: 3 strided convs down, 3 ConvTranspose up "
                  f"(size a multiple of {SIDE_MULTIPLE})", INPUT_NAME, 64, SIDE_MULTIPLE,
                  kind="reconstruction"), autoencoder),
        (ZooEntry("speech", f"Speech acoustic model: {FEATURES} log-mel features per frame, 2 bidirectional "
                  f"LSTMs (256), {CHARACTERS} character scores per frame; size is the number of frames",
                  INPUT_NAME, 100, 1, kind="sequence", channels=FEATURES, outputs=CHARACTERS), speech),
        (ZooEntry("seq2seq", f"Translation, LSTM encoder-decoder with dot attention ({SEQ2SEQ_VOCAB} subwords, "
                  "2 layers of 256), greedy decoding; size is the source length and the steps decoded",
                  INPUT_NAME, 20, 1, kind="translation", outputs=SEQ2SEQ_VOCAB, vocab=SEQ2SEQ_VOCAB), seq2seq),
        (ZooEntry("memnet", f"End-to-end memory network, language model ({MEMNET_VOCAB} words, 150 units, 6 hops); "
                  "size is the number of memories (previous words)",
                  INPUT_NAME, 100, 1, kind="language_model", outputs=MEMNET_VOCAB, vocab=MEMNET_VOCAB), memnet),
    )
}


def list_models() -> list[ZooEntry]:
    """All zoo entries, in a stable order (for CLI listings)."""
    return [entry for entry, _ in _REGISTRY.values()]


def get_entry(name: str) -> ZooEntry:
    """Look up one entry; unknown names list the valid ones so the user can fix a typo."""
    try:
        return _REGISTRY[name][0]
    except (KeyError, TypeError):
        available = ", ".join(_REGISTRY)
        raise AutotuneError(f"unknown zoo model {name!r}; available: {available}") from None


def _check_int(what: str, value: object, minimum: int, hint: str = "") -> int:
    """Reject bools/floats/too-small values with a one-line user-facing message."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise AutotuneError(f"{what} must be an integer, got {value!r}")
    if value < minimum:
        raise AutotuneError(f"{what} must be at least {minimum}{hint}, got {value}")
    return value


#: The floating types a zoo model can be built in: float16 is the float32 model with its
#: weights rounded and every float tensor typed float16, as a half-precision deployment runs it.
DTYPES = ZOO_DTYPES


def build_model(
    name: str, *, batch_size: int = 1, size: int | None = None, seed: int = 0, dtype: str = "float32"
) -> onnx.ModelProto:
    """Build zoo model ``name`` with fully static shapes and seeded random weights.

    ``size`` defaults to the entry's ``default_size``; sizes below ``min_size``
    are rejected because some layer would produce an empty feature map.
    """
    if dtype not in DTYPES:
        raise AutotuneError(f"zoo models come in {' or '.join(DTYPES)}, not {dtype!r}")
    entry, builder = _REGISTRY[get_entry(name).name]
    batch_size = _check_int("batch size", batch_size, 1)
    size = entry.default_size if size is None else size
    image = entry.kind in ("image", "reconstruction")
    size = _check_int(f"{name} {'image size' if image else 'sequence length'}", size, entry.min_size,
                      hint=" (smaller inputs vanish in the downsampling layers)" if image else "")
    seed = _check_int("seed", seed, 0)
    from autotune.frontend import MAX_DIMENSION

    widest = max(entry.input_shape(batch_size, size))
    if widest > MAX_DIMENSION:  # numpy's broadcast failed first, in a 40-line traceback
        raise AutotuneError(f"zoo model {name!r} at batch {batch_size}, size {size}: its input has a dimension of "
                            f"{widest:,}, past the {MAX_DIMENSION:,} a loop may run here")

    g = GraphBuilder(seed)
    x = g.input(INPUT_NAME, entry.input_shape(batch_size, size), entry.input_dtype)
    try:
        out = builder(g, x, OUTPUT_NAME)
    except AutotuneError as exc:
        raise AutotuneError(f"zoo model {name!r} at batch {batch_size}, size {size}: {exc}") from None
    assert out == OUTPUT_NAME and g.shapes[out] == entry.output_shape(batch_size, size)
    model = g.finish(
        out,
        graph_name=name,
        doc=f"autotune zoo model '{name}': {entry.description}; random weights (seed {seed})",
        metadata={
            "autotune.zoo.name": name,
            "autotune.zoo.batch_size": str(batch_size),
            "autotune.zoo.size": str(size),
            "autotune.zoo.seed": str(seed),
            **({"autotune.zoo.dtype": dtype} if dtype != "float32" else {}),
        },
    )
    if dtype != "float32":
        from autotune.half_precision import half_model

        model = half_model(model, dtype)
    return model


def export_model(
    name: str,
    path: str | os.PathLike[str],
    *,
    batch_size: int = 1,
    size: int | None = None,
    seed: int = 0,
    dtype: str = "float32",
) -> Path:
    """Build a zoo model and save it to ``path`` atomically.

    The model is built before anything touches the disk, then written to a
    temporary file beside the target and renamed over it, so a failure never
    leaves a partial ``.onnx`` that a later run could mistake for a model.
    """
    from autotune.compile import check_output_path, write_atomically

    target = check_output_path(path, "onnx")
    model = build_model(name, batch_size=batch_size, size=size, seed=seed, dtype=dtype)
    return write_atomically(target, lambda tmp: onnx.save(model, tmp))
