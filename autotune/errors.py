"""The one error type a user sees: its message is printed as a single line, exit code 2."""


class AutotuneError(Exception):
    """A problem with the user's input or environment, phrased for the user."""


def keep_interrupts_through_tvm() -> None:
    """Make Ctrl-C inside a TVM call arrive as ``KeyboardInterrupt``.

    Python code that TVM calls back into (meta-schedule's runner waits on its futures
    there) turns the interrupt into an FFI error, which came back out as a bare
    ``RuntimeError``: a traceback and exit 1 instead of "interrupted" and exit 130, and
    the run marked failed instead of killed. tvm-ffi maps errors back by class name, so
    naming this class to it is enough. Idempotent; imports tvm-ffi, so call it where TVM
    is about to work, not at import.
    """
    import tvm_ffi

    tvm_ffi.register_error("KeyboardInterrupt", KeyboardInterrupt)
