"""autotune: history-guided tuning of TVM kernels for ONNX models.

Heavy modules (TVM, MLflow, XGBoost) are imported lazily by the code that needs them,
so ``autotune --help`` and the history commands start fast.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``autotune.api`` without importing it first (it stays out of ``autotune --help``)."""
    if name == "api":
        import importlib

        return importlib.import_module("autotune.api")
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
