"""The one error type a user sees: its message is printed as a single line, exit code 2.

Also how Ctrl-C survives TVM: an interrupt is never an error."""

from __future__ import annotations

import contextlib
from typing import Iterator

#: Ctrl-Cs seen by the handler :func:`keep_interrupts_through_tvm` installs.
_presses = 0


class AutotuneError(Exception):
    """A problem with the user's input or environment, phrased for the user."""


class OptionError(AutotuneError, ValueError):
    """A bad option value, found where the options are made (``TuneOptions``, the API).

    The message names options by their Python names (``min_trials``); the CLI renders
    the same message with its flags (``--min-trials``) through :meth:`spelled`, so the
    rule and its wording live in one place for both front ends.
    """

    def __init__(self, template: str, *names: str, python: dict[str, str] | None = None) -> None:
        self.template = template
        self.names = names
        # how Python spells an option where its name alone reads wrong: the CLI's
        # --no-mlflow is mlflow=False, not "mlflow"
        python = python or {}
        super().__init__(self.spelled(lambda name: python.get(name, name)))

    def spelled(self, spell) -> str:
        """The message with each option's name passed through ``spell``."""
        return self.template.format(**{name: spell(name) for name in self.names})


#: The most a count handed to TVM or XGBoost may be: TVM's evaluator takes 32-bit counts
#: (``repeat`` 1e20 failed every candidate with "Expected int but got ffi.BigInt"), and
#: XGBoost a 64-bit seed (a larger one stopped the tune with its traceback).
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def check_count(value, name: str, *, zero_ok: bool = False, integer: bool = True, maximum: float | None = None) -> None:
    """A count (``integer``) or a duration: positive, or with ``zero_ok`` not negative;
    finite (an infinite ``run_timeout`` passed, then failed to be written to history),
    and at most ``maximum`` where given."""
    kinds = (int,) if integer else (int, float)
    if (isinstance(value, bool) or not isinstance(value, kinds) or value != value or value < 0 or (value == 0 and not zero_ok)
            or value == float("inf")):
        need = {(True, False): "a positive integer", (True, True): "0 or more (an integer)",
                (False, False): "a positive number", (False, True): "0 or more"}[integer, zero_ok]
        raise OptionError(f"{{{name}}} must be {need}, got {quoted(value)}", name)
    if maximum is not None and value > maximum:
        raise OptionError(f"{{{name}}} must be at most {maximum}, got {quoted(value)}", name)


def check_flag(value, name: str) -> None:
    """True or False: a string such as "no" was taken as true (``probes="no"`` probed)."""
    if not isinstance(value, bool):
        raise OptionError(f"{{{name}}} must be True or False, got {quoted(value)}", name)


def check_choice(value, name: str, choices) -> None:
    if value not in choices:
        raise OptionError(f"{{{name}}} must be one of {', '.join(map(str, choices))}, got {quoted(value)}", name)


def quoted(value) -> str:
    """``repr`` safe inside an :class:`OptionError` template."""
    return quoted_text(repr(value))


def quoted_text(text: str) -> str:
    """``text`` safe inside an :class:`OptionError` template (an input named ``x{0}``
    broke the template's formatting)."""
    return text.replace("{", "{{").replace("}", "}}")


def first_line(err: BaseException) -> str:
    """An error of a library (TVM, ONNX) as one line of ours: its first, or its type's
    name when it says nothing."""
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


#: Whether the stop being handled came from SIGTERM (see :func:`stopping_on_sigterm`).
_terminated = False


def _on_sigint(signum, frame) -> None:
    global _presses
    _presses += 1
    raise KeyboardInterrupt


def _on_sigterm(signum, frame) -> None:
    global _terminated
    _terminated = True
    _on_sigint(signum, frame)


