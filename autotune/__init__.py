"""autotune: history-guided tuning of TVM kernels for ONNX models.

Heavy modules (TVM, MLflow, XGBoost) are imported lazily by the code that needs them,
so ``autotune --help`` and the history commands start fast.
"""

import os as _os

__version__ = "0.1.0"

# The design card keeps search/, history/ and templates/ beside this package in the
# source tree, and they are its subpackages (autotune.history, ...): as top-level
# packages, a user's history.py or search.py beside their script stood in for them and
# broke the API. A wheel installs them inside the package (pyproject's package-dir); a
# source checkout (an editable install, or PYTHONPATH as on the GPU machine) finds them
# beside it through this path.
_checkout = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_checkout, "history", "__init__.py")) and not _os.path.isdir(
    _os.path.join(__path__[0], "history")
):
    __path__.append(_checkout)


def __getattr__(name: str):
    """``autotune.api`` without importing it first (it stays out of ``autotune --help``)."""
    if name == "api":
        import importlib

        return importlib.import_module("autotune.api")
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
