"""Genetic search: plain DEAP GA ("ga") and the history-guided GA ("gga").

Genes are knob candidate indices, fitness is measured throughput (1 / latency; failed
configs get 0). Ask/tell drive generations: :meth:`ask` hands out the current
generation's unmeasured individuals, :meth:`tell` sets their fitness, and once they are
used up the next generation is bred (elites of everything measured so far carry over
without re-measurement). Offspring that repeat a measured or asked config are mutated
again, so every asked individual is new.

The guided GA adds history in three places, the first two after the DAC 2020
history-based tuner:

* the first population is history's best configs mapped onto this space, by turns
  across source workloads (:func:`autotune.search.warm_start.history_seed_order`), a
  ``seed_frac`` of it (all, by default); where history holds fewer distinct configs,
  draws from the elite-gene dictionary and random individuals fill the rest. Seeding
  half (the default until run 22) left ResNet-18's conv2d3 its best history config,
  28th in that order, only by the third generation's immigrants (trial 89 to 92); with
  the whole population from history it is measured at trial 28 in every seed, and no
  layer's final latencies differ by a rank test (runs 22 and 23, six llvm layers, ten
  seeds). Every history config has measured well on a similar layer; a random one
  rarely has: keeping 4 places for dictionary and uniform draws (``seed_frac=0.875``)
  left MobileNetV2's finals higher (p = 0.006, run 23). Random genes still enter
  through mutation. The population is *measured* best first as a ranker trained on the
  kept priors predicts for this layer (:class:`autotune.search.warm_start.HistoryRanker`), each
  source's best first (``measure_order="hedged"``, the default since run 40; ``"model"``
  the ranker's order alone, ``"turns"`` warm-start order): the same 32 measurements,
  good ones sooner, which matters most when a layer's budget is smaller than one
  population. One source per turn at the head, because the ranker can overrate one: a
  layer's own counterpart at 112x112 filled five of MobileNetV2's first six trials with
  58 to 111 us configs (best known 4.15 us, run 38b). In exact replays of five
  experiments on three CPUs (run 40) the hedge reached the plain GA's final sooner or
  as soon on every layer (conv2d4: trial 2 instead of 5 to 9), and cold XGBoost's later
  on one, conv2d7 (trial 9 or 10 instead of 5 or 6, on two CPUs);
* an *elite-gene dictionary* -- per knob, a probability over candidates, built from the
  elite individuals of the current population and the elite records of each prior
  workload, each weighted by normalized performance and parallelism (threads per block:
  configs that fill the machine transfer better across shapes) -- steers mutation (draw
  from it with probability ``p_elite``, else uniformly) and crossover (each child takes,
  per gene, one of its parents' genes with odds given by the dictionary). The priors'
  share of the dictionary decays with each generation as the population's own elites
  become evidence;
* every later generation takes a few *immigrants* (``immigrant_frac`` of it): history's
  next unmeasured configs, by turns across the source workloads. The first population
  holds only the top four or so configs of each source.

Beyond the paper, every later generation is *screened* (``screen``, default 4): the
operators breed four children per place, and the quarter that a surrogate scores best
are measured, best first. The surrogate is the history ranker that orders the first
population, corrected by a model of the layer's own results (margin transfer, as in
transfer XGBoost). It only chooses among children bred from measured parents, so unlike
a model searching the whole space it cannot lead far from evidence. Run 26 (six llvm
layers, ten seeds, real measurements), by a rank test: no layer's finals higher, lower
on conv2d1 and MobileNetV2 (p = 0.0023, 0.012; MobileNetV2's median 16.4 to 14.7 us), and
cold XGBoost's final latency reached sooner on conv2d7 (trial 60 to 38) and MobileNetV2
(65.5 to 52). ``screen=1`` measures the children as bred.

Where history is shallow (its sources hold a median under 128 measured configs each,
:func:`autotune.search.tuner.shallow_history`) the guided GA measures its first population,
history's configs, and then hands the layer to transfer XGBoost (``handover``: the
population size by default there, never where history is deep; 0 never), told every
result, with one-knob moves off the best config (``HANDOVER_LOCAL_SHARE``;
``handover_local_share`` sets it, and without them the hand-over gained nothing on the
layers where it gains, run 50). A short
search's winners are unconverged, and a GA breeding around them stays near them. On a
32-deep `znver4` history (run 46b, ten seeds) the hand-over ended lower on the first
conv and conv2d1 (196.4 against 209.2 us, 152.8 against 156.2) and higher on no layer,
with the same trials to the plain GA's final (40.7x in the median); on one of ResNet-50
and the target models' own layers, 32 deep (run 47b), lower on conv2d1 and conv2d4
(154.8 against 177.9, 172.5 against 183.5) and higher on none; 64 deep (run 48), lower
on conv2d3 and higher on none.

There, too, a quarter of the first population (``model_seeds``: ``pop_size // 4`` where
history is shallow, 0 where it is deep) goes to transfer XGBoost's first batch, the
configs that tuner with the same seed would measure first; history's mapped configs by
turns take the rest, measured by turns with them (history's first). A mapped winner
carries its source layer's tile shapes; a model of all sources with layer features does
not. On the H100's history (2026-11-26) no config mapped from ResNet-50's conv2d7, 256
deep, beat 10.6 us on ResNet-18's conv2d3, where the plain GA ends at 8.9 and transfer
XGBoost's first eight reach 8.3: in a replay on the measured file (decided within the
answers the file holds) the guided GA with four such picks reached the plain GA's final
at a median trial 4 instead of 31. On LLVM, measured (run 52, run 46's 32-deep history,
ten seeds): 46.5x instead of 1.8x on conv2d3 and 7.8x instead of 2.5x on conv2d7, 33x
and 19x instead of 50x and 32x on the first conv and conv2d4 (a model pick measured
second puts history's winner third), the same on the other two; finals no different on
any layer by a rank test. Half the population gave the same ratios and a higher final
on MobileNetV2 (10.8 against 9.9 us, p = 0.021). With each target's nearest neighbour
256 deep (run 53, the shape of the H100 plan's history): 70.0x against 71.4x in the
median, finals no different.

``rank_sources=True`` also weights each source's share of the dictionary and of the
immigrants by its chance of ranking the layer's results best
(:mod:`autotune.search.source_weights`), as transfer XGBoost does by default. It is off here
because it measured worse (run 10, 100 trials, 5 seeds, six llvm layers): the source
that ranks a layer's results best is not always the one holding the config that
transfers. On ResNet-18's conv2d3 all five seeds reached history's 151.2 us config,
from a source that ranks the results poorly, with immigrants by similarity (median
final 151.2 us), and only one seed with weighted immigrants (179.6 us). Over the six
layers, weighting left the median final lower on one (conv2d1, by 0.3%), equal on two
and higher on three (by 0.5% to 19%).

DEAP operators draw from Python's global ``random``; each tuner swaps in its own state
around DEAP calls so runs are reproducible per seed and tuners don't disturb each other
(not thread-safe: drive one tuner per thread at a time).
"""

