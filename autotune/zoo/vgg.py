"""VGG-11 (configuration "A", no batch norm), torchvision layout.

Plain stacks of 3x3 convs plus very large fully connected layers: a
memory-bound dense workload alongside the conv-heavy ones.
"""

from __future__ import annotations

from autotune.zoo.graph import GraphBuilder

#: Config "A": channel counts, "M" = 2x2 max pool with stride 2.
CFG_A: tuple[int | str, ...] = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


def vgg11(g: GraphBuilder, x: str, output: str, num_classes: int = 1000) -> str:
    """VGG-11. torchvision's AdaptiveAvgPool2d((7, 7)) is the identity at 224x224;
    at other sizes the classifier flattens whatever spatial extent remains, so
    fc1 has 512*h*w inputs and every shape stays static."""
    y = x
    for layer_idx, v in enumerate(CFG_A):
        if v == "M":
            y = g.max_pool(y, 2, 2)
        else:
            y = g.relu(g.conv(y, int(v), 3, name=f"features.{layer_idx}", pad=1, bias=True))
    y = g.flatten(y)
    y = g.relu(g.linear(y, 4096, name="classifier.0"))
    y = g.relu(g.linear(y, 4096, name="classifier.3"))
    return g.linear(y, num_classes, name="classifier.6", gain=1.0, output=output)
