"""Writes tests/data/torch_recurrent_*.onnx and the torch outputs they must reproduce.

Run with torch installed (2.13.0+cpu here): ``python tests/data/make_torch_recurrent.py
tests/data``. The tests need no torch."""
import numpy as np, onnx, torch, torch.nn as nn, sys
out = sys.argv[1]
torch.manual_seed(0)
class Speech(nn.Module):
    def __init__(self):
        super().__init__()
        # R of 4 x 48 x 48 values: past the dynamo exporter's constant folding (8,192),
        # so it reaches the LSTM through Slice and Concat, as in real models
        self.lstm = nn.LSTM(8, 48, bidirectional=True, batch_first=True)
        self.gru = nn.GRU(96, 8, batch_first=True)
        self.fc = nn.Linear(8, 5)
    def forward(self, x):
        y, _ = self.lstm(x)
        y, _ = self.gru(y)
        return self.fc(y)
m = Speech().eval()
x = torch.from_numpy(np.random.default_rng(0).standard_normal((1, 6, 8)).astype(np.float32))
with torch.no_grad():
    y = m(x).numpy()
np.savez(f"{out}/torch_recurrent_io.npz", input=x.numpy(), output=y)
for dynamo in (False, True):
    path = f"{out}/torch_recurrent_{'dynamo' if dynamo else 'torchscript'}.onnx"
    torch.onnx.export(m, (x,), path, dynamo=dynamo, opset_version=18 if dynamo else 17, input_names=["input"], output_names=["output"])
    model = onnx.load(path)  # pulls in any external data
    onnx.save(model, path, save_as_external_data=False)
print(torch.__version__)
