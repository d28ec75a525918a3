"""The generic knob space: TVM meta-schedule's own design space, made enumerable.

meta-schedule describes a layer's schedules as *sketches*: traces whose sampling
instructions (``SamplePerfectTile``, ``SampleCategorical``, ``SampleComputeLocation``)
hold random decisions. Each such instruction becomes a knob here, with every legal
decision enumerated as a candidate, and a readable name derived from the block and loop
it acts on (``conv2d_nchw.ff.tile``, ``root.unroll_explicit``, ``pad_temp.compute_at``),
so two layers of the same op class share knob names and history transfers between them
by name. Every decision is a knob: one left to the sketch would be a random draw that
differs between processes, so one config would name different programs in different
runs (history could not be replayed, a reused winner would not be the measured one).

Applying a config replays the sketch with those decisions and then runs the target's
postprocessors (for CUDA, ending in GPU code verification), which reject invalid points.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

import numpy as np

from autotune.templates.shared_memory import SharedFootprint
from autotune.templates.space import Config, InvalidConfig, Knob, KnobSpace

#: v2: compute locations are knobs (v1 left them to the sketch's random draw).
TEMPLATE = "ms-generic-v2"
#: Fixed seed of the sketch generator: sketches (and so default configs) reproduce.
SKETCH_SEED = 20200720

_CONTEXT_LOCK = threading.Lock()
#: meta-schedule's VerifyGPUCode postprocessor allows at most 8 virtual threads.
MAX_VTHREAD = 8


@dataclass(frozen=True)
class _Sampler:
    """Where in a sketch's trace a knob's decision lives."""

    inst_index: int
    knob: str
    kind: str  # "tile", "categorical" or "compute_at"
    values: tuple[Any, ...]  # categorical: the instruction's own candidate values


@lru_cache(maxsize=4096)
def perfect_tilings(extent: int, parts: int, max_innermost: int) -> tuple[tuple[int, ...], ...]:
    """Every ordered way to write ``extent`` as a product of ``parts`` factors,
    innermost factor at most ``max_innermost`` (meta-schedule's own constraint)."""
    if parts == 1:
        return ((extent,),) if extent <= max_innermost else ()
    out: list[tuple[int, ...]] = []
    for d in _divisors(extent):
        for rest in perfect_tilings(extent // d, parts - 1, max_innermost):
            out.append((d, *rest))
    return tuple(out)


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def stub_tensor_intrinsics() -> None:
    """Make meta-schedule's import of ``tvm.s_tir.tensor_intrin`` a no-op.

    TuneContext imports that package, which registers the tensor intrinsics of every
    backend on import: its CUDA part alone took ~18 s on this CPU machine, the x86 and
    ARM parts ~3 s. The rule sets our spaces use (meta-schedule's default "llvm" and
    "cuda" rules, postprocessors and mutators) tensorize nothing, so none is needed:
    the spaces of all 58 tunable layers of ResNet-18, MobileNetV2 and the transformer
    had the same sketches and gave the same program for a sampled config, on llvm and
    cuda:sm_90, with every intrinsic registered and with none (2026-11-24; 9.3 s less
    to build the CUDA spaces, 1.3 s less on llvm). Installing the package object with
    its real path keeps an explicit submodule import (dlight's tensor-core rules make
    one) working.
    """
    import importlib.util
    import sys
    import types

    name = "tvm.s_tir.tensor_intrin"
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    pkg = types.ModuleType(name)
    pkg.__path__ = list(spec.submodule_search_locations)  # type: ignore[attr-defined]
    pkg.__package__ = name
    pkg.__spec__ = spec
    sys.modules[name] = pkg


#: Tensor cores (``wmma``) came with Volta: sm_70.
TENSOR_CORE_MIN_ARCH = 70
#: A warp's threads, the edge of a ``wmma`` fragment (m16n16k16), and a float16 operand's bytes.
WARP_SIZE = 32
WMMA_EDGE = 16
HALF_BYTES = 2
#: meta-schedule's rule set that tensorizes on them, and the annotation its sketches carry.
TENSOR_CORE_RULES = "cuda-tensorcore"
_AUTO_TENSORIZE = "meta_schedule.auto_tensorize"


def rule_sets(func, target) -> tuple[str, ...]:
    """meta-schedule's rule sets a layer's sketches come from: the target's own, and on a
    GPU with tensor cores, for a layer that multiplies float16 and sums in float32 (what
    :mod:`autotune.rewrites` makes of every float16 conv and matmul), also the set that
    computes it on tensor cores, as cuDNN and cuBLAS do. Its sketches join the others as
    values of the ``sketch`` knob: tuners pick between them, and a shape the tensor-core
    rules cannot take still has the plain sketches."""
    if target.kind.name != "cuda":
        return ("llvm",)
    arch = str(target.attrs.get("arch", ""))
    digits = arch.removeprefix("sm_").rstrip("a")
    if digits.isdigit() and int(digits) >= TENSOR_CORE_MIN_ARCH and _sums_half_products_in_float32(func):
        return ("cuda", TENSOR_CORE_RULES)
    return ("cuda",)


def _sums_half_products_in_float32(func) -> bool:
    """Whether a block of ``func`` reduces into float32 what it reads from float16 buffers."""
    from tvm.s_tir import Schedule

    sch = Schedule(func)
    for rv in sch.get_child_blocks(sch.get_sblock("root")):
        block = sch.get(rv)
        if block.init is None or not block.writes:
            continue
        if _dtype(block.writes[0]) == "float32" and any(_dtype(r) == "float16" for r in block.reads):
            return True
    return False


def _dtype(region) -> str:
    """The element type of a block's read or write region (its buffer's variable)."""
    return str(getattr(region.source, "dtype", ""))


def register_cuda_tensor_intrinsics() -> None:
    """Register TVM's CUDA tensor intrinsics (``wmma``, ``mma``): the tensor-core rules
    name them. About 15 s on this CPU machine, once per process, and only for a layer
    that can use them (:func:`stub_tensor_intrinsics` keeps every other path off it)."""
    import importlib

    stub_tensor_intrinsics()
    importlib.import_module("tvm.s_tir.tensor_intrin.cuda")


def tensor_core_rules() -> list:
    """meta-schedule's tensor-core rules as its ``cuda-tensorcore`` set has them, for
    float16 operands and float32 results, less two things: the operands are staged in
    static shared memory (the results still in dynamic), and the ``mma`` rule
    (software-pipelined, dynamic shared memory only) is left out. TVM 0.27 merges a
    kernel's dynamic shared buffers into one, and with every buffer static its storage
    reuse shares them the same way; either way the float32 results' ``wmma`` store then
    addresses a float16 view of the shared bytes, which its own lowering refuses
    ("tvm_access_ptr element type must match the source buffer"), and every tensor-core
    candidate of a float16 conv and matmul failed to build. With the results alone in
    dynamic memory no buffer is shared across types."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.tensor_intrin.cuda import get_wmma_intrin_group

    plain = ms.ScheduleRule.create("cuda")
    operands, results = "shared", "shared.dyn"
    return [
        plain[0],  # ApplyCustomRule, as the set begins
        ms.schedule_rule.MultiLevelTilingTensorCore(
            intrin_groups=[get_wmma_intrin_group(operands, results, "float16", "float32", trans_b) for trans_b in (False, True)],
            structure="SSSRRSRS",
            tile_binds=["blockIdx.y", "blockIdx.x", "threadIdx.y"],
            max_innermost_factor=4,
            vector_load_lens=[1, 2, 3, 4, 8, 16],
            reuse_read=ms.schedule_rule.ReuseType(req="must", levels=[4], scope=operands),
            reuse_write=ms.schedule_rule.ReuseType(req="must", levels=[2], scope=results),
            use_software_pipeline=False,
        ),
        *plain[1:],
    ]


def _span(tile, start: int) -> int:
    """Elements a tensor-core tile spans from part ``start`` inward (``wmma`` fragments of 16)."""
    return WMMA_EDGE * math.prod(int(v) for v in tile[start:])


def _tensor_core_usage(rows, cols, depth) -> tuple[int, int]:
    """(warps per block, bytes of float16 operand tiles staged in shared memory) of a
    tensor-core config's GEMM tiles (:meth:`MetaScheduleSpace._tensor_core_tiling`)."""
    return int(rows[2]) * int(cols[2]), (_span(rows, 2) + _span(cols, 2)) * _span(depth, 1) * HALF_BYTES


def _tensorizes(trace) -> bool:
    return any(inst.kind.name == "Annotate" and str(inst.attrs[0]) == _AUTO_TENSORIZE for inst in trace.insts)


def _shared_bytes(footprints: list[SharedFootprint | None], config: Mapping[str, Any]) -> int | None:
    """``config``'s shared memory per block by its sketch's footprint (None: no estimate)."""
    footprint = footprints[int(config.get("sketch", 0))]
    return None if footprint is None else footprint.nbytes(config)


class MetaScheduleSpace(KnobSpace):
    """Knob space of one PrimFunc on one target, from meta-schedule's space generator."""

    def __init__(self, func, target, *, name: str = "main", estimate_shared: bool = True) -> None:
        """``estimate_shared=False`` leaves shared memory to VerifyGPUCode alone, as
        before 2026-11-26: its configs are the same, but its sampling, mutation and
        search draw as they did then, so measurements made then replay exactly."""
        import tvm
        from tvm.s_tir import meta_schedule as ms

        self.target = target
        func = without_unknown_rules(func, target)
        self.mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
        self.rule_sets = rule_sets(func, target)
        cuda = target.kind.name == "cuda"
        self.sketches, self._postprocs, self._contexts = [], [], []
        with _CONTEXT_LOCK:
            stub_tensor_intrinsics()
            for kind in self.rule_sets:
                if kind == TENSOR_CORE_RULES:
                    register_cuda_tensor_intrinsics()
                ctx = ms.TuneContext(
                    mod=self.mod,
                    target=target,
                    space_generator=ms.space_generator.PostOrderApply(
                        sch_rules=tensor_core_rules() if kind == TENSOR_CORE_RULES else kind, postprocs=kind, mutator_probs=kind
                    ),
                    task_name=name,
                    num_threads=1,
                    rand_state=SKETCH_SEED,
                )
                drawn = list(ctx.generate_design_space())
                if kind == TENSOR_CORE_RULES:  # where they cannot tensorize, the plain sketches are the same
                    drawn = [sketch for sketch in drawn if _tensorizes(sketch.trace)]
                self.sketches += drawn
                self._postprocs += [list(ctx.space_generator.postprocs)] * len(drawn)
                self._contexts.append(ctx)  # keeps the postprocessors' tune context alive
        if not self.sketches:
            raise InvalidConfig(f"meta-schedule generated no design space for {name}")
        #: Sketches that compute on tensor cores: the thread and register checks below
        #: read plain multi-level tilings; these have their own (:meth:`_tensor_core_implausibility`).
        self.tensor_core_sketches = frozenset(k for k, sketch in enumerate(self.sketches) if _tensorizes(sketch.trace))
        self._iter_names = _block_iter_names(func)
        self._samplers = [self._samplers_of(sketch.trace) for sketch in self.sketches]
        self._plain_knobs = frozenset(
            s.knob for k, samplers in enumerate(self._samplers) if k not in self.tensor_core_sketches for s in samplers
        )

        knobs: dict[str, Knob] = {}
        if len(self.sketches) > 1:
            knobs["sketch"] = Knob("sketch", tuple(range(len(self.sketches))), "categorical")
        for samplers, sketch in zip(self._samplers, self.sketches):
            trace = sketch.trace
            for s in samplers:
                if s.knob in knobs:
                    continue
                inst = trace.insts[s.inst_index]
                if s.kind == "tile":
                    decision = [int(v) for v in trace.decisions[inst]]
                    parts, innermost = int(inst.attrs[0]), int(inst.attrs[1])
                    cands = perfect_tilings(math.prod(decision), parts, max(innermost, decision[-1]))
                    knobs[s.knob] = Knob(s.knob, tuple(list(c) for c in cands), "tile")
                elif s.kind == "compute_at":
                    locations = self._compute_locations(trace, s.inst_index)
                    for other, other_samplers in zip(self.sketches, self._samplers):  # union over sketches
                        for o in other_samplers:
                            if o.knob == s.knob and other is not sketch:
                                locations |= self._compute_locations(other.trace, o.inst_index)
                    knobs[s.knob] = Knob(s.knob, tuple(sorted(locations)), "ordinal")
                else:
                    knobs[s.knob] = Knob(s.knob, s.values, "ordinal" if _all_numbers(s.values) else "categorical")
        super().__init__(list(knobs.values()))
        self._tensor_core_tilings = {k: self._tensor_core_tiling(k) for k in self.tensor_core_sketches}
        #: The 5-part spatial tiles ``[blockIdx, vthread, threadIdx, inner, innermost]`` of
        #: the plain sketches, which the thread and register checks read.
        self._thread_tiles = tuple(
            k for k in self.knobs if k.kind == "tile" and len(k.candidates[0]) == 5 and k.name in self._plain_knobs
        )
        self.space_id = self.shape_id(TEMPLATE + ":" + "+".join(self.rule_sets))
        self.max_threads = int(target.attrs["max_threads_per_block"]) if cuda else 0
        # meta-schedule annotates thread extents to [warp size, max threads]; blocks
        # smaller than a warp are only possible when the whole loop nest is.
        spatial = math.prod(math.prod(k.candidates[0]) for k in self._thread_tiles)
        self.min_threads = min(int(target.attrs.get("thread_warp_size", 32)), spatial) if cuda else 0
        # VerifyGPUCode bounds local memory per block by the register file size.
        self.max_local_bytes = int(target.attrs.get("registers_per_block", 65536)) if cuda else 0
        # ... and shared memory by the target's limit: estimated per sketch from its trace.
        self.max_shared_bytes = int(target.attrs.get("max_shared_memory_per_block", 49152)) if cuda else 0
        self._shared: list[SharedFootprint | None] = [None] * len(self.sketches)
        self._estimate_shared = cuda and estimate_shared
        if self._estimate_shared:
            self._shared = self._shared_estimates()

    def _tensor_core_tiling(self, sketch: int) -> tuple[str, str, str] | None:
        """The tile knobs of a tensor-core sketch's GEMM, in the order the rule samples
        them: rows and columns (5 parts each: blockIdx.y, blockIdx.x, the warps of
        threadIdx.y, then the fragments each warp computes) and depth (3 parts: the outer
        loop the operands are staged at, then the fragments staged each step). None for a
        sketch not laid out so (a batched GEMM has a third spatial tile): no checks there."""
        tiles = [(s.knob, len(self.knob(s.knob).candidates[0])) for s in self._samplers[sketch] if s.kind == "tile"]
        spatial = [name for name, parts in tiles if parts == 5]
        depth = [name for name, parts in tiles if parts == 3]
        return (spatial[0], spatial[1], depth[0]) if len(spatial) == 2 and len(depth) == 1 and len(tiles) == 3 else None

    def _tensor_core_implausibility(self, config: Mapping[str, Any], sketch: int) -> str | None:
        """A tensor-core config's threads (32 per warp) and the float16 operand tiles it
        stages in shared memory, against the device's limits. Both are what the block
        needs at least (the results' staging comes on top), so a config they reject is
        one VerifyGPUCode rejects: on the 16 float16 ResNet-18 layers on sm_90 (2026-11-27,
        ``benchmarks/check_tensor_core_sketches.py --judge 200``) they caught 77% of the
        random tensor-core configs VerifyGPUCode rejected, and none it accepted."""
        tiling = self._tensor_core_tilings.get(sketch)
        if tiling is None:
            return None
        warps, operands = _tensor_core_usage(*(config[name] for name in tiling))
        if WARP_SIZE * warps > self.max_threads:
            return f"{WARP_SIZE * warps} threads ({warps} warps) per block exceed the device limits"
        if operands > self.max_shared_bytes:
            return f"{operands} bytes of shared memory per block exceed the device's {self.max_shared_bytes}"
        return None

    def _tensor_core_rows_ok(self, rows: np.ndarray, sketch: np.ndarray) -> np.ndarray:
        """:meth:`_tensor_core_implausibility` of index rows in bulk, from per-knob tables
        (search checks every point it looks at): True for rows it passes, and for rows of
        other sketches."""
        ok = np.ones(len(rows), dtype=bool)
        for k, tiling in self._tensor_core_tilings.items():
            at = np.flatnonzero(sketch == k)
            if tiling is None or not len(at):
                continue
            columns = [self.knobs.index(self.knob(name)) for name in tiling]

            def table(j: int, value) -> np.ndarray:  # ``value`` of each candidate of tiling knob j, at the rows
                return np.array([value(c) for c in self.knobs[columns[j]].candidates], dtype=np.int64)[rows[at, columns[j]]]

            warps = table(0, lambda t: int(t[2])) * table(1, lambda t: int(t[2]))
            operands = (table(0, lambda t: _span(t, 2)) + table(1, lambda t: _span(t, 2))) * table(2, lambda t: _span(t, 1)) * HALF_BYTES
            ok[at] = (WARP_SIZE * warps <= self.max_threads) & (operands <= self.max_shared_bytes)
        return ok

    # --- knob naming ----------------------------------------------------------------------
    def _samplers_of(self, trace) -> list[_Sampler]:
        """Walk a trace, naming random variables after the blocks and loops they denote."""
        names: dict[Any, str] = {}
        out: list[_Sampler] = []
        used: dict[str, int] = {}
        insts = list(trace.insts)

        def unique(base: str) -> str:
            used[base] = used.get(base, 0) + 1
            return base if used[base] == 1 else f"{base}#{used[base]}"

        for i, inst in enumerate(insts):
            kind = inst.kind.name
            if kind in ("GetSBlock", "GetBlock"):
                names[inst.outputs[0]] = str(inst.attrs[0])
            elif kind == "GetLoops":
                block = names.get(inst.inputs[0], "block")
                axes = self._iter_names.get(block, [])
                for j, loop in enumerate(inst.outputs):
                    names[loop] = f"{block}.{axes[j] if j < len(axes) and len(axes) == len(inst.outputs) else f'l{j}'}"
            elif kind in ("GetConsumers", "GetProducers", "GetChildBlocks", "GetOutputBlocks"):
                base = names.get(inst.inputs[0], "block") if inst.inputs else "block"
                role = kind.removeprefix("Get").rstrip("s").lower()
                for j, blk in enumerate(inst.outputs):
                    names[blk] = f"{base}.{role}{j}"
            elif kind in ("CacheRead", "CacheWrite", "ReIndex"):
                base = names.get(inst.inputs[0], "block")
                names[inst.outputs[0]] = f"{base}.{kind.lower()}{int(inst.attrs[0]) if inst.attrs else 0}"
            elif kind == "Fuse":
                parts = [names.get(x, "loop").split(".")[-1] for x in inst.inputs]
                block = names.get(inst.inputs[0], "loop").rsplit(".", 1)[0]
                names[inst.outputs[0]] = f"{block}.{'_'.join(parts)}"
            elif kind == "Split":
                base = names.get(inst.inputs[0], "loop")
                for j, loop in enumerate(inst.outputs):
                    names[loop] = f"{base}.{j}"
            elif kind == "SamplePerfectTile":
                loop = names.get(inst.inputs[0], f"loop{i}")
                out.append(_Sampler(i, unique(f"{loop}.tile"), "tile", ()))
            elif kind == "SampleComputeLocation":
                block = names.get(inst.inputs[0], "block")
                out.append(_Sampler(i, unique(f"{block}.compute_at"), "compute_at", ()))
            elif kind == "SampleCategorical":
                label = _categorical_label(insts, i, inst.outputs[0], names)
                if label is None:  # a sample nothing uses: not a knob (it changes nothing)
                    continue
                values = tuple(int(v) if _is_int(v) else str(v) for v in inst.attrs[0])
                out.append(_Sampler(i, unique(label), "categorical", values))
        return out

    def _replay(self, trace, wanted: Mapping[int, Any]):
        """A schedule from ``trace`` with the decisions of instructions ``wanted``
        (instruction index -> decision) replaced; the others as the sketch drew them."""
        from tvm.s_tir import Schedule

        index_of = {inst: i for i, inst in enumerate(trace.insts)}

        def provider(inst, _inputs, _attrs, decision):
            i = index_of.get(inst)
            return wanted[i] if i in wanted else decision

        sch = Schedule(self.mod, debug_mask="none")
        trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=provider)
        return sch

    def _compute_locations(self, trace, inst_index: int) -> set[int]:
        """Every location ``SampleComputeLocation`` may be given at ``inst_index``: -2
        (root), -1 (inline) and each loop position of the block's consumers.

        Which positions TVM accepts depends on the tiles: it skips loops of extent 1, and
        moves a location requested inside such loops out to the nearest legal one, which
        is the same program (a unit loop changes nothing about what is computed where).
        So every position is a candidate, and the tiles decide the program it gives."""
        from tvm.s_tir import Schedule

        block_rv = trace.insts[inst_index].inputs[0]
        block_name = next(
            (str(inst.attrs[0]) for inst in trace.insts[:inst_index]
             if inst.kind.name in ("GetSBlock", "GetBlock") and inst.outputs[0].same_as(block_rv)),
            None,
        )
        try:
            plain = Schedule(self.mod, debug_mask="none")
            consumers = [plain.get(c).name_hint for c in plain.get_consumers(plain.get_sblock(block_name))]
            sch = self._replay(trace, {inst_index: -2})
            loops = max(len(sch.get_loops(sch.get_sblock(name))) for name in consumers)
        except Exception:  # a block that is not named in the sketch: keep what it drew
            return {-2, -1, int(trace.decisions[trace.insts[inst_index]])}
        return {-2, -1, *range(loops)}

    # --- validity ---------------------------------------------------------------------------
    def is_plausible(self, config: Mapping[str, Any]) -> bool:
        """On CUDA: threads per block, virtual threads, local and shared memory within
        the limits that VerifyGPUCode enforces (the commonest invalidities), checked
        with no TVM work, so sampling and mutation stay mostly valid."""
        return self.implausibility(config) is None

    def implausibility(self, config: Mapping[str, Any]) -> str | None:
        """Which device limit ``config`` exceeds (None: none that is checked here)."""
        if not self.max_threads:
            return None
        sketch = int(config.get("sketch", 0))
        if sketch in self.tensor_core_sketches:
            return self._tensor_core_implausibility(config, sketch)
        threads, vthreads = self.thread_counts(config)
        if threads > self.max_threads or vthreads > MAX_VTHREAD or threads < self.min_threads:
            return f"{threads} threads / {vthreads} vthreads per block exceed the device limits"
        local = threads * vthreads * self.thread_work(config) * 4
        if local > self.max_local_bytes:
            return f"{local} bytes of registers per block exceed the device's {self.max_local_bytes}"
        shared = self.shared_bytes(config)
        if shared is not None and shared > self.max_shared_bytes:
            return f"{shared} bytes of shared memory per block exceed the device's {self.max_shared_bytes}"
        return None

    def plausible_rows(self, rows: Any) -> np.ndarray:
        """:meth:`is_plausible` of many index rows at once, from per-knob tables of the
        thread and register counts (the shared-memory estimate, where a sketch has one,
        still goes config by config for the rows that pass the rest): search checks every
        point it looks at, and one by one that was a tenth of a CUDA replay's time."""
        return self._plausible_rows(rows, self._shared)

    def _plausible_rows(self, rows: Any, shared: list[SharedFootprint | None]) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64).reshape(-1, len(self.knobs))
        ok = np.ones(len(rows), dtype=bool)
        if not self.max_threads or not len(rows):
            return ok
        threads = np.ones(len(rows), dtype=np.int64)
        vthreads = np.ones(len(rows), dtype=np.int64)
        work = np.ones(len(rows), dtype=np.int64)
        for k, table in enumerate(self._thread_tables()):
            if table is not None:
                vthreads *= table[0][rows[:, k]]
                threads *= table[1][rows[:, k]]
                work *= table[2][rows[:, k]]
        ok &= (threads <= self.max_threads) & (vthreads <= MAX_VTHREAD) & (threads >= self.min_threads)
        ok &= threads * vthreads * work * 4 <= self.max_local_bytes
        if self.tensor_core_sketches:  # their own checks
            sketch = rows[:, self.knobs.index(self.knob("sketch"))]
            on_tensor_cores = np.isin(sketch, list(self.tensor_core_sketches))
            ok = np.where(on_tensor_cores, self._tensor_core_rows_ok(rows, sketch), ok)
        if any(f is not None for f in shared):
            for i in np.flatnonzero(ok):
                nbytes = _shared_bytes(shared, self.from_indices(rows[i]))
                if nbytes is not None and nbytes > self.max_shared_bytes:
                    ok[i] = False
        return ok

    def _thread_tables(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray] | None]:
        """Per knob: (virtual threads, threads, per-thread accumulators) of each candidate
        for a 5-part spatial tile, as :meth:`thread_counts` and :meth:`thread_work` read
        them; None for other knobs."""
        tables = self.__dict__.get("_thread_tables_cache")
        if tables is None:
            tables = []
            thread_tiles = {k.name for k in self._thread_tiles}
            for knob in self.knobs:
                if knob.name in thread_tiles:
                    tables.append((
                        np.array([int(c[1]) for c in knob.candidates], dtype=np.int64),
                        np.array([int(c[2]) for c in knob.candidates], dtype=np.int64),
                        np.array([int(c[3]) * int(c[4]) for c in knob.candidates], dtype=np.int64),
                    ))
                else:
                    tables.append(None)
            self.__dict__["_thread_tables_cache"] = tables
        return tables

    @property
    def shared_estimated(self) -> tuple[bool, ...]:
        """Per sketch: whether its shared memory is estimated (else VerifyGPUCode alone judges it)."""
        return tuple(f is not None for f in self._shared)

    def _shared_estimates(self) -> list[SharedFootprint | None]:
        """Each sketch's shared-memory footprint (:mod:`autotune.templates.shared_memory`)."""
        from tvm.s_tir import Schedule

        plain = Schedule(self.mod, debug_mask="none")
        return [
            None if k in self.tensor_core_sketches  # fragments and padded layouts: not read here
            else SharedFootprint.of_sketch(sketch.trace, {s.inst_index: s.knob for s in samplers if s.kind == "tile"}, plain)
            for k, (sketch, samplers) in enumerate(zip(self.sketches, self._samplers))
        ]

    def fits_device_rows(self, rows: Any) -> np.ndarray:
        """:meth:`plausible_rows` with the shared-memory estimate also where the space
        leaves it out of its search (``estimate_shared=False``), which then draws as it
        did, while history's configs mapped onto the layer are judged as now."""
        if self._estimate_shared or not self.max_threads:
            return self.plausible_rows(rows)
        estimates = self.__dict__.get("_estimates_for_history")
        if estimates is None:
            estimates = self.__dict__["_estimates_for_history"] = self._shared_estimates()
        return self._plausible_rows(rows, estimates)

    def shared_bytes(self, config: Mapping[str, Any]) -> int | None:
        """Shared memory ``config`` allocates per thread block on CUDA, estimated from
        its sketch (:mod:`autotune.templates.shared_memory`); None where there is no estimate."""
        return _shared_bytes(self._shared, config)

    def thread_work(self, config: Mapping[str, Any]) -> int:
        """Accumulators each thread keeps in registers: the two innermost spatial parts."""
        work = 1
        for knob in self._thread_tiles:
            value = config[knob.name]
            work *= int(value[3]) * int(value[4])
        return work

    def thread_counts(self, config: Mapping[str, Any]) -> tuple[int, int]:
        """(threads per block, virtual threads) of a CUDA multi-level tiling config:
        spatial tiles have 5 parts [blockIdx, vthread, threadIdx, inner, innermost]."""
        threads = vthreads = 1
        for knob in self._thread_tiles:
            value = config[knob.name]
            vthreads *= int(value[1])
            threads *= int(value[2])
        return threads, vthreads

    # --- realization -------------------------------------------------------------------------
    def default_config(self) -> Config:
        """A valid point: the first sketch's own decisions if they pass, else the first
        valid point of a seeded random walk (sketch decisions are random draws)."""
        import numpy as np

        for k, (sketch, samplers) in enumerate(zip(self.sketches, self._samplers)):
            trace = sketch.trace
            cfg: Config = {"sketch": k} if "sketch" in self._by_name else {}
            for s in samplers:
                decision = trace.decisions[trace.insts[s.inst_index]]
                if s.kind == "tile":
                    cfg[s.knob] = [int(v) for v in decision]
                elif s.kind == "compute_at":
                    cfg[s.knob] = int(decision)
                else:
                    cfg[s.knob] = s.values[int(decision)]
            for knob in self.knobs:  # knobs only other sketches use: their first candidate
                cfg.setdefault(knob.name, knob.candidates[0])
            cfg = self.from_indices(self.to_indices(cfg))
            if self.applies(cfg):
                return cfg
        rng = np.random.default_rng(0)
        for _ in range(500):
            cfg = self.random_config(rng)
            if self.applies(cfg):
                return cfg
        raise InvalidConfig("no valid point found in 500 draws")

    def applies(self, config: Mapping[str, Any]) -> bool:
        """Whether ``config`` gives a program: the sketch replays and every
        postprocessor (on CUDA, GPU code verification last) accepts it."""
        try:
            self.apply(config)
        except InvalidConfig:
            return False
        return True

    def apply(self, config: Mapping[str, Any], *, screen: bool = True):
        """Replay the sketch with ``config``'s decisions; return the scheduled IRModule.
        ``screen=False`` skips the space's own device-limit checks (:meth:`implausibility`)
        and leaves every verdict to the postprocessors, as a judge of those checks."""
        if not self.contains(config):
            raise InvalidConfig("config does not belong to this space")
        problem = self.implausibility(config) if screen else None
        if problem is not None:
            raise InvalidConfig(problem)
        k = int(config.get("sketch", 0))
        trace = self.sketches[k].trace
        wanted: dict[int, Any] = {}
        for s in self._samplers[k]:
            value = config[s.knob]
            if s.kind == "tile":
                wanted[s.inst_index] = [int(v) for v in value]
            elif s.kind == "compute_at":
                wanted[s.inst_index] = int(value)  # TVM moves it out of unit loops
            else:
                wanted[s.inst_index] = s.values.index(value)
        try:
            sch = self._replay(trace, wanted)
        except Exception as err:  # a decision the schedule primitives refuse
            raise InvalidConfig(f"schedule replay failed: {_first_line(err)}") from None

        for post in self._postprocs[k]:
            try:
                ok = post.apply(sch)
            except Exception as err:
                raise InvalidConfig(f"{type(post).__name__} failed: {_first_line(err)}") from None
            if not ok:
                raise InvalidConfig(f"rejected by {type(post).__name__}")
        return sch.mod