from __future__ import annotations

import contextlib
import math
import random
from itertools import zip_longest
from typing import Any, Iterator, Sequence

import numpy as np
from deap import base, creator, tools

from autotune.search.cost_model import CostModel
from autotune.search.features import encoder_for
from autotune.search.repair import judge_mapped_priors
from autotune.search.similarity import SIMILARITY_FLOOR, filter_priors, leaves_out_unrunnable, only_runnable
from autotune.search.source_weights import SourceRankers
from autotune.search.tuner import PriorRecord, TrialResult, Tuner, prior_groups, shallow_history
from autotune.search.warm_start import HistoryRanker, history_seed_order
from autotune.templates.space import Config, KnobSpace

__all__ = ["GATuner", "GuidedGATuner"]

if not hasattr(creator, "AutotuneFitnessMax"):
    creator.create("AutotuneFitnessMax", base.Fitness, weights=(1.0,))
if not hasattr(creator, "AutotuneIndividual"):
    creator.create("AutotuneIndividual", list, fitness=creator.AutotuneFitnessMax)

Key = tuple[int, ...]

#: Transfer XGBoost's share of one-knob moves off the best config once it takes a shallow
#: history's layer from the guided GA (run 46b measured the hand-over with it).
HANDOVER_LOCAL_SHARE = 0.5


