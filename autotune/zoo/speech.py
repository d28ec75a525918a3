"""A speech acoustic model (EESEN / DeepSpeech style): frames of log-mel features in,
stacked bidirectional LSTMs, and a character score per frame out (for CTC decoding).

The speech / seq2seq reference workload: recurrent layers, whose small per-step
matrix products run once per frame. TVM's ONNX frontend cannot import ``LSTM``;
:mod:`autotune.recurrent` unrolls it.
"""

from __future__ import annotations

from autotune.zoo.graph import GraphBuilder

#: Log-mel features per frame (the input's channels), LSTM width and depth, and the
#: output alphabet (a-z, space, apostrophe and the CTC blank).
FEATURES = 40
HIDDEN = 256
LAYERS = 2
CHARACTERS = 29


def speech(g: GraphBuilder, x: str, output: str) -> str:
    """[batch, frames, FEATURES] -> [batch, frames, CHARACTERS], batch first at both ends
    (torch's ``batch_first=True``, exported as a transpose around the LSTMs)."""
    batch, frames, features = g.shapes[x]
    y = g.node("Transpose", [x], (frames, batch, features), perm=[1, 0, 2])
    for i in range(LAYERS):
        y = g.lstm(y, HIDDEN, name=f"lstm.{i}", bidirectional=True)
    y = g.node("Transpose", [y], (batch, frames, 2 * HIDDEN), perm=[1, 0, 2])
    # an LSTM's states sit well inside (-1, 1): a larger gain keeps the scores O(1)
    return g.dense(y, CHARACTERS, name="classifier", gain=8.0, output=output)
