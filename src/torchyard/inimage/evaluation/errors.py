"""How a backend's error is described and matched, fresh or read back from the artifact cache, and whose it is:
a step of a stack (torch.export, ExecuTorch's lowering) names the stack's frame, and an error in torchyard's
own code names torchyard's file, so that neither is read as the model's."""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator
from pathlib import Path

TORCHYARD = Path(__file__).resolve().parents[2]  # the torchyard package: errors.py is in inimage/evaluation/
_STAGE = "_torchyard_stage"  # set on an error raised inside `stage`: (what was running, whose frames to name)


class RecordedFailure(Exception):
    """A lowering's known failure read back from the artifact cache: the same key (code, weights,
    inputs, versions, device) failed this way in an earlier run, so it is not lowered again only to fail
    again. It carries what the fresh error had: its class and bases by name, its message, its one line."""

    def __init__(self, types: list[str], message: str, description: str) -> None:
        super().__init__(message)
        self.types, self.message, self.description = types, message, description


def error_types(error: BaseException) -> list[str]:
    """The exception's class and its bases, by name (what a known failure's `raises` is matched against)."""
    if isinstance(error, RecordedFailure):
        return list(error.types)
    return [klass.__name__ for klass in type(error).__mro__]


@contextlib.contextmanager
def stage(name: str, package: str | None = None) -> Iterator[None]:
    """An error raised inside is described as raised in `name` ("ExecuTorch's lowering"), at the innermost
    frame of `package`'s files (`executorch`: whatever torch function it called last, the pass that called
    it), or at the innermost frame where no package is named (torch.export fails in the model's own code as
    often as in its own). Its class and message are left as they are: known failures match those. The
    innermost stage wins: ExecuTorch exports through torch.export."""
    try:
        yield
    except Exception as error:
        if not hasattr(error, _STAGE):
            with contextlib.suppress(AttributeError):  # an exception class without a __dict__: described plainly
                setattr(error, _STAGE, (name, package))
        raise


def describe_error(error: BaseException) -> str:
    """One line: the exception, its first message line, and where it was raised (in which stage, where it was
    raised inside one)."""
    if isinstance(error, RecordedFailure):
        return f"{error.description} (recorded by an earlier run of this same lowering)"
    message = str(error).strip().splitlines()
    frames = traceback.extract_tb(error.__traceback__)
    staged = getattr(error, _STAGE, None)
    if isinstance(staged, tuple) and frames:
        name, package = staged
        where = f" (in {name}, at {_stack_frame(frames, package) if package else _frame(frames[-1])})"
    else:
        where = f" (at {_placed(frames)})" if frames else ""
    return f"{type(error).__name__}: {message[0] if message else ''}{where}{_sealed(error)}"


def _placed(frames: traceback.StackSummary) -> str:
    """Where an error outside any stage is said to be: its innermost frame where that is the project's or
    torchyard's; else (the standard library, a released distribution: torch's `Module.__getattr__` for a
    missing attribute) the innermost frame of the project's code that led there, then where it was raised."""
    from torchyard.inimage.evaluation.cache.record import project_file  # it imports the key code, which imports us

    innermost = frames[-1]
    if project_file(innermost.filename) is not None or Path(innermost.filename).resolve().is_relative_to(TORCHYARD):
        return _frame(innermost)
    ours = [frame for frame in frames if project_file(frame.filename) is not None]
    return f"{_frame(ours[-1])}; raised at {_frame(innermost)}" if ours else _frame(innermost)


# What a network error looks like, by class name or message: a case that reaches for the network in a run that has
# none (torchyard's containers have none unless the entry says why it needs one).
NETWORK_ERRORS = frozenset({"URLError", "gaierror", "ConnectionError", "ConnectTimeout", "MaxRetryError"})
NETWORK_MESSAGES = ("Temporary failure in name resolution", "Name or service not known", "Network is unreachable")


def _sealed(error: BaseException) -> str:
    """What to do about a network error ("" for any other): the run has no network."""
    named = set(error_types(error)) & NETWORK_ERRORS or any(text in str(error) for text in NETWORK_MESSAGES)
    if not named:
        return ""
    return (
        "; the run has no network (torchyard's containers are sealed unless the entry's `network` says why it "
        "needs one): ship what the case downloads with the project (package data, `InputFiles`), or build the "
        "model without downloading (pretrained weights off)"
    )


def _frame(frame: traceback.FrameSummary) -> str:
    return f"{Path(frame.filename).name}:{frame.lineno}"


def _stack_frame(frames: traceback.StackSummary, package: str) -> str:
    """The innermost frame in `package`'s files, as `package/path/file.py:line in function`, and the innermost
    frame of all where that is elsewhere."""
    inside = [frame for frame in frames if package in Path(frame.filename).parts]
    if not inside:
        return _frame(frames[-1])
    ours = inside[-1]
    parts = Path(ours.filename).parts
    path = "/".join(parts[len(parts) - 1 - parts[::-1].index(package) :])
    raised = "" if ours is frames[-1] else f"; raised at {_frame(frames[-1])}"
    return f"{path}:{ours.lineno} in {ours.name}{raised}"


def torchyards_fault(error: BaseException) -> str:
    """One line for an error in torchyard's own code: the exception and the torchyard file it left
    (`torchyard/inimage/evaluation/cache/keys.py:329`), and the innermost frame where that is another's."""
    message = str(error).strip().splitlines()
    frames = traceback.extract_tb(error.__traceback__)
    ours = [frame for frame in frames if Path(frame.filename).resolve().is_relative_to(TORCHYARD)]
    where = ""
    if ours:
        path = Path(ours[-1].filename).resolve().relative_to(TORCHYARD.parent).as_posix()
        where = f" (at {path}:{ours[-1].lineno}" + ("" if ours[-1] is frames[-1] else f", in {_frame(frames[-1])}")
        where += ")"
    elif frames:
        where = f" (at {_frame(frames[-1])})"
    return f"{type(error).__name__}: {message[0] if message else ''}{where}"
