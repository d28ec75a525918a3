"""autotune: history-guided tuning of TVM kernels for ONNX models.

Heavy modules (TVM, MLflow, XGBoost) are imported lazily by the code that needs them,
so ``autotune --help`` and the history commands start fast.
"""

__version__ = "0.1.0"
