"""A result as people read it: markdown tables, approximation notes, convergence plots."""

from __future__ import annotations

import os
import statistics

from history_guided.measurers import APPROXIMATION_WORDS
from history_guided.scoring import dispatched_comparison, final_latency_test, final_latency_verdict, trials_to_match_baseline
from history_guided.tuner_specs import pairs_of


def _trials_cell(v: float, trials: int) -> str:
    """A median trial count; one past the budget (never reached) shows as ``>N``."""
    return f">{trials}" if v > trials else f"{v:g}"


def _final_latency_cells(test: dict | None) -> list[str]:
    """Two table cells for a :func:`final_latency_test`: medians (means), then the verdict."""
    if test is None:
        return ["", ""]
    med, mean = test["median_s"], test["mean_s"]
    return [f"{med[0] * 1e6:.1f} ({mean[0] * 1e6:.1f}) / {med[1] * 1e6:.1f} ({mean[1] * 1e6:.1f})",
            f"{final_latency_verdict(test)}, {test['seeds'][0]} / {test['seeds'][1]}"]


def dispatched_table(result: dict) -> list[str]:
    """Markdown lines comparing each layer's dispatched tuner with cold XGBoost (empty
    when the run lacks the tuners dispatch picks)."""
    trials = result["trials"]
    comparison = dispatched_comparison(result["layers"], trials)
    if comparison is None:
        return []
    lines = ["", "| layer (match) | autotune gives | trials to xgb's final: xgb / it (ratio) | to within 5% of it (ratio) "
                 "| final latency, median (mean) us: xgb / it | it ends (Mann-Whitney, seeds) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for e in comparison["per_layer"]:
        cells = []
        for key in ("match_baseline", "within_5pct_of_baseline"):
            m = e[key]
            base, guided = (_trials_cell(m[k], trials) for k in ("base_trials", "guided_trials"))
            cells.append(f"{base} / {guided} ({m['ratio']:.1f}x)")
        cells += _final_latency_cells(e["final_latency_test"])
        lines.append(f"| {e['layer']} ({e['match_score']:.2f}) | {e['tuner']} | " + " | ".join(cells) + " |")
    lines.append("| median ratio | | " + " | ".join(f"{r:.1f}x" for r in comparison["median_ratio"].values()) + " | | |")
    return lines


def markdown_table(result: dict) -> str:
    """The README's table: median trials to 5% / 25% and final latency per tuner and layer.

    An unreached target shows as ``>N`` (N = the trial budget), and the median counts it
    as N+1, so a median shown as ``>N`` means at least half of the seeds never got there.
    """
    trials = result["trials"]
    tuners = list(result["layers"][0]["tuners"]) if result["layers"] else []

    def fmt(v: float) -> str:
        return _trials_cell(v, trials)

    head = " / ".join(tuners)
    lines = [f"| layer (match) | trials to 5%: {head} | trials to 25%: {head} | final latency (us): {head} |",
             "| --- | --- | --- | --- |"]
    for row in result["layers"]:
        e = row["tuners"]
        to5 = " / ".join(fmt(e[t]["median_trials_to_5pct"]) for t in tuners)
        to25 = " / ".join(fmt(e[t]["median_trials_to_25pct"]) for t in tuners)
        final = " / ".join(f"{e[t]['median_final_latency_s'] * 1e6:.1f}" for t in tuners)
        lines.append(f"| {row['layer']} ({row['match_score']:.2f}) | {to5} | {to25} | {final} |")
    pairs = pairs_of(tuners)
    for tol in (0.0, 0.05):
        within = "" if tol == 0 else f"within {tol:.0%} of "
        lines += ["", "| layer | " + " | ".join(f"trials to {within}{b}'s final latency: {b} / {g} (ratio)" for g, b in pairs) + " |",
                  "| --- |" + " --- |" * len(pairs)]
        ratios: dict[str, list[float]] = {g: [] for g, _ in pairs}
        for row in result["layers"]:
            cells = []
            for g, b in pairs:
                m = trials_to_match_baseline(row, g, b, trials, tol)
                ratios[g].append(m["ratio"])
                cells.append(f"{fmt(m['base_trials'])} / {fmt(m['guided_trials'])} ({m['ratio']:.1f}x)")
            lines.append(f"| {row['layer']} | " + " | ".join(cells) + " |")
        lines.append("| median ratio | " + " | ".join(f"{statistics.median(ratios[g]):.1f}x" for g, _ in pairs) + " |")
    lines += ["", "| layer | " + " | ".join(
        f"final latency, median (mean) us: {b} / {g} | {g} ends (Mann-Whitney, seeds {b} / {g})" for g, b in pairs) + " |",
        "| --- |" + " --- | --- |" * len(pairs)]
    for row in result["layers"]:
        cells = [c for g, b in pairs for c in _final_latency_cells(final_latency_test(row, g, b))]
        lines.append(f"| {row['layer']} | " + " | ".join(cells) + " |")
    lines += dispatched_table(result)
    note = approximation_note(result)
    return "\n".join(lines + ([""] + [note] if note else []))


def approximated_counts(rows: list[dict], *, with_zero: bool = False) -> str:
    """Per tuner over result ``rows``, answers approximated (the file lacked them) of all
    its answers ("tl_xgb 12 of 500 (2%)"); tuners with none only ``with_zero``."""
    asked: dict[str, int] = {}
    approx: dict[str, int] = {}
    for row in rows:
        for t, e in row["tuners"].items():
            if "approximated" in e:
                approx[t] = approx.get(t, 0) + sum(e["approximated"])
                asked[t] = asked.get(t, 0) + sum(len(c) for c in e["curves"])
    return ", ".join(f"{t} {approx[t]:,} of {asked[t]:,} ({approx[t] / max(asked[t], 1):.0%})"
                     for t in approx if approx[t] or with_zero)


def approximation_note(result: dict) -> str:
    """One line naming every tuner whose replayed answers were partly approximated, with
    the share: its figures above are estimates, not measurements. Empty when every answer
    came from the file (or the run measured)."""
    shown = approximated_counts(result["layers"])
    if not shown:
        return ""
    by = APPROXIMATION_WORDS[result.get("replay", {}).get("approximation", "nearest")]  # older files: nearest
    return (f"Replayed, and not every answer was in the file: answers approximated by {by}, " + shown
            + ". Those tuners' figures are estimates; measure them before trusting them.")


def plot_results(result: dict, out_dir: str) -> list[str]:
    """One convergence plot per target layer, one curve (median over seeds) per tuner."""
    from autotune.report import plot_convergence

    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for row in result["layers"]:
        tuners = {
            t: [[[i + 1, b] for i, b in enumerate(curve) if b is not None] for curve in e["curves"]]
            for t, e in row["tuners"].items()
        }
        name = row["layer"].replace(":", "_")
        report = {"model": row["layer"], "layers": [], "tuners": tuners}
        paths.append(str(plot_convergence(report, os.path.join(out_dir, f"{name}.png"))))
    return paths
