"""An end-to-end memory network (Sukhbaatar et al. 2015) in its language-model
configuration: the previous words are the memory, the next word is the answer.

The memory-network reference workload: an embedding lookup of every memory slot
(``Gather``, as torch exports ``nn.Embedding``), then several hops of soft attention
over the memory, each a pair of batched matrix-vector products around a softmax, with
a linear map between hops; last, a projection onto the vocabulary. The paper's Penn
Treebank model: 10k words, 150 units, 6 hops, 100 memories, weights tied across hops
(A and C shared, ``u <- H u + o``), temporal encoding, and ReLU on half of the units.
"""

from __future__ import annotations

import math

import numpy as np

from autotune.zoo.graph import GraphBuilder

#: Vocabulary (Penn Treebank), embedding width, hops; the first query is this constant.
VOCAB = 10_000
EMBED = 150
HOPS = 6
QUERY = 0.1


def _memory(g: GraphBuilder, tokens: str, name: str) -> str:
    """Memory slots [batch, slots, EMBED]: a word's embedding plus its slot's (temporal
    encoding, a learned row per position)."""
    batch, slots = g.shapes[tokens]
    table = g.normal(f"{name}.weight", (VOCAB, EMBED), 0.1)
    temporal = g.normal(f"{name}.temporal.weight", (slots, EMBED), 0.1)
    words = g.node("Gather", [table, tokens], (batch, slots, EMBED), axis=0)
    return g.add(words, temporal)


def memnet(g: GraphBuilder, x: str, output: str) -> str:
    """[batch, slots] word ids, oldest first -> [batch, VOCAB] scores of the next word."""
    batch, slots = g.shapes[x]
    keys = _memory(g, x, "memory.input")  # A: what the query is matched against
    values = _memory(g, x, "memory.output")  # C: what a hop reads out
    # H keeps u's scale over the hops; the output's gain brings the scores to O(1)
    hop = g.normal("hop.weight", (EMBED, EMBED), math.sqrt(1.0 / EMBED))
    half = g.const("hop.split", np.array([EMBED // 2, EMBED - EMBED // 2], dtype=np.int64))
    u = g.const("query", np.full((batch, EMBED), QUERY, dtype=np.float32))
    for k in range(HOPS):
        query = g.reshape(u, (batch, EMBED, 1), name=f"hop{k}.query")
        weight = g.reshape(g.node("MatMul", [keys, query], (batch, slots, 1)), (batch, 1, slots), name=f"hop{k}.scores")
        weight = g.node("Softmax", [weight], (batch, 1, slots), axis=-1)
        read = g.reshape(g.node("MatMul", [weight, values], (batch, 1, EMBED)), (batch, EMBED), name=f"hop{k}.read")
        u = g.add(g.node("Gemm", [u, hop], (batch, EMBED), transB=1), read)
        linear, rectified = g.node_outputs("Split", [u, half], [(batch, EMBED // 2), (batch, EMBED - EMBED // 2)], axis=1)
        u = g.node("Concat", [g.relu(linear), rectified], (batch, EMBED), axis=1)
    project = g.normal("output.weight", (VOCAB, EMBED), math.sqrt(8.0 / EMBED))
    bias = g.normal("output.bias", (VOCAB,), 0.01)
    return g.node("Gemm", [u, project, bias], (batch, VOCAB), output=output, transB=1)
