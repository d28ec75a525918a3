"""MobileNetV2 (torchvision layout, width multiplier 1.0).

Depthwise convolutions (group == channels) and ReLU6 make this the
low-arithmetic-intensity workload of the zoo.
"""

from __future__ import annotations

from autotune.zoo.graph import GraphBuilder

#: (expand ratio t, output channels c, repeats n, first stride s), from the paper.
INVERTED_RESIDUAL_SETTING: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
#: Damping for the projection BN of blocks that have a residual add (see resnet.py).
RESIDUAL_GAMMA = 0.3


def _conv_bn_relu6(g: GraphBuilder, x: str, out_ch: int, kernel: int, name: str,
                   stride: int = 1, groups: int = 1) -> str:
    y = g.conv(x, out_ch, kernel, name=f"{name}.0", stride=stride, pad=(kernel - 1) // 2,
               groups=groups)
    return g.relu6(g.batch_norm(y, name=f"{name}.1"))


def _inverted_residual(g: GraphBuilder, x: str, out_ch: int, stride: int, expand: int,
                       name: str) -> str:
    in_ch = g.shapes[x][1]
    hidden = in_ch * expand
    residual = stride == 1 and in_ch == out_ch
    y = x
    idx = 0
    if expand != 1:
        y = _conv_bn_relu6(g, y, hidden, 1, f"{name}.conv.{idx}")
        idx += 1
    y = _conv_bn_relu6(g, y, hidden, 3, f"{name}.conv.{idx}", stride=stride, groups=hidden)
    y = g.conv(y, out_ch, 1, name=f"{name}.conv.{idx + 1}")
    y = g.batch_norm(y, name=f"{name}.conv.{idx + 2}", gamma=RESIDUAL_GAMMA if residual else 1.0)
    return g.add(x, y) if residual else y


def mobilenetv2(g: GraphBuilder, x: str, output: str, num_classes: int = 1000) -> str:
    """MobileNetV2: stem conv, 17 inverted residual blocks, 1x1 conv to 1280, classifier."""
    y = _conv_bn_relu6(g, x, 32, 3, "features.0", stride=2)
    feature = 1
    for t, c, n, s in INVERTED_RESIDUAL_SETTING:
        for i in range(n):
            y = _inverted_residual(g, y, c, s if i == 0 else 1, t, f"features.{feature}")
            feature += 1
    y = _conv_bn_relu6(g, y, 1280, 1, f"features.{feature}")
    y = g.flatten(g.global_avg_pool(y))
    return g.linear(y, num_classes, name="classifier.1", gain=1.0, output=output)
