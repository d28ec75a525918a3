"""The pieces of the history-guided benchmark (``benchmarks/bench_history_guided.py``).

- :mod:`.layers`: the zoo layers a ``MODEL:INDEX`` or ``--source`` entry names.
- :mod:`.tuner_specs`: ``NAME:KEY=VALUE`` tuner variants and the baseline each faces.
- :mod:`.measurers`: real measurements cached and appended to a file, or that file replayed.
- :mod:`.recorded`: a recorded run's target, spaces and measured configs, for offline analyses.
- :mod:`.lockstep`: many tuning runs side by side, one build batch per round.
- :mod:`.history_setup`: the source layers' history and a target's priors, as ``tune`` sees them.
- :mod:`.scoring`: trials to the baseline's final, rank tests, the dispatched comparison.
- :mod:`.tables`: markdown tables, approximation notes and plots of a result.
- :mod:`.progress`: time-stamped progress lines.
"""

from __future__ import annotations
