"""AlexNet, torchvision variant (64/192/384/256/256 channels, no LRN).

Large-stride 11x11 first conv and big FC layers: an unusual shape mix that
stresses schedule templates differently from ResNets.
"""

from __future__ import annotations

from autotune.zoo.graph import GraphBuilder

#: Smallest image side for which all three 3x3/stride-2 max pools stay non-empty.
MIN_SIZE = 63


def alexnet(g: GraphBuilder, x: str, output: str, num_classes: int = 1000) -> str:
    """AlexNet. The AdaptiveAvgPool2d((6, 6)) is the identity at 224x224; at other
    sizes fc1 takes 256*h*w inputs of whatever map remains (static shapes only)."""
    y = g.relu(g.conv(x, 64, 11, name="features.0", stride=4, pad=2, bias=True))
    y = g.max_pool(y, 3, 2)
    y = g.relu(g.conv(y, 192, 5, name="features.3", pad=2, bias=True))
    y = g.max_pool(y, 3, 2)
    y = g.relu(g.conv(y, 384, 3, name="features.6", pad=1, bias=True))
    y = g.relu(g.conv(y, 256, 3, name="features.8", pad=1, bias=True))
    y = g.relu(g.conv(y, 256, 3, name="features.10", pad=1, bias=True))
    y = g.max_pool(y, 3, 2)
    y = g.flatten(y)
    y = g.relu(g.linear(y, 4096, name="classifier.1"))
    y = g.relu(g.linear(y, 4096, name="classifier.4"))
    return g.linear(y, num_classes, name="classifier.6", gain=1.0, output=output)
