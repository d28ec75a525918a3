"""autotune: history-guided tuning of TVM kernels for ONNX models.

Heavy modules (TVM, MLflow, XGBoost) are imported lazily by the code that needs them,
so ``autotune --help`` and the history commands start fast.
"""

import importlib.abc as _abc
import importlib.util as _util
import os as _os
import sys as _sys

__version__ = "0.1.0"

# The design card keeps search/, history/ and templates/ beside this package in the
# source tree, and they are its subpackages (autotune.history, ...): as top-level
# packages, a user's history.py or search.py beside their script stood in for them and
# broke the API. A wheel installs them inside the package (pyproject's package-dir); a
# source checkout (an editable install, or PYTHONPATH as on the GPU machine) finds them
# beside it through the finder below. It finds those three alone: the checkout put on
# the package's path made every folder beside it a subpackage (autotune.tests,
# autotune.autotune), listed by help(autotune).
_SIBLINGS = ("search", "history", "templates")
_checkout = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))


class _CheckoutSiblings(_abc.MetaPathFinder):
    """``autotune.search``, ``autotune.history`` and ``autotune.templates`` from the
    folders beside the package, in a source checkout."""

    def find_spec(self, fullname, path=None, target=None):
        head, _, name = fullname.partition(".")
        if head != "autotune" or name not in _SIBLINGS:
            return None
        folder = _os.path.join(_checkout, name)
        return _util.spec_from_file_location(fullname, _os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])


if _os.path.isfile(_os.path.join(_checkout, "history", "__init__.py")) and not _os.path.isdir(
    _os.path.join(__path__[0], "history")
) and not any(type(f).__name__ == "_CheckoutSiblings" for f in _sys.meta_path):  # once, reloads too
    _sys.meta_path.append(_CheckoutSiblings())


def __getattr__(name: str):
    """``autotune.api`` without importing it first (it stays out of ``autotune --help``)."""
    if name == "api":
        import importlib

        return importlib.import_module("autotune.api")
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
