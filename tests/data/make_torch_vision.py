"""Writes tests/data/torchvision_*.onnx: seven torchvision architectures, each at a
size of a few thousand weights, as torch's two ONNX exporters write them, and the
outputs torch computes for one input (torchvision_io.npz).

Run with torch and torchvision installed (2.14.1 and 0.29.1 here):
``python tests/data/make_torch_vision.py tests/data``. The tests need neither.
The files are as the exporters write them: the dynamo exporter's weights in
``<name>.onnx.data`` beside the graph. The architectures are torchvision's own classes,
built small; batch norm statistics and
layer-norm scales are drawn at random so that no layer is an identity, and linear layers
get PyTorch's default initialization (torchvision zeroes ViT's head, whose output would
otherwise be all zeros)."""
import sys
from functools import partial

import numpy as np
import torch
import torch.nn as nn
from torchvision.models import VisionTransformer
from torchvision.models.convnext import CNBlockConfig, ConvNeXt
from torchvision.models.densenet import DenseNet
from torchvision.models.efficientnet import EfficientNet, MBConvConfig
from torchvision.models.mobilenetv3 import InvertedResidualConfig, MobileNetV3
from torchvision.models.regnet import BlockParams, RegNet
from torchvision.models.shufflenetv2 import ShuffleNetV2

out = sys.argv[1]
torch.manual_seed(0)
bneck = partial(InvertedResidualConfig, width_mult=1.0)
models = {
    "vit": VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10),
    "convnext": ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)], num_classes=10),
    "mobilenetv3": MobileNetV3([bneck(16, 3, 16, 16, True, "RE", 2, 1), bneck(16, 3, 32, 24, False, "HS", 2, 1),
                                bneck(24, 5, 48, 24, True, "HS", 1, 1)], last_channel=64, num_classes=10),
    "shufflenetv2": ShuffleNetV2([2, 1, 1], [8, 16, 32, 64, 128], num_classes=10),
    "densenet": DenseNet(growth_rate=8, block_config=(2, 2), num_init_features=16, bn_size=2, num_classes=10),
    "efficientnet": EfficientNet([MBConvConfig(1, 3, 1, 16, 16, 1), MBConvConfig(4, 3, 2, 16, 24, 1)],
                                 dropout=0.0, last_channel=64, num_classes=10),
    "regnet": RegNet(BlockParams.from_init_params(depth=2, w_0=16, w_a=8.0, w_m=2.0, group_width=8, se_ratio=0.25),
                     stem_width=8, num_classes=10),
}
x = torch.from_numpy(np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32))
outputs = {"input": x.numpy()}
for name, m in models.items():
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)
            elif isinstance(mod, nn.Linear):  # torchvision zeroes ViT's head, shrinks others
                mod.reset_parameters()
            elif isinstance(mod, nn.LayerNorm):
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)
    m.eval()
    with torch.no_grad():
        outputs[name] = m(x).numpy()
    for dynamo in (False, True):
        path = f"{out}/torchvision_{name}_{'dynamo' if dynamo else 'torchscript'}.onnx"
        torch.onnx.export(m, (x,), path, dynamo=dynamo, opset_version=18 if dynamo else 17,
                          input_names=["input"], output_names=["output"])
np.savez(f"{out}/torchvision_io.npz", **outputs)
print(torch.__version__)
