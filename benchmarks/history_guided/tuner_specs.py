"""Tuner variants named on the command line and the baseline each is compared with."""

from __future__ import annotations


#: Each history-guided tuner and the history-free baseline it is measured against.
BASELINE_OF = {"tl_xgb": "xgb", "gga": "ga"}


def parse_tuner(spec: str) -> tuple[str, dict[str, int | float | str]]:
    """``NAME[:KEY=VALUE;...]`` -> (registered name, constructor options), so variants of
    one tuner run side by side (``tl_xgb:transfer=joint``). Values are numbers where they
    parse as one, else strings; nothing is evaluated."""
    name, _, rest = spec.partition(":")
    opts: dict[str, int | float | str] = {}
    for item in filter(None, rest.split(";")):
        key, sep, text = item.partition("=")
        if not sep:
            raise SystemExit(f"tuner option {item!r} in {spec!r} is not KEY=VALUE")
        for cast in (int, float, str):
            try:
                opts[key] = cast(text)
                break
            except ValueError:
                continue
    return name, opts


def pairs_of(tuners) -> list[tuple[str, str]]:
    """(guided, baseline) tuner specs to compare: every variant of a guided tuner against
    its history-free baseline, the one with the same options where several ran
    (``gga:pop_size=16`` against ``ga:pop_size=16``)."""
    pairs = []
    for t in tuners:
        name, _, options = t.partition(":")
        if name not in BASELINE_OF:
            continue
        bases = [b for b in tuners if b.partition(":")[0] == BASELINE_OF[name]]
        same = [b for b in bases if b.partition(":")[2] == options]
        if same or bases:
            pairs.append((t, (same or bases)[0]))
    return pairs


def make_run_tuner(spec: str, space, layer, seed: int, priors):
    """The tuner a ``--tuners`` entry names, with its options, for one seed. An unknown
    tuner or option, or options that do not go together, end the benchmark with one line
    (history and the measurement file keep what was measured)."""
    from autotune.search import make_tuner

    name, opts = parse_tuner(spec)
    try:
        return make_tuner(name, space, seed=seed, priors=priors, layer_features=layer.features(), **opts)
    except (KeyError, TypeError, ValueError) as err:
        raise SystemExit(f"error: --tuners {spec}: {err}") from None