class GATuner(Tuner):
    """Generational GA: tournament selection, uniform crossover, redraw mutation, elitism."""

    name = "ga"
    guided = False

    def __init__(
        self,
        space: KnobSpace,
        *,
        seed: int = 0,
        priors: Sequence[PriorRecord] = (),
        layer_features: Sequence[float] = (),
        pop_size: int = 32,
        n_elite: int = 4,
        tournsize: int = 3,
        cxpb: float = 0.9,
        cx_indpb: float = 0.5,
        mut_indpb: float | None = None,
    ) -> None:
        super().__init__(space, seed=seed, priors=priors, layer_features=layer_features)
        self.pop_size = max(2, pop_size)
        self.n_elite = min(n_elite, self.pop_size - 1)
        self.cxpb = cxpb
        self.cx_indpb = cx_indpb
        self.sizes = [len(k) for k in space.knobs]
        self.mut_indpb = mut_indpb if mut_indpb is not None else max(1.0 / len(self.sizes), 0.1)
        self._py_state = random.Random(seed).getstate()
        self._encoder = encoder_for(space)
        self.toolbox = base.Toolbox()
        self.toolbox.register("select", tools.selTournament, tournsize=tournsize)
        self._register_operators()
        self._fit: dict[Key, float] = {}
        self._gen: list[Any] = []
        self._pending: list[Any] = []
        self.generation = -1

    def _register_operators(self) -> None:
        self.toolbox.register("mate", tools.cxUniform, indpb=self.cx_indpb)
        self.toolbox.register(
            "mutate",
            tools.mutUniformInt,
            low=[0] * len(self.sizes),
            up=[s - 1 for s in self.sizes],
            indpb=self.mut_indpb,
        )

    @contextlib.contextmanager
    def _own_random(self) -> Iterator[None]:
        saved = random.getstate()
        random.setstate(self._py_state)
        try:
            yield
        finally:
            self._py_state = random.getstate()
            random.setstate(saved)

    # --- individuals ----------------------------------------------------------------------
    def _individual(self, genes: Sequence[int], fitness: float | None = None) -> Any:
        ind = creator.AutotuneIndividual(int(g) for g in genes)
        if fitness is not None:
            ind.fitness.values = (fitness,)
        return ind

    def _is_new(self, key: Key, taken: set[Key]) -> bool:
        if key in taken or key in self._fit:
            return False
        cfg = self.space.from_indices(key)
        return not self.is_seen(cfg) and self.space.is_plausible(cfg)

    def _random_new(self, taken: set[Key]) -> Any | None:
        for _ in range(64):
            key = self._encoder.exact_indices(self.space.random_config(self.rng))
            if key is not None and self._is_new(key, taken):
                return self._individual(key)
        return None

    def _novel(self, ind: Any, taken: set[Key]) -> Any | None:
        """``ind`` made new: re-mutated while it repeats a known config, else a random one."""
        for _ in range(20):
            key = tuple(ind)
            if self._is_new(key, taken):
                return ind
            self.toolbox.mutate(ind)
            if tuple(ind) == key:  # mutation drew nothing new: force one gene
                g = int(self.rng.integers(len(self.sizes)))
                if self.sizes[g] > 1:
                    ind[g] = int((ind[g] + 1 + self.rng.integers(self.sizes[g] - 1)) % self.sizes[g])
        return self._random_new(taken)

    # --- generations ----------------------------------------------------------------------
    def _initial_population(self) -> list[Any]:
        """Seed individuals (none in the plain GA) first, then :meth:`_fill_initial`."""
        taken: set[Key] = set()
        pop: list[Any] = []
        for key in self._seed_keys():
            if len(pop) >= self.pop_size:
                break
            if self._is_new(key, taken):
                taken.add(key)
                pop.append(self._individual(key))
        self._fill_initial(pop, taken)
        return pop

    def _fill_initial(self, pop: list[Any], taken: set[Key]) -> None:
        self._add_new(pop, taken, self._random_new, self.pop_size)

    @staticmethod
    def _add_new(pop: list[Any], taken: set[Key], make, until: int) -> None:
        """Append individuals from ``make(taken)`` until ``until`` or it runs dry."""
        while len(pop) < until:
            ind = make(taken)
            if ind is None:
                break
            taken.add(tuple(ind))
            pop.append(ind)

    def _seed_keys(self) -> list[Key]:
        return []

    def _measure_first(self, pop: list[Any]) -> list[Any]:
        """The order in which the first population is measured (the guided GA ranks it)."""
        return list(pop)

    def _archive_elites(self) -> list[Any]:
        best = sorted(self._fit.items(), key=lambda kv: -kv[1])[: self.n_elite]
        return [self._individual(k, f) for k, f in best if f > 0]

    def _before_breeding(self, pool: list[Any]) -> None:
        """Hook for the guided GA (updates its elite-gene dictionary)."""

    def _immigrants(self, taken: set[Key]) -> list[Any]:
        """Hook for the guided GA: new individuals from outside the population."""
        return []

    def _breed(self) -> None:
        self.generation += 1
        if self.generation == 0:
            pop = self._initial_population()
            self._gen, self._pending = pop, self._measure_first(pop)
            return
        pool = [ind for ind in self._gen if ind.fitness.valid]
        keys = {tuple(ind) for ind in pool}
        elites = self._archive_elites()
        pool += [e for e in elites if tuple(e) not in keys]
        taken: set[Key] = set()
        offspring: list[Any] = []
        if len(pool) < 2:
            self._add_new(offspring, taken, self._random_new, self.pop_size)
        else:
            self._before_breeding(pool)
            offspring = self._immigrants(taken)
            n_bred = max(0, self.pop_size - len(elites) - len(offspring))
            bred = self._offspring(pool, taken, n_bred * self._candidates_per_child())
            offspring += self._select_offspring(bred, n_bred)
        self._gen = elites + offspring
        self._pending = list(offspring)

    def _offspring(self, pool: list[Any], taken: set[Key], n: int) -> list[Any]:
        """Up to ``n`` new children of ``pool``: tournament, crossover, mutation."""
        out: list[Any] = []
        with self._own_random():
            for _ in range(max(self.pop_size, n) * 4):
                if len(out) >= n:
                    break
                p1, p2 = (self.toolbox.clone(p) for p in self.toolbox.select(pool, 2))
                if random.random() < self.cxpb:
                    self.toolbox.mate(p1, p2)
                for child in (p1, p2):
                    if len(out) >= n:
                        break
                    self.toolbox.mutate(child)
                    del child.fitness.values
                    child = self._novel(child, taken)
                    if child is not None:
                        taken.add(tuple(child))
                        out.append(child)
        return out

    def _candidates_per_child(self) -> int:
        """Children bred per place in the next generation (the guided GA screens them)."""
        return 1

    def _select_offspring(self, bred: list[Any], n: int) -> list[Any]:
        """Which ``n`` of the bred children are measured, in order."""
        return bred[:n]

    # --- ask / tell -----------------------------------------------------------------------
    def propose(self, n: int) -> list[Config]:
        out: list[Config] = []
        breeds = 0
        max_breeds = 2 + math.ceil(n / self.pop_size)
        while len(out) < n:
            if not self._pending:
                if breeds >= max_breeds:
                    break
                self._breed()
                breeds += 1
                continue
            ind = self._pending.pop(0)
            cfg = self.space.from_indices(ind)
            if self.is_seen(cfg):
                continue
            out.append(cfg)
        return out

    def tell(self, results: Sequence[TrialResult]) -> None:
        super().tell(results)
        touched: dict[Key, float] = {}
        for res in results:
            key = self._encoder.exact_indices(res.config)
            if key is None:
                continue
            fit = 1.0 / res.latency if res.ok and res.latency > 0 else 0.0
            self._fit[key] = fit
            touched[key] = fit
        for ind in self._gen:
            f = touched.get(tuple(ind))
            if f is not None:
                ind.fitness.values = (f,)


