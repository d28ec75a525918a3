"""Shared memory a CUDA sketch's config allocates per thread block, with no TVM work.

VerifyGPUCode rejects a block whose shared buffers exceed the target's
``max_shared_memory_per_block`` (48 KB). On the H100's 13,137 measured configs of six
ResNet-18 and MobileNetV2 convolutions (2026-11-26) that was 2,321 of the 2,377 the
space rejected: sampling, mutation and the model's search proposed them, and each was
found out by a replay and a lowering. The design (DESIGN.md, "Knob spaces") asks for
such constraints in the space itself, so that proposals stay valid.

The estimate reads the sketch's trace. Each ``cache_read`` into ``shared`` holds the
region of the tiled block's read that one thread block touches per iteration of the loop
it is computed at: of each iterator's tile, the parts whose loops lie inside that loop,
and the parts bound to ``vthread``/``threadIdx`` outside it (the block's threads share
the buffer). A software-pipelined loop keeps one copy per stage a buffer is ahead of
its consumer. Read indices must be affine in the block's iterators. A sketch whose
trace does not fit this reading gets no estimate, and every config passes, as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

#: The storage scope whose footprint is bounded here.
SHARED = "shared"


@dataclass(frozen=True)
class _Term:
    """One iterator in one index of a shared buffer: ``coef`` times its tile extent."""

    coef: int
    knob: str  # the iterator's tile knob
    parts: tuple[int, ...]  # positions of the tile's factors the buffer spans


@dataclass(frozen=True)
class _SharedBuffer:
    element_bytes: int  # bytes per element, times the copies a software pipeline keeps
    dims: tuple[tuple[tuple[_Term, ...], int], ...]  # per dimension: its terms, the read's own extent

    def nbytes(self, config: Mapping[str, Any]) -> int:
        total = self.element_bytes
        for terms, own in self.dims:
            span = own
            for t in terms:
                span += t.coef * (math.prod(int(config[t.knob][j]) for j in t.parts) - 1)
            total *= span
        return total


class SharedFootprint:
    """The shared bytes of one sketch as a function of its tile knobs."""

    def __init__(self, buffers: tuple[_SharedBuffer, ...]) -> None:
        self.buffers = buffers

    def nbytes(self, config: Mapping[str, Any]) -> int:
        return sum(b.nbytes(config) for b in self.buffers)

    @classmethod
    def of_sketch(cls, trace, tile_knobs: Mapping[int, str], plain) -> "SharedFootprint | None":
        """Read ``trace``, a sketch of the function ``plain`` (an unscheduled
        ``tvm.s_tir.Schedule`` of it, shared by its sketches) schedules; ``tile_knobs``
        names the knob of each ``SamplePerfectTile`` by its instruction index. None
        where the trace does not fit the reading above."""
        try:
            return cls._read(trace, tile_knobs, plain)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            return None

    @classmethod
    def _read(cls, trace, tile_knobs: Mapping[int, str], plain) -> "SharedFootprint | None":
        block_names: dict[Any, str] = {}
        loop_iter: dict[Any, tuple[str, int]] = {}  # a block's loop -> (block, iterator position)
        iter_knob: dict[tuple[str, int], str] = {}
        factor_of: dict[Any, tuple[str, int]] = {}  # a sampled factor -> (knob, part)
        loop_part: dict[Any, tuple[str, int]] = {}  # a split's loop -> (knob, part)
        fused_into: dict[Any, Any] = {}
        bound: dict[Any, str] = {}
        order: list[Any] | None = None
        caches: dict[Any, tuple[str, int]] = {}  # cache block -> (tiled block, read index)
        computed_at: dict[Any, Any] = {}
        stages: list[int] | None = None
        for i, inst in enumerate(trace.insts):
            kind = inst.kind.name
            if kind in ("GetSBlock", "GetBlock"):
                block_names[inst.outputs[0]] = str(inst.attrs[0])
            elif kind == "GetLoops" and inst.inputs[0] in block_names:
                for j, loop in enumerate(inst.outputs):
                    loop_iter[loop] = (block_names[inst.inputs[0]], j)
            elif kind == "SamplePerfectTile":
                knob = tile_knobs.get(i)
                if knob is None:
                    return None
                if inst.inputs[0] in loop_iter:
                    iter_knob[loop_iter[inst.inputs[0]]] = knob
                for j, factor in enumerate(inst.outputs):
                    factor_of[factor] = (knob, j)
            elif kind == "Split":
                for loop, factor in zip(inst.outputs, inst.inputs[1:]):
                    if factor in factor_of:
                        loop_part[loop] = factor_of[factor]
            elif kind == "Reorder":
                order = list(inst.inputs)
            elif kind == "Fuse":
                for loop in inst.inputs:
                    fused_into[loop] = inst.outputs[0]
            elif kind == "Bind":
                bound[inst.inputs[0]] = str(inst.attrs[0])
            elif kind == "CacheRead":
                if str(inst.attrs[1]) == SHARED:
                    caches[inst.outputs[0]] = (block_names[inst.inputs[0]], int(inst.attrs[0]))
            elif kind == "ComputeAt" and inst.inputs[0] in caches:
                computed_at[inst.inputs[0]] = inst.inputs[1]
            elif kind == "Annotate" and str(inst.attrs[0]) == "software_pipeline_stage":
                stages = [int(s) for s in inst.inputs[1]]
        if not caches:
            return cls(())
        if order is None or (stages is not None and len(stages) != len(caches) + 1):
            return None

        buffers = []
        for c, (cache, (block_name, read_index)) in enumerate(caches.items()):
            at = computed_at.get(cache)
            if at not in order:
                return None
            inside_from = order.index(at) + 1
            parts: dict[str, list[int]] = {}
            for position, loop in enumerate(order):
                if loop not in loop_part:
                    continue
                knob, j = loop_part[loop]
                axis = bound.get(fused_into.get(loop), bound.get(loop, ""))
                if position >= inside_from or axis.startswith(("vthread", "threadIdx")):
                    parts.setdefault(knob, []).append(j)
            block = plain.get(plain.get_sblock(block_name))
            read = block.reads[read_index]
            dims = []
            for rng in read.region:
                terms = _affine_terms(rng.min, block, block_name, iter_knob, parts)
                if terms is None:
                    return None
                dims.append((terms, int(rng.extent)))
            copies = 1 if stages is None else stages[-1] - stages[c] + 1
            element = _dtype_bytes(read.source.dtype)
            buffers.append(_SharedBuffer(element * copies, tuple(dims)))
        return cls(tuple(buffers))


def _affine_terms(index, block, block_name: str, iter_knob, parts) -> tuple[_Term, ...] | None:
    """The iterators of ``index`` with their coefficients; None unless it is affine in
    iterators that are tiled (an untiled one's span is not known here)."""
    from tvm.sym.pattern import detect_linear_equation

    iters = list(block.iter_vars)
    coefs = detect_linear_equation(index, [iv.var for iv in iters])
    if len(coefs) != len(iters) + 1:
        return None
    terms = []
    for j, (coef, iv) in enumerate(zip(coefs[:-1], iters)):
        c = abs(int(coef))
        if c and int(iv.dom.extent) > 1:
            knob = iter_knob.get((block_name, j))
            if knob is None:
                return None
            terms.append(_Term(c, knob, tuple(parts.get(knob, ()))))
    return tuple(terms)


def _dtype_bytes(dtype) -> int:
    import tvm

    return max(1, tvm.DataType(str(dtype)).bits // 8)