@contextlib.contextmanager
def stopping_on_sigterm() -> Iterator[None]:
    """Inside, SIGTERM stops the work as Ctrl-C does (``KeyboardInterrupt``, so the run is
    marked killed in history and MLflow and the build workers are shut down);
    :func:`terminated` then says which it was.

    SIGTERM is what ``timeout``, systemd and ``docker stop`` send: by default it ended a
    tune on the spot, silent, its MLflow runs left RUNNING for good. Only in the main
    thread and where SIGTERM is at its default; the handler before is back on leaving.
    """
    import signal
    import threading

    global _terminated
    _terminated = False
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def ending_after_cleanup_on_sigterm() -> Iterator[None]:
    """For the Python API: SIGTERM stops the work as Ctrl-C does (the run marked killed in
    history and MLflow, the build workers shut down), then ends the process as SIGTERM
    would have (status 143), the caller's code having never been asked to handle a
    ``KeyboardInterrupt`` it did not send. Under a job runner that sends SIGTERM, an API
    tune had left its runs RUNNING and a build folder behind. Only in the main thread and
    where SIGTERM is at its default (the CLI installs its own first)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    try:
        with stopping_on_sigterm():
            yield
    except KeyboardInterrupt:
        if terminated():
            signal.raise_signal(signal.SIGTERM)  # the default is back: the process ends here
        raise


def terminated() -> bool:
    """The last stop inside :func:`stopping_on_sigterm` was a SIGTERM, not a Ctrl-C."""
    return _terminated


def keep_interrupts_through_tvm() -> None:
    """Make Ctrl-C inside a TVM call arrive as ``KeyboardInterrupt``, or at least be seen.

    Python code that TVM calls back into (meta-schedule's runner waits on its futures
    there) turns the interrupt into an FFI error, which came back out as a bare
    ``RuntimeError``: a traceback and exit 1 instead of "interrupted" and exit 130, and
    the run marked failed instead of killed. tvm-ffi maps errors back by class name, so
    naming this class to it is enough.

    Some C++ callers drop the error instead: ``FoldConstant`` builds each constant
    expression through Python and, when that fails, leaves it unfolded and goes on, so
    a Ctrl-C while a model was lowered vanished and the tune ran to its end. The
    SIGINT handler installed here (Python's own, plus a count; only where Python's
    own is in place) lets :func:`raise_if_interrupted_since` find such an interrupt
    afterwards. Idempotent; imports tvm-ffi, so call it where TVM is about to work, not
    at import.
    """
    import signal
    import threading

    import tvm_ffi

    tvm_ffi.register_error("KeyboardInterrupt", KeyboardInterrupt)
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def interrupt_mark() -> int:
    """A mark to pass to :func:`raise_if_interrupted_since` after TVM work."""
    return _presses


def raise_if_interrupted_since(mark: int) -> None:
    """Raise the ``KeyboardInterrupt`` TVM swallowed, if Ctrl-C was pressed since ``mark``."""
    if _presses != mark:
        raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """A Ctrl-C inside is raised on leaving, not where it lands.

    For code that must not stop halfway: TVM's pool ``shutdown`` takes a lock, kills
    its workers and only then lets the lock go, and a ``KeyboardInterrupt`` in between
    left the lock taken and the pool not shut down, so its destructor, at exit, waited
    on that lock for good (the hung tunes' one thread waited there: 2 to 3 in about 25
    presses at random moments here, 0 of 23 since).
    Only in the main thread and only where SIGINT raises (a background job ignoring it
    stays as it is).
    """
    import signal
    import threading

    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield
        return
    pressed: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pressed:
            previous(signal.SIGINT, None)  # counts the press as the handler does, and raises


@contextlib.contextmanager
def threads_started_deaf_to_ctrl_c() -> Iterator[None]:
    """Threads started inside, and the processes they start, have SIGINT blocked.

    A terminal's Ctrl-C goes to its whole process group, so TVM's pool workers (started
    by the pool's threads) got it too: pressed while they imported TVM, each printed a
    KeyboardInterrupt traceback under tune's one line. A thread inherits its creator's
    signal mask, and a process the mask of the thread that starts it, so workers started
    from here never see the press; the tune, which does, stops them. The main thread's
    mask is back as it was on leaving, so a press meanwhile is only held until then.
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