class GuidedGATuner(GATuner):
    """GA seeded and steered by history: see the module docstring."""

    name = "gga"
    guided = True

    def __init__(
        self,
        space: KnobSpace,
        *,
        rank_sources: bool = False,
        min_ranked: int = 8,
        immigrant_frac: float = 0.125,
        measure_order: str = "hedged",
        similarity_threshold: float = SIMILARITY_FLOOR,
        seed_frac: float = 1.0,
        elite_frac: float = 0.25,
        p_elite: float = 0.7,
        prior_weight: float = 1.0,
        screen: int = 4,
        hedge_cap: int = 1,
        handover: int | None = None,
        handover_local_share: float = HANDOVER_LOCAL_SHARE,
        model_seeds: int | None = None,
        picks_order: str = "turns",
        plausible_priors: bool | None = None,
        repair_history: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(space, **kwargs)
        # as transfer XGBoost's options: history's configs this layer could not run are
        # left out of its seeds, dictionary and ranker, and of the transfer tuners it uses
        # (by default where history matches the layer weakly); or moved to the nearest
        # the layer can run (:mod:`autotune.search.repair`)
        self.repair_history = bool(repair_history)
        self.plausible_priors = leaves_out_unrunnable(plausible_priors, self.priors, repair=self.repair_history)
        if picks_order not in ("turns", "ranked"):
            raise ValueError(f"picks_order must be 'turns' or 'ranked', not {picks_order!r}")
        self.picks_order = picks_order
        if model_seeds is None:
            model_seeds = self.pop_size // 4 if shallow_history(self.priors) else 0
        if not 0 <= int(model_seeds) <= self.pop_size:
            raise ValueError(f"model_seeds is a number of first-population places (0 to pop_size), not {model_seeds!r}")
        self.model_seeds = int(model_seeds)
        self._model_keys: list[Key] = []
        if handover is None:
            handover = self.pop_size if shallow_history(self.priors) else 0
        if int(handover) < 0:
            raise ValueError(f"handover is a number of measured configs (0: never), not {handover!r}")
        self.handover = int(handover)
        if not 0.0 <= float(handover_local_share) <= 1.0:
            raise ValueError(f"handover_local_share is a fraction of the successor's batch in [0, 1], not {handover_local_share!r}")
        self.handover_local_share = float(handover_local_share)
        self.successor: Tuner | None = None
        self.handed_over_at: int | None = None
        if int(hedge_cap) < 1:
            raise ValueError(f"hedge_cap must be 1 or more configs per source, not {hedge_cap!r}")
        self.hedge_cap = int(hedge_cap)
        if int(screen) < 1:
            raise ValueError(f"screen must be 1 or more children bred per place, not {screen!r}")
        self.screen = int(screen)
        self._ranker: HistoryRanker | None = None
        self._surrogate: tuple[int, CostModel | None] = (-1, None)
        self.similarity_threshold = similarity_threshold
        self.seed_frac = seed_frac
        self.elite_frac = elite_frac
        self.p_elite = p_elite
        self.prior_weight = prior_weight
        if measure_order not in ("model", "turns", "hedged"):
            raise ValueError(f"measure_order must be 'model', 'turns' or 'hedged', not {measure_order!r}")
        self.measure_order = measure_order
        self._kept_before_results: tuple[np.ndarray, np.ndarray] | None = None
        self.rank_sources = rank_sources
        self.immigrant_frac = immigrant_frac
        self.min_ranked = min_ranked
        self.encoder = encoder_for(space)
        self._prior_mapped = [self.encoder.map_indices(r.config) for r in self.priors]
        self._prior_group, self._prior_workloads, self._prior_perf = prior_groups(self.priors)
        self._prior_par = np.array([self.encoder.parallelism_log2(r.config) for r in self.priors])
        # knob by knob, unmoved: what the contradiction check pairs with this layer's own
        # results (a moved config's latency here says nothing of its source's original)
        self._prior_as_mapped = self._prior_mapped
        self._prior_fits, self._prior_mapped = judge_mapped_priors(
            space, self._prior_mapped, plausible=self.plausible_priors, repair=self.repair_history
        )
        self._rankers = SourceRankers(
            lambda: self.encoder.encode_configs([r.config for r in self.priors]),  # featurized on first use
            self._prior_perf, self._prior_group, self._prior_workloads, seed=self.seed,
        )
        self._source_weights: dict[str, float] = {}
        # kept prior rows and their weights (similarity x credibility) at the last breeding
        self._believed: tuple[np.ndarray, np.ndarray] = (np.zeros(0, dtype=np.int64), np.zeros(0))
        self.elite_dist: list[np.ndarray] = [np.full(s, 1.0 / s) for s in self.sizes]

    # --- hand-over -----------------------------------------------------------------------
    def ask(self, n: int) -> list[Config]:
        if self.successor is None and self.handover and len(self.state.results) >= self.handover:
            self._hand_over()
        if self.successor is None:
            return super().ask(n)
        out = self.successor.ask(n)
        self.mark_seen(out)
        return out

    def tell(self, results: Sequence[TrialResult]) -> None:
        if self.successor is None:
            super().tell(results)
            return
        Tuner.tell(self, results)  # what was asked and measured; no generation to keep
        self.successor.tell(results)

    def _hand_over(self) -> None:
        """Transfer XGBoost takes the layer from here, told everything measured and
        asked so far: where history is shallow its winners are unconverged, and after
        the first population, which is history's, the GA breeds around them (run 46)."""
        from autotune.search.xgb_tuner import TransferXGBTuner

        nxt = TransferXGBTuner(self.space, seed=self.seed, priors=self.priors, layer_features=self.layer_features,
                               local_share=self.handover_local_share, plausible_priors=self.plausible_priors,
                               repair_history=self.repair_history)
        nxt.state.seen |= self.state.seen
        nxt.tell(self.state.results)
        self.successor = nxt
        self.handed_over_at = len(self.state.results)

    @property
    def model_picks(self) -> int:
        """How many of the first population's places went to transfer XGBoost's first
        batch (``model_seeds``; fewer where the space or history had no more to give)."""
        return len(self._model_keys)

    @property
    def source_weights(self) -> dict[str, float]:
        """Each source's chance of ranking the layer's results best, as the tuner that
        has the layer now weighs them (empty while unranked)."""
        return self._source_weights if self.successor is None else self.successor.source_weights

    @property
    def importance(self) -> np.ndarray | None:
        """The feature importances of transfer XGBoost's model once it has the layer;
        the GA itself has no model of features (None)."""
        return getattr(self.successor, "importance", None)

    def _kept_priors(self, measured: Sequence[TrialResult]) -> tuple[np.ndarray, np.ndarray]:
        """(positions of the priors the filter keeps, their similarity). Before any
        result the answer never changes, and the first generation asks for it three times
        (seeds, dictionary, measuring order): it is computed once."""
        if not self.priors:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        if not measured and self._kept_before_results is not None:
            return self._kept_before_results
        kept, idx = filter_priors(
            self.priors,
            self.layer_features,
            None,
            self.similarity_threshold,
            measured=measured,
            space=self.space,
            mapped=self._prior_as_mapped,
            return_indices=True,
        )
        idx, weights = only_runnable(self._prior_fits, idx, kept.weights)
        if not measured:
            self._kept_before_results = (idx, weights)
        return idx, weights

    def _credibility(self, idx: np.ndarray, sims: np.ndarray) -> np.ndarray:
        """Per kept prior row (similarity ``sims``), its workload's chance of ranking this
        layer's own results best (:mod:`autotune.search.source_weights`); all ones unless
        ``rank_sources``, and until there are ``min_ranked`` successful results."""
        self._source_weights = {}
        if not self.rank_sources:
            return np.ones(len(idx))
        keys = list(self._fit)
        row_p, by_workload = self._rankers.row_weights(
            self._prior_group[idx], sims, lambda: self.encoder.encode_indices(np.array(keys)),
            np.array([self._fit[k] for k in keys]), self.seed, min_results=self.min_ranked,
        )
        self._source_weights = {k: round(v, 3) for k, v in by_workload.items()}
        return row_p

    def _immigrants(self, taken: set[Key]) -> list[Any]:
        """History's next unmeasured configs, by turns across the kept source workloads
        (weighted as for this generation's dictionary): the first population could only
        hold the top few of each source."""
        n = int(round(self.immigrant_frac * self.pop_size))
        idx, sims = self._believed  # as weighted for this generation's dictionary
        if n <= 0 or not len(idx):
            return []
        idx, sims = idx[sims > 0], sims[sims > 0]
        mapped = [self._prior_mapped[i] for i in idx]
        order = history_seed_order(mapped, self._prior_group[idx], self._prior_perf[idx], sims, n + len(self._fit))
        out: list[Any] = []
        for key in order:
            if len(out) >= n:
                break
            if self._is_new(key, taken):
                taken.add(key)
                out.append(self._individual(key))
        return out

    def _initial_population(self) -> list[Any]:
        self._model_keys = self._transfer_picks(self.model_seeds) if self.model_seeds and self.priors else []
        return super()._initial_population()

    def _transfer_picks(self, n: int) -> list[Key]:
        """The first ``n`` configs of transfer XGBoost's first batch (as that tuner, same
        seed, would measure it) not among history's mapped configs the population takes.

        Mapped winners carry a source layer's tile shapes: on the H100 no mapped config
        of a 256-deep history beat 10.6 us on ResNet-18's conv2d3, while a model of all
        sources with layer features put configs of 7 to 8 us in its first batch (2026-11-26).
        """
        from autotune.search.xgb_tuner import TransferXGBTuner

        model = TransferXGBTuner(self.space, seed=self.seed, priors=self.priors, layer_features=self.layer_features,
                                 plausible_priors=self.plausible_priors, repair_history=self.repair_history)
        mapped = set(self._mapped_seed_keys(self._mapped_limit(n)))
        picks: list[Key] = []
        for cfg in model.ask(self.pop_size):
            key = self._encoder.exact_indices(cfg)
            if key is not None and key not in mapped and key not in picks:
                picks.append(key)
            if len(picks) >= n:
                break
        return picks

    def closest_winner(self) -> Config | None:
        """The fastest record of the most similar kept source layer, mapped onto this
        space, passing over sources whose winner is measured here already (the layer's
        own records, in a tune resumed after a probe); None where every one is.

        What a one-trial probe measures (``autotune tune``): the budget reads the probe
        as what history's closest layer says this one costs. The first population's
        order is the history ranker's across sources, and a probe of a ResNet-18 conv
        had measured another source's tile at 1.31 ms against its twin's 237 us."""
        idx, sims = self._kept_priors(())
        rows = sorted(((float(s), float(self._prior_perf[i]), -n, int(i)) for n, (i, s) in enumerate(zip(idx, sims))
                       if self._prior_mapped[i] is not None and self._prior_perf[i] > 0), reverse=True)
        tried: set[int] = set()
        for *_, row in rows:
            group = int(self._prior_group[row])
            if group in tried:
                continue  # a source's winner alone, not its runner-up
            tried.add(group)
            cfg = self.space.from_indices(self._prior_mapped[row])
            if not self.is_seen(cfg):
                return cfg
        return None

    def _mapped_seed_keys(self, limit: int) -> list[Key]:
        idx, sims = self._kept_priors(())
        if not len(idx) or limit <= 0:
            return []
        mapped = [self._prior_mapped[i] for i in idx]
        return history_seed_order(mapped, self._prior_group[idx], self._prior_perf[idx], sims, limit)

    def _mapped_limit(self, picks: int) -> int:
        """History's share of the first population beside ``picks`` of the model's."""
        return int(round(self.seed_frac * self.pop_size)) - picks

    def _seed_keys(self) -> list[Key]:
        limit = self._mapped_limit(len(self._model_keys))
        return self._model_keys + [k for k in self._mapped_seed_keys(limit) if k not in self._model_keys]

    def _measure_first(self, pop: list[Any]) -> list[Any]:
        """The first population, best first as a ranker trained on the kept priors
        predicts for this layer (:class:`autotune.search.warm_start.HistoryRanker`), each
        source's best ahead of any source's second (``"hedged"``); the ranker's order
        alone (``"model"``), or warm-start order (``"turns"``). Only the order changes:
        the population, and so every later generation, is the same either way."""
        if self.measure_order == "turns" or not self.priors or not pop:
            return list(pop)
        picked = set(self._model_keys)
        if self.picks_order == "ranked" and picked:
            return self._ranked_with_picks(pop, picked)
        model = sorted((ind for ind in pop if tuple(ind) in picked), key=lambda ind: self._model_keys.index(tuple(ind)))
        pop = [ind for ind in pop if tuple(ind) not in picked]
        keys = [tuple(ind) for ind in pop]
        order = self._history_ranker().order(np.array(keys, dtype=np.int64)) if keys else []
        if self.measure_order == "hedged":
            order = per_source_first(order, self._sources_of(keys), self.hedge_cap)
        ranked = [pop[i] for i in order]
        # transfer XGBoost's picks by turns with history's, in the model's order
        return [ind for pair in zip_longest(ranked, model) for ind in pair if ind is not None]

    def _ranked_with_picks(self, pop: list[Any], picked: set[Key]) -> list[Any]:
        """The whole first population in the history ranker's order, transfer XGBoost's
        picks ranked with history's mapped configs, each pick a source of its own (so,
        hedged, ahead of any source's second config)."""
        keys = [tuple(ind) for ind in pop]
        order = self._history_ranker().order(np.array(keys, dtype=np.int64))
        if self.measure_order == "hedged":
            sources = self._sources_of(keys)
            sources = [-2 - i if k in picked else src for i, (k, src) in enumerate(zip(keys, sources))]
            order = per_source_first(order, sources, self.hedge_cap)
        return [pop[i] for i in order]

    def _sources_of(self, keys: Sequence[Key]) -> list[int]:
        """The source workload each key was seeded from (its most similar kept source
        that maps a config onto it, best record first); -1 for the dictionary's and
        uniform draws."""
        idx, sims = self._kept_priors(())
        source: dict[Key, int] = {}
        for row in idx[np.lexsort((-self._prior_perf[idx], -sims))]:
            source.setdefault(self._prior_mapped[row], int(self._prior_group[row]))
        return [source.get(k, -1) for k in keys]

    def _history_ranker(self) -> HistoryRanker:
        """The ranker of history alone (the priors kept before any result), fitted once."""
        if self._ranker is None:
            idx, sims = self._kept_priors(())
            self._ranker = HistoryRanker.for_rows(
                self.priors, idx, sims, self._prior_perf, self._prior_group,
                encoder_for(self.space, len(self.layer_features)), self.layer_features, seed=self.seed,
            )
        return self._ranker

    # --- screening ------------------------------------------------------------------------
    def _candidates_per_child(self) -> int:
        return self.screen

    def _select_offspring(self, bred: list[Any], n: int) -> list[Any]:
        """With ``screen`` > 1: the ``n`` children a surrogate scores best, best first.

        The surrogate is history's ranker (:class:`autotune.search.warm_start.HistoryRanker`) as a
        base margin, corrected by a model of this layer's own results once there are
        ``min_ranked`` of them with two distinct fitnesses (margin transfer, as transfer
        XGBoost does). Screening only chooses among children the GA's operators bred from
        measured parents, so the model never leads the search away from the population.
        """
        if self.screen <= 1 or len(bred) <= n:
            return bred[:n]
        ranker = self._history_ranker()
        X = ranker.features(np.array([tuple(ind) for ind in bred], dtype=np.int64))
        scores = ranker.predict(X)
        model = self._own_model()
        if model is not None:
            scores = model.predict(X, base_margin=scores)
        order = np.argsort(-scores, kind="stable")[:n]
        return [bred[i] for i in order]

    def _own_model(self) -> CostModel | None:
        """History's ranker corrected by this layer's measured fitnesses; refit when
        results arrive, None while they are too few to rank."""
        n_fit, model = self._surrogate
        if n_fit == len(self._fit):
            return model
        keys = list(self._fit)
        fits = np.array([self._fit[k] for k in keys])
        model = None
        if int((fits > 0).sum()) >= self.min_ranked and len(np.unique(fits)) >= 2:
            ranker = self._history_ranker()
            X = ranker.features(np.array(keys, dtype=np.int64))
            model = CostModel(seed=self.seed).fit(X, fits / fits.max(), base_margin=ranker.predict(X))
        self._surrogate = (len(self._fit), model)
        return model

    def _fill_initial(self, pop: list[Any], taken: set[Key]) -> None:
        """After the mapped prior elites: draws from the prior-only elite-gene dictionary,
        with a quarter of the places left to uniform draws for diversity.

        Filling the first generation uniformly (as the plain GA does) spends most of it
        where history says not to look.
        """
        if self.priors:
            self._before_breeding([])
            self._add_new(pop, taken, self._dictionary_new, self.pop_size - (self.pop_size - len(pop)) // 4)
        super()._fill_initial(pop, taken)

    def _dictionary_new(self, taken: set[Key]) -> Any | None:
        """A new individual with every gene drawn from the elite-gene dictionary."""
        for _ in range(64):
            key = tuple(int(self.rng.choice(size, p=dist)) for size, dist in zip(self.sizes, self.elite_dist))
            if self._is_new(key, taken):
                return self._individual(key)
        return None

    # --- elite-gene dictionary ------------------------------------------------------------
    @staticmethod
    def _par_factor(par: np.ndarray) -> np.ndarray:
        """Parallelism weight in (0, 1]: relative log2 parallelism among the contributors."""
        if not len(par):
            return par
        top = max(float(par.max()), 0.0)
        return (1.0 + np.maximum(par, 0.0)) / (1.0 + top)

    def _elite_rows(self, keys: list[Key], perf: np.ndarray, par: np.ndarray) -> tuple[list[Key], np.ndarray]:
        """Top ``elite_frac`` of rows by performance, weighted perf x parallelism, sum 1."""
        order = [i for i in np.argsort(-perf, kind="stable") if perf[i] > 0]
        order = order[: max(1, int(math.ceil(self.elite_frac * len(keys))))]
        if not order:
            return [], np.zeros(0)
        w = perf[order] * self._par_factor(par[order])
        return [keys[i] for i in order], w / w.sum()

    def _before_breeding(self, pool: list[Any]) -> None:
        smoothing = 0.05
        counts = [np.full(s, smoothing / s) for s in self.sizes]
        fits = np.array([ind.fitness.values[0] for ind in pool])
        if len(fits) and fits.max() > 0:
            keys = [tuple(ind) for ind in pool]
            par = np.array([self.encoder.parallelism_log2(self.space.from_indices(k)) for k in keys])
            ekeys, w = self._elite_rows(keys, fits / fits.max(), par)
            for key, wt in zip(ekeys, w):
                for g, v in enumerate(key):
                    counts[g][v] += wt
        idx, sims = self._kept_priors(self.state.results)
        if len(idx):
            sims = sims * self._credibility(idx, sims)
        self._believed = (idx, sims)
        if len(idx):
            mass = self.prior_weight / (1.0 + self.generation)
            by_wk: dict[str, list[int]] = {}
            for j, i in enumerate(idx):
                if self._prior_mapped[i] is not None:
                    by_wk.setdefault(self.priors[i].workload_key, []).append(j)
            rows: list[Key] = []
            weights: list[float] = []
            for js in by_wk.values():
                ii = idx[js]
                ekeys, w = self._elite_rows(
                    [self._prior_mapped[i] for i in ii], self._prior_perf[ii], self._prior_par[ii]
                )
                sim = float(np.mean(sims[js])) if js else 0.0
                rows += ekeys
                weights += list(w * sim)
            total = sum(weights)
            if total > 0:
                for key, wt in zip(rows, weights):
                    for g, v in enumerate(key):
                        counts[g][v] += mass * wt / total
        self.elite_dist = [c / c.sum() for c in counts]

    # --- guided operators -----------------------------------------------------------------
    def _register_operators(self) -> None:
        self.toolbox.register("mate", self._guided_mate)
        self.toolbox.register("mutate", self._guided_mutate)

    def _guided_mutate(self, ind: Any) -> tuple[Any]:
        for g, size in enumerate(self.sizes):
            if size > 1 and self.rng.random() < self.mut_indpb:
                if self.rng.random() < self.p_elite:
                    ind[g] = int(self.rng.choice(size, p=self.elite_dist[g]))
                else:
                    ind[g] = int(self.rng.integers(size))
        return (ind,)

    def _guided_mate(self, a: Any, b: Any) -> tuple[Any, Any]:
        for g in range(len(self.sizes)):
            if a[g] == b[g]:
                continue
            ga, gb = a[g], b[g]
            pa, pb = self.elite_dist[g][ga], self.elite_dist[g][gb]
            odds = pa / (pa + pb) if pa + pb > 0 else 0.5
            a[g] = ga if self.rng.random() < odds else gb
            b[g] = ga if self.rng.random() < odds else gb
        return a, b


def per_source_first(order: Sequence[int], sources: Sequence[int], cap: int = 1) -> list[int]:
    """``order`` (positions, best first) with each source's best ``cap`` placed first,
    in the order given, then the rest as ordered: one source the ranker overrates
    cannot fill the first trials."""
    first, rest, count = [], [], {}
    for i in order:
        n = count.get(sources[i], 0)
        (first if n < cap else rest).append(int(i))
        count[sources[i]] = n + 1
    return first + rest
