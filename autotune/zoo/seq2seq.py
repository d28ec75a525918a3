"""A sequence-to-sequence translation model (Sutskever et al. 2014, with Luong et al.
2015's global dot attention), decoding greedily, as it runs at inference.

The seq2seq reference workload: token ids in, an embedding lookup (``Gather``, how
torch exports ``nn.Embedding``), a two-layer LSTM encoder, then a two-layer LSTM decoder
run one step at a time for a fixed number of steps, each step feeding back the
embedding of its own best token (``ArgMax``). Every decoding step repeats the same small
kernels (batch-1 matrix-vector LSTM steps, attention over the source, a projection onto
the target vocabulary), so one tuned kernel serves all of them. TVM's frontend cannot
import ``LSTM``; :mod:`autotune.recurrent` unrolls it.
"""

from __future__ import annotations

import math

import numpy as np

from autotune.zoo.graph import GraphBuilder

#: Source and target vocabularies (subword units), embedding and LSTM width, depth.
VOCAB = 8000
HIDDEN = 256
LAYERS = 2
#: The token a decoder starts from.
BOS = 1


def _encoder(g: GraphBuilder, tokens: str) -> tuple[str, list[tuple[str, str]]]:
    """Source token ids [batch, seq] -> the top layer's states [batch, seq, HIDDEN] (what
    attention reads) and each layer's last (h, c), which start the decoder."""
    batch, seq = g.shapes[tokens]
    table = g.normal("encoder.embedding.weight", (VOCAB, HIDDEN), 1.0)
    y = g.node("Gather", [table, tokens], (batch, seq, HIDDEN), axis=0)
    y = g.node("Transpose", [y], (seq, batch, HIDDEN), perm=[1, 0, 2])
    states = []
    for i in range(LAYERS):
        y, h, c = g.lstm_step(y, g.lstm_weights(HIDDEN, HIDDEN, name=f"encoder.lstm.{i}"))
        states.append((h, c))
    memory = g.node("Transpose", [y], (batch, seq, HIDDEN), perm=[1, 0, 2])
    return memory, states


def seq2seq(g: GraphBuilder, x: str, output: str) -> str:
    """[batch, seq] source ids -> [batch, seq, VOCAB] scores of the target token at each of
    ``seq`` decoding steps (the decoded sentence is their argmax)."""
    batch, seq = g.shapes[x]
    memory, states = _encoder(g, x)
    table = g.normal("decoder.embedding.weight", (VOCAB, HIDDEN), 1.0)
    lstms = [g.lstm_weights(HIDDEN, HIDDEN, name=f"decoder.lstm.{i}") for i in range(LAYERS)]
    # Luong's attentional hidden state tanh(W_c [context; h]) and the output projection
    combine = g.normal("decoder.attention.combine.weight", (HIDDEN, 2 * HIDDEN), math.sqrt(1.0 / HIDDEN))
    project = g.normal("decoder.output.weight", (VOCAB, HIDDEN), math.sqrt(4.0 / HIDDEN))
    project_bias = g.normal("decoder.output.bias", (VOCAB,), 0.01)

    token = g.const("decoder.bos", np.full((batch,), BOS, dtype=np.int64))
    scores = []
    for t in range(seq):
        y = g.node("Gather", [table, token], (batch, HIDDEN), axis=0)
        y = g.node("Unsqueeze", [y, g.axes_const(0)], (1, batch, HIDDEN))
        for i, weights in enumerate(lstms):
            y, h, c = g.lstm_step(y, weights, states[i])
            states[i] = (h, c)
        top = g.reshape(y, (batch, HIDDEN, 1), name=f"decoder.step{t}.query")
        weight = g.node("MatMul", [memory, top], (batch, seq, 1))
        weight = g.reshape(weight, (batch, 1, seq), name=f"decoder.step{t}.scores")
        weight = g.node("Softmax", [weight], (batch, 1, seq), axis=-1)
        context = g.reshape(g.node("MatMul", [weight, memory], (batch, 1, HIDDEN)), (batch, HIDDEN),
                            name=f"decoder.step{t}.context")
        joined = g.node("Concat", [context, g.reshape(top, (batch, HIDDEN), name=f"decoder.step{t}.h")],
                        (batch, 2 * HIDDEN), axis=1)
        attentional = g.node("Tanh", [g.node("Gemm", [joined, combine], (batch, HIDDEN), transB=1)], (batch, HIDDEN))
        logits = g.node("Gemm", [attentional, project, project_bias], (batch, VOCAB), transB=1)
        scores.append(g.node("Unsqueeze", [logits, g.axes_const(1)], (batch, 1, VOCAB)))
        if t + 1 < seq:
            token = g.node("ArgMax", [logits], (batch,), axis=1, keepdims=0)
    return g.node("Concat", scores, (batch, seq, VOCAB), output=output, axis=1)