def _categorical_label(insts, i: int, rv, names: dict) -> str | None:
    """Name a categorical sample after what consumes it (usually an annotation)."""
    for later in insts[i + 1 :]:
        if later.kind.name == "Annotate" and any(x.same_as(rv) for x in later.inputs[1:]):
            target = names.get(later.inputs[0], "block")
            key = str(later.attrs[0]).split(".")[-1]
            return f"{target}.{key}"
        if later.kind.name == "Split" and any(x.same_as(rv) for x in later.inputs[1:] if x is not None):
            return f"{names.get(later.inputs[0], 'loop')}.split"
        if any(x is not None and x.same_as(rv) for x in list(later.inputs) if hasattr(x, "same_as")):
            return f"{later.kind.name.lower()}{i}"
    return None


def without_unknown_rules(func, target):
    """``func`` without the ``schedule_rule`` annotations no function is registered for.

    TOPI marks blocks for hand-written rules (pooling: ``meta_schedule.pool_max``), which
    meta-schedule's ``ApplyCustomRule`` looks up per target key. Missing, it logs a
    warning on every design-space generation and removes the mark so the generic rules
    apply. Removing it first gives the same space, without the warning in the user's
    tune output.
    """
    import tvm_ffi
    from tvm.s_tir import Schedule

    keys = [str(k) for k in target.keys]
    sch = Schedule(func)
    changed = False
    for rv in sch.get_child_blocks(sch.get_sblock("root")):
        rule = sch.get(rv).annotations.get("schedule_rule")
        if rule is None or str(rule) == "None":
            continue
        names = [f"s_tir.meta_schedule.{key}.{rule}" for key in keys]
        if not any(tvm_ffi.get_global_func(n, allow_missing=True) for n in names):
            sch.unannotate(rv, "schedule_rule")
            changed = True
    return sch.mod["main"] if changed else func


def _block_iter_names(func) -> dict[str, list[str]]:
    from tvm.s_tir import Schedule

    sch = Schedule(func)
    out: dict[str, list[str]] = {}
    for b in sch.get_child_blocks(sch.get_sblock("root")):
        block = sch.get(b)
        out[block.name_hint] = [iv.var.name.removeprefix("v_") for iv in block.iter_vars]
    return out


def _is_int(v: Any) -> bool:
    try:
        return float(v) == int(v)
    except (TypeError, ValueError):
        return False


def _all_numbers(values) -> bool:
    return all(isinstance(v, (int, float)) for v in values)


def _first_line(err: BaseException) -> str:
    lines = [ln for ln in str(err).strip().splitlines() if ln.strip()]
    for ln in lines:
        if "Error" in ln or "error" in ln:
            return ln.strip()[:300]
    return (lines[-1] if lines else type(err).__name__)[:300]
