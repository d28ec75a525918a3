"""A convolutional autoencoder: strided convolutions down, transposed ones back up.

The autoencoder reference workload (and the shape of GAN generators and segmentation
decoders): the decoder's ``ConvTranspose`` layers are a kernel class of their own, which
no classifier in the zoo has.
"""

from __future__ import annotations

from autotune.errors import AutotuneError
from autotune.zoo.graph import GraphBuilder

#: Encoder widths; each 4x4 stride-2 convolution halves the image side.
WIDTHS = (32, 64, 128)
#: The side must divide by 2 ** len(WIDTHS) for the decoder to give the input's size back.
SIDE_MULTIPLE = 2 ** len(WIDTHS)


def autoencoder(g: GraphBuilder, x: str, output: str) -> str:
    """Reconstruction of the input image, in [0, 1] (a sigmoid last)."""
    n, c, h, w = g.shapes[x]
    if h % SIDE_MULTIPLE or w % SIDE_MULTIPLE:
        raise AutotuneError(f"the image size must be a multiple of {SIDE_MULTIPLE}, got {h}")
    y = x
    for i, width in enumerate(WIDTHS):
        y = g.relu(g.conv(y, width, 4, name=f"encoder.{i}", stride=2, pad=1, bias=True))
    for i, width in enumerate((*reversed(WIDTHS[:-1]), c)):
        last = i == len(WIDTHS) - 1
        y = g.conv_transpose(y, width, 4, name=f"decoder.{i}", stride=2, pad=1, gain=8.0 if last else 2.0)
        y = g.sigmoid(y, output=output) if last else g.relu(y)
    return y
