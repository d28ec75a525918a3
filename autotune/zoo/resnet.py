"""ResNet-18 and ResNet-50 (torchvision layouts, ResNet v1.5 stride placement).

These are the canonical conv + BN + ReLU workloads; the many distinct conv
shapes (stride 1/2, 1x1/3x3/7x7) are what make them interesting to tune.
"""

from __future__ import annotations

from autotune.zoo.graph import GraphBuilder

#: Residual branches end in a BN whose gamma starts small, so the sum x + f(x)
#: grows variance by (1 + RESIDUAL_GAMMA^2) per block rather than doubling it.
RESIDUAL_GAMMA = 0.2


def _conv_bn(g: GraphBuilder, x: str, out_ch: int, kernel: int, *, name: str, bn: str,
             stride: int = 1, pad: int = 0, gamma: float = 1.0) -> str:
    y = g.conv(x, out_ch, kernel, name=name, stride=stride, pad=pad)
    return g.batch_norm(y, name=bn, gamma=gamma)


def _downsample(g: GraphBuilder, x: str, out_ch: int, stride: int, name: str) -> str:
    """Projection shortcut used when the block changes shape (conv1x1 + BN)."""
    in_ch = g.shapes[x][1]
    if stride == 1 and in_ch == out_ch:
        return x
    return _conv_bn(g, x, out_ch, 1, name=f"{name}.downsample.0", bn=f"{name}.downsample.1",
                    stride=stride)


def _basic_block(g: GraphBuilder, x: str, planes: int, stride: int, name: str) -> str:
    identity = _downsample(g, x, planes, stride, name)
    y = g.relu(_conv_bn(g, x, planes, 3, name=f"{name}.conv1", bn=f"{name}.bn1",
                        stride=stride, pad=1))
    y = _conv_bn(g, y, planes, 3, name=f"{name}.conv2", bn=f"{name}.bn2", pad=1,
                 gamma=RESIDUAL_GAMMA)
    return g.relu(g.add(y, identity))


def _bottleneck(g: GraphBuilder, x: str, planes: int, stride: int, name: str) -> str:
    out_ch = planes * 4
    identity = _downsample(g, x, out_ch, stride, name)
    y = g.relu(_conv_bn(g, x, planes, 1, name=f"{name}.conv1", bn=f"{name}.bn1"))
    y = g.relu(_conv_bn(g, y, planes, 3, name=f"{name}.conv2", bn=f"{name}.bn2",
                        stride=stride, pad=1))
    y = _conv_bn(g, y, out_ch, 1, name=f"{name}.conv3", bn=f"{name}.bn3", gamma=RESIDUAL_GAMMA)
    return g.relu(g.add(y, identity))


def _resnet(g: GraphBuilder, x: str, *, bottleneck: bool, layers: tuple[int, ...],
            output: str, num_classes: int = 1000) -> str:
    y = g.relu(_conv_bn(g, x, 64, 7, name="conv1", bn="bn1", stride=2, pad=3))
    y = g.max_pool(y, 3, 2, 1)
    block = _bottleneck if bottleneck else _basic_block
    for stage, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers), start=1):
        for i in range(blocks):
            stride = 2 if (stage > 1 and i == 0) else 1
            y = block(g, y, planes, stride, f"layer{stage}.{i}")
    y = g.flatten(g.global_avg_pool(y))
    return g.linear(y, num_classes, name="fc", gain=1.0, output=output)


def resnet18(g: GraphBuilder, x: str, output: str) -> str:
    """ResNet-18: BasicBlock x [2, 2, 2, 2]."""
    return _resnet(g, x, bottleneck=False, layers=(2, 2, 2, 2), output=output)


def resnet50(g: GraphBuilder, x: str, output: str) -> str:
    """ResNet-50: Bottleneck x [3, 4, 6, 3] with stride on the 3x3 conv (v1.5)."""
    return _resnet(g, x, bottleneck=True, layers=(3, 4, 6, 3), output=output)
