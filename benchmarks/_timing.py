"""Whole-model timing shared by the benchmarks that compare builds of one model."""

from __future__ import annotations

import statistics


def time_in_turns(mods: dict, target, input_shape) -> dict:
    """Median milliseconds per inference of each built module, timed in turns, and the
    largest difference between each one's outputs and the first one's on one seeded input."""
    import numpy as np
    import tvm
    from tvm import relax

    from autotune import compile as compiler

    dev = target.device()
    x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal(input_shape).astype("float32"), dev)
    vms = {name: relax.VirtualMachine(compiler.build(mod, target), dev) for name, mod in mods.items()}
    outputs = {}
    for name, vm in vms.items():
        out = vm["main"](x)
        outputs[name] = (out if hasattr(out, "numpy") else out[0]).numpy()  # one output, or a tuple of them
    samples: dict[str, list[float]] = {name: [] for name in vms}
    for _ in range(5):
        for name, vm in vms.items():
            timer = vm.time_evaluator("main", dev, number=1, repeat=1, min_repeat_ms=100)
            samples[name].append(float(timer(x).results[0]))
    reference = next(iter(outputs.values()))
    return {
        **{f"{name}_ms": round(statistics.median(s) * 1e3, 3) for name, s in samples.items()},
        "max_abs_output_difference": {name: float(np.abs(out - reference).max()) for name, out in list(outputs.items())[1:]},
    }
