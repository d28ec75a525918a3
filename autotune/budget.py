"""How a model's trial budget is spread over its layers: which layer gets the next trials.

Two schedules behind one interface (:class:`Schedule`):

- ``roofline``: shares fixed before any trial, in proportion to each layer's roofline time
  (what the hardware could do at best), tuned one layer after another. The roofline is a
  poor guide where a layer's reachable time is far from it: at 64 trials on MobileNetV2
  it picked six ReLU6 layers over six 1x1 projections that measure heavier, and the
  tuned model took 1.6-2.3x the time the adaptive split's did
  (``benchmarks/bench_budget_split.py``).
- ``adaptive``: the next chunk of trials goes to the layer whose trials are expected to
  take the most model time off per trial, re-estimated after every chunk (the idea of
  Ansor's task scheduler, Zheng et al., OSDI 2020, section 6). A layer's value is its
  time in the model now (calls x best, or x its measured default while untried) times
  the fraction a chunk is expected to take off it, over the chunk's trials. The
  fractions are calibrated on this run: a first chunk is expected to do what first
  chunks did to the defaults of this run's layers of the op class (a 10-50x drop on a
  CPU); a later chunk what the layer's own last three later chunks did, averaged with
  what later chunks did run-wide (a few percent; each layer's mean counted once) as
  one more. So every layer worth it gets a first chunk before trials go deeper
  (which layers, if the budget cannot reach all, decided heaviest measured first; the
  order they are tuned in the model's, so each finds the layer before it, often its
  like, just tuned); and a deeper chunk goes where measured time and recent gains are
  largest. A layer history covers closely (a
  match at the guided GA's threshold, often the twin of a layer just tuned) gets a
  first chunk of one trial, a *probe*, while the budget cannot give every layer a
  first chunk: its tuner's first proposal is history's winner mapped onto it, so one
  trial is expected to do most of what a first chunk does; the rest of its first chunk
  comes before any layer goes deeper, or sooner where it is worth more than another
  layer's first chunk.
  Ansor's own estimates (the gap to what similar layers reach, closed at the pace of
  ``1 / trials``) assume warm-ups of 64 trials a layer; at 4 they over-value more
  trials on a layer already tuned, and a ResNet-18 tune at 64 trials left its 1x1
  convolutions and its dense layer untried.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Protocol

BudgetSplit = Literal["adaptive", "roofline"]
BUDGET_SPLITS: tuple[str, ...] = ("adaptive", "roofline")

#: Before this run has measured any: the fraction of a layer's default time its first
#: chunk of trials is expected to take off (a 4x speedup), and the fraction of its time a
#: later chunk is expected to take off. Each is worth PRIOR_WEIGHT measured chunks.
FIRST_CHUNK_GAIN = 0.75
LATER_CHUNK_GAIN = 0.1
PRIOR_WEIGHT = 2.0
#: How many of a layer's own latest later chunks its next one is expected from, beside
#: the run-wide figure (counted as one more). With its last chunk alone against that
#: figure, a heavy layer that had stopped gaining kept half the run-wide expectation:
#: one ConvNeXt-Tiny tune of 512 trials gave 384 to a matmul whose last 368 took 3.00 ms
#: to 2.89 ms, and 4 to most other layers. Over six seeds it now gets 192 to 264 trials
#: instead of 240 to 372; the tuned model's time was no different beyond noise
#: (README, "Models exported by PyTorch").
OWN_CHUNKS = 3


#: Trials at least for every tuned layer (``--min-trials``), and the measured configs
#: from which a winner is reused as it is (tune) or counted as more than thin (compile).
DEFAULT_MIN_TRIALS = 4


def split_budget(weights: list[float], budget: int, min_trials: int) -> list[int]:
    """Trials per layer in proportion to estimated time, at least ``min_trials`` each for
    the layers that get any; when the budget cannot cover everyone, the heaviest win."""
    n = len(weights)
    if n == 0 or budget <= 0:
        return [0] * n
    order = sorted(range(n), key=lambda i: -weights[i])
    funded = order[: max(1, min(n, budget // max(min_trials, 1)))]
    total = sum(weights[i] for i in funded) or 1.0
    alloc = [0] * n
    spare = budget - min_trials * len(funded)
    shares = {i: spare * weights[i] / total for i in funded}
    for i in funded:
        alloc[i] = min_trials + int(math.floor(shares[i]))
    left = budget - sum(alloc)
    for i in sorted(funded, key=lambda i: -(shares[i] - math.floor(shares[i]))):
        if left <= 0:
            break
        alloc[i] += 1
        left -= 1
    return alloc


def estimate_seconds(layer, peak_flops: float, peak_bw: float) -> float:
    """Roofline time of one call, times how often the model calls it."""
    return layer.occurrences * roofline_seconds(layer, peak_flops, peak_bw)


def roofline_seconds(layer, peak_flops: float, peak_bw: float) -> float:
    """The least time one call can take: its FLOPs at the compute peak or its bytes at the
    memory peak, whichever is longer."""
    return max(layer.flops / peak_flops, layer.bytes / peak_bw)


@dataclass
class LayerProgress:
    """What a schedule knows of one layer: its weight in the model and its tuning so far."""

    name: str
    occurrences: int
    flops: float
    op_class: str
    roofline_s: float  # one call at the roofline
    default_s: float | None = None  # TVM's default schedule, measured (None: unknown)
    curve: list[float | None] = field(default_factory=list)  # best latency after each trial
    allotted: int = 0  # trials given so far
    exhausted: bool = False  # the tuner has nothing left to propose, or nothing measures
    starts: list[int] = field(default_factory=list)  # trials done when each chunk was given
    #: how well history covers it now (``history.match``'s score), kept current by the
    #: tune loop until the layer's first chunk
    match: float = 0.0
    probed: bool = False  # its first chunk was a one-trial probe (see AdaptiveSchedule)

    @property
    def trials(self) -> int:
        return len(self.curve)

    @property
    def best(self) -> float | None:
        return self.curve[-1] if self.curve else None

    def latency(self) -> float:
        """The layer's time per call as it stands: the faster of its best and its default
        (the model runs TVM's default where no tuned config beat it), else a guess of ten
        times its roofline (an unscheduled kernel is rarely closer). Its best alone made a
        layer whose first configs all ran slower than its default look 280x heavier than
        it is: an embedding model's 22 ns mean took all 16 trials, its 60 ns dense none."""
        known = [v for v in (self.best, self.default_s) if v is not None and v > 0]
        return min(known) if known else 10.0 * self.roofline_s

    def chunks(self) -> list[tuple[int, int]]:
        """(first trial, end) of each chunk measured so far, in trials (end exclusive)."""
        ends = [*self.starts[1:], self.trials]
        return [(start, end) for start, end in zip(self.starts, ends) if end > start]

    def chunk_gains(self) -> list[float | None]:
        """The fraction of its time each chunk took off: the first one of the default's,
        each later one of the best before it (None where either is unknown)."""
        gains: list[float | None] = []
        for k, (start, end) in enumerate(self.chunks()):
            before = self.default_s if k == 0 else self.curve[start - 1]
            after = self.curve[end - 1]
            gains.append(max(0.0, 1.0 - after / before) if before and after is not None else None)
        return gains

    def recent_gains(self, count: int) -> list[float]:
        """The fractions of its time the layer's last ``count`` chunks after its first
        took off (the first one's drop from the default schedule says nothing of later
        chunks: on a CPU it is 10-50x)."""
        return [g for g in self.chunk_gains()[1:] if g is not None][-count:]


class Schedule(Protocol):
    """Hands out the budget a chunk at a time; the tune loop measures the chunk, updates
    the layer's :class:`LayerProgress`, and asks again until ``None``."""

    name: str
    #: each layer's trials where fixed before tuning (none where they are decided as it goes)
    planned: dict[str, int]

    def next_chunk(self, layers: dict[str, LayerProgress]) -> tuple[str, int] | None:
        """The layer to tune next and how many trials to give it now; None: budget spent."""

    def done_with(self, layer: LayerProgress) -> bool:
        """True once the layer can get no more trials (so it can be verified and closed)."""

    def refund(self, trials: int) -> int:
        """Trials of the last chunk that were not spent (the layer ran out of candidates);
        returns how many go back to the budget for other layers."""


class RooflineSchedule:
    """Shares fixed up front by roofline time; layers tuned one after another, in order."""

    name = "roofline"

    def __init__(self, layers: list[LayerProgress], budget: int, *, min_trials: int, batch: int) -> None:
        estimates = [p.occurrences * p.roofline_s for p in layers]
        self.order = [p.name for p in layers]
        self.planned = dict(zip(self.order, split_budget(estimates, budget, min_trials)))
        self.batch = max(1, batch)

    def next_chunk(self, layers: dict[str, LayerProgress]) -> tuple[str, int] | None:
        for name in self.order:
            p = layers[name]
            if not self.done_with(p):
                return name, min(self.batch, self.planned[name] - p.allotted)
        return None

    def done_with(self, layer: LayerProgress) -> bool:
        return layer.exhausted or layer.allotted >= self.planned[layer.name]

    def refund(self, trials: int) -> int:
        """A layer's share is its own: what it could not spend is not passed on."""
        return 0


class AdaptiveSchedule:
    """The next chunk goes where it is expected to save the most model time per trial,
    each expectation calibrated on this run's own measurements (see the module docstring)."""

    name = "adaptive"

    def __init__(
        self, layers: list[LayerProgress], budget: int, *, min_trials: int, batch: int, probe_at: float | None = None
    ) -> None:
        self.planned: dict[str, int] = {}
        self.probe_at = probe_at
        self.position = {p.name: i for i, p in enumerate(layers)}  # the model's order
        # ties go heaviest roofline first
        self.order = [p.name for p in sorted(layers, key=lambda p: -p.occurrences * p.roofline_s)]
        self.left = budget
        self.min_trials = max(1, min_trials)
        self.batch = max(1, batch)
        # whether the trials left cannot give every layer not yet visited a full first
        # chunk (kept current by next_chunk): probes are only for such a budget
        self.short = budget < self.min_trials * len(layers)

    def is_probe(self, layer: LayerProgress) -> bool:
        """Whether the layer's first chunk is a probe: history covers it closely (a match
        at ``probe_at`` or above: the guided GA's), so one trial, the closest source
        layer's winner mapped (``TuneSession._probe_config``), is expected to do most of
        what a first chunk does. ResNet-18's residual blocks come in pairs of such twins (the
        same convolution, one with the residual add fused): a 24-trial tune at 32x32
        left two of them at TVM's default, 10x and 20x slower than the twin tuned beside
        them; tuned later with four trials each, the guided GA's first trial was its best
        on one and 16% above it on the other. The probe is a stopgap for a budget that
        cannot reach every layer: only while the trials left cannot give every layer not
        yet visited a full first chunk (``short``), and the rest of the first chunk
        follows when trials remain, before any layer goes deeper
        (:meth:`completes_probe`)."""
        return self.short and self.probe_at is not None and layer.allotted == 0 and layer.match >= self.probe_at

    def completes_probe(self, layer: LayerProgress) -> bool:
        """Whether the layer's next chunk is the rest of a probed first chunk."""
        return layer.probed and 0 < layer.allotted < self.min_trials

    def chunk_for(self, layer: LayerProgress) -> int:
        """A first visit gets ``min_trials`` (so the budget reaches many layers), or one
        trial if it is a probe (:meth:`is_probe`); a probed layer's next visit the rest of
        a first chunk; later visits a measuring batch."""
        if not layer.allotted:
            return min(self.left, 1 if self.is_probe(layer) else self.min_trials)
        if self.completes_probe(layer):
            return min(self.left, self.min_trials - layer.allotted)
        return min(self.left, self.batch)

    @staticmethod
    def _calibration(layers: dict[str, LayerProgress]) -> "_Calibration":
        """What chunks did in this run so far: the fraction of its default time a first
        chunk took off (per op class, and over all), the same for probes, the fraction of
        its time a later chunk took off (over all, each layer's mean counted once: a layer
        given many chunks must not make the figure its own), and what the trials after
        the first of a full first chunk took off (what the rest of a probed layer's first
        chunk is expected to do), each blended with a prior worth a few observations (a
        probe's prior: what first chunks did; the rest's: what later chunks do)."""
        first: dict[str, list[float]] = {}
        probes: list[float] = []
        later: list[float] = []  # per layer, the mean of its later chunks' gains
        rest: list[float] = []
        for p in layers.values():
            gains = p.chunk_gains()
            if gains and gains[0] is not None:
                (probes if p.probed else first.setdefault(p.op_class, [])).append(gains[0])
            deeper = [g for g in gains[1:] if g is not None]
            if deeper:
                later.append(sum(deeper) / len(deeper))
            if not p.probed and p.chunks() and p.chunks()[0][1] > 1:  # a full first chunk
                one, end = p.curve[0], p.curve[p.chunks()[0][1] - 1]
                if one and end is not None:
                    rest.append(max(0.0, 1.0 - end / one))

        def blend(seen: list[float], prior: float, weight: float) -> float:
            return (prior * weight + sum(seen)) / (weight + len(seen))

        overall = blend([g for gains in first.values() for g in gains], FIRST_CHUNK_GAIN, PRIOR_WEIGHT)
        per_class = {c: blend(gains, overall, PRIOR_WEIGHT) for c, gains in first.items()}
        return _Calibration(
            per_class, overall, blend(probes, overall, PRIOR_WEIGHT),
            blend(later, LATER_CHUNK_GAIN, PRIOR_WEIGHT), blend(rest, LATER_CHUNK_GAIN, PRIOR_WEIGHT),
        )

    def gain_per_trial(self, layer: LayerProgress, calibration: "_Calibration") -> float:
        """Expected model seconds saved per trial of this layer's next chunk."""
        per_class, first_overall, probe, later, rest = calibration
        n = self.chunk_for(layer)
        if n <= 0:
            return 0.0
        if layer.trials == 0:
            fraction = probe if self.is_probe(layer) else per_class.get(layer.op_class, first_overall)
        elif self.completes_probe(layer):
            fraction = rest
        else:
            # the run-wide figure counts as one chunk beside the layer's own recent ones
            own = layer.recent_gains(OWN_CHUNKS)
            fraction = (later + sum(own)) / (1 + len(own))
        return layer.occurrences * layer.latency() * fraction / n

    def next_chunk(self, layers: dict[str, LayerProgress]) -> tuple[str, int] | None:
        if self.left <= 0:
            return None
        open_ = [layers[n] for n in self.order if not layers[n].exhausted]
        if not open_:
            return None
        self.short = self.left < self.min_trials * sum(1 for p in open_ if not p.allotted)
        calibration = self._calibration(layers)
        value = {p.name: self.gain_per_trial(p, calibration) for p in open_}
        pick = max(open_, key=lambda p: value[p.name])  # first in self.order among equals
        unfinished = [p for p in open_ if self.completes_probe(p)]
        if pick.allotted and not self.completes_probe(pick) and unfinished:
            # The rest of a probed first chunk goes before any layer goes deeper: with
            # it only valued against deeper chunks, most of ResNet-18's probed twins
            # stayed at one trial while 9 to 20 went to one large convolution, and at 64
            # trials the tuned model ended slower than without probes on 3 seeds of 4
            # (without over with 0.96, 0.84, 0.89 by the tuned sums; 1.18 on the other).
            pick = min(unfinished, key=lambda p: self.position[p.name])
        elif pick.allotted == 0:
            # Which layers get a first chunk before any goes deeper is decided heaviest
            # first, as far as the budget reaches; they are tuned in the model's order, as
            # the roofline split tunes them: a network's neighbouring layers are often alike
            # (a residual block's convolutions), and the guided tuners draw on the one just
            # tuned. With the same trials going to nearly the same layers, ResNet-18's layers
            # ended slower in sum than with the roofline split when tuned heaviest first
            # (10-33%, 3 seeds of 3) or lightest first (4-73%, 5 seeds of 6).
            deeper = max((value[p.name] for p in open_ if p.allotted), default=0.0)
            first = sorted((p for p in open_ if not p.allotted and value[p.name] >= deeper), key=lambda p: -value[p.name])
            reach, spent = [], 0
            for p in first:  # as far as the budget reaches (a probe costs one trial)
                spent += self.chunk_for(p)
                if reach and spent > self.left:
                    break
                reach.append(p)
            pick = min(reach, key=lambda p: self.position[p.name])
        n = self.chunk_for(pick)
        if self.is_probe(pick):
            pick.probed = True
        self.left -= n
        pick.starts.append(pick.trials)
        return pick.name, n

    def done_with(self, layer: LayerProgress) -> bool:
        return layer.exhausted or self.left <= 0

    def refund(self, trials: int) -> int:
        self.left += max(0, trials)
        return max(0, trials)


class _Calibration(NamedTuple):
    """Expected fraction of a layer's time a chunk takes off, from this run's chunks."""

    first_per_class: dict[str, float]
    first: float
    probe: float
    later: float
    rest_of_first: float


def make_schedule(
    kind: str, layers: list[LayerProgress], budget: int, *, min_trials: int, batch: int, probe_at: float | None = None
) -> Schedule:
    """``probe_at``: the match score from which the adaptive split probes a layer with one
    trial first (None: never; the roofline split never does)."""
    if kind == "adaptive":
        return AdaptiveSchedule(layers, budget, min_trials=min_trials, batch=batch, probe_at=probe_at)
    if kind == "roofline":
        return RooflineSchedule(layers, budget, min_trials=min_trials, batch=batch)
    raise ValueError(f"unknown budget split {kind!r}; expected one of {', '.join(BUDGET_SPLITS)}")
