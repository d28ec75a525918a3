"""How well history's model ranks a layer's own results as transfer XGBoost goes on.

Runs ``bench_history_guided.py`` (any of its arguments; a ``--replay`` needs no device)
with every transfer-XGBoost fit traced: after each fit with a model of history kept,
the Spearman correlation between that model's scores of the layer's successfully
measured configs so far and their measured speed. A history that ranks the layer's own
results backwards is one a tuner could notice and drop; one that ranks them weakly but
rightly is not. Writes the trace as JSON to ``--trace FILE`` (one entry per fit: the
layer's space id, seed, configs asked, configs that ran, correlation, priors kept; with
``gga`` among the tuners, the fits its first population asks of transfer XGBoost too);
the benchmark's own output is as usual.

Run:  python benchmarks/trace_prior_rank.py --trace trace.json -- --replay FILE --history-db H ... --tuners tl_xgb
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Iterator

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from _emit import run_main  # noqa: E402


@contextlib.contextmanager
def traced_fits(log: list[dict]) -> Iterator[None]:
    """While in the block, each transfer-XGBoost fit appends its entry to ``log``."""
    from scipy.stats import spearmanr

    from autotune.search.xgb_tuner import TransferXGBTuner, observing_fits

    def trace(tuner) -> None:
        if not isinstance(tuner, TransferXGBTuner):
            return
        ran = [r for r in tuner.state.results if r.ok and r.latency > 0]
        scored = tuner.history_scores([r.config for r in ran]) if len(ran) >= 4 else None
        if scored is not None and len(scored[0]) >= 4:
            at, scores = scored
            rho = spearmanr(scores, [-ran[i].latency for i in at]).statistic
            log.append({"space_id": tuner.space.space_id, "seed": tuner.seed, "asked": len(tuner.state.results),
                        "ran": len(at), "spearman": None if rho != rho else round(float(rho), 3),
                        "priors_kept": tuner.priors_kept})

    with observing_fits(trace):
        yield


def main() -> int:
    args = sys.argv[1:]
    if args[:1] in (["-h"], ["--help"]):
        print("usage: trace_prior_rank.py --trace FILE -- BENCH_HISTORY_GUIDED_ARGUMENTS\n\n" + (__doc__ or "").strip())
        return 0
    if "--trace" not in args or "--" not in args or args.index("--trace") + 1 >= len(args):
        raise SystemExit("usage: trace_prior_rank.py --trace FILE -- BENCH_HISTORY_GUIDED_ARGUMENTS")
    trace_path = args[args.index("--trace") + 1]
    bench_args = args[args.index("--") + 1 :]
    log: list[dict] = []
    import bench_history_guided

    sys.argv = ["bench_history_guided.py", *bench_args]
    try:
        with traced_fits(log):
            return bench_history_guided.main()
    finally:
        with open(trace_path, "w", encoding="utf-8") as fh:
            json.dump(log, fh, indent=1)


if __name__ == "__main__":
    raise SystemExit(run_main(main))
