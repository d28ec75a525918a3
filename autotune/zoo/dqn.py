"""Deep Q-network (Mnih et al., Nature 2015): the Atari agent's value network.

The deep-Q reference workload: four stacked 84x84 frames, three convolutions with
large strides (8x8/4, 4x4/2, 3x3/1) on few channels, then a wide fully connected layer.
Small, launch-bound kernels, unlike the ImageNet CNNs.
"""

from __future__ import annotations

from autotune.zoo.graph import GraphBuilder

#: Stacked frames (the input's channels) and the Atari action set (the output).
FRAMES = 4
ACTIONS = 18
#: Smallest frame side for which the third convolution still has a 3x3 input.
MIN_SIZE = 36


def dqn(g: GraphBuilder, x: str, output: str) -> str:
    """Q-values of the 18 actions; the first linear layer takes whatever map remains
    (64 x 7 x 7 at the paper's 84 x 84)."""
    y = g.relu(g.conv(x, 32, 8, name="conv1", stride=4, bias=True))
    y = g.relu(g.conv(y, 64, 4, name="conv2", stride=2, bias=True))
    y = g.relu(g.conv(y, 64, 3, name="conv3", stride=1, bias=True))
    y = g.flatten(y)
    y = g.relu(g.linear(y, 512, name="fc1"))
    return g.linear(y, ACTIONS, name="fc2", gain=1.0, output=output)
