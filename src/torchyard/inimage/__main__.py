"""Container entry point: pytest with the arguments the host's contract gives (`torchyard.contract`).

The probe runs once, in the plugin at pytest start-up: one line and exit 3 when the container cannot
test what its entry claims.
"""

from __future__ import annotations

import atexit
import gc
import logging
import os
import sys
import warnings

# torch warns as it is imported where numpy is not installed, as in an image of torch and the project alone:
# nothing the harness uses, and a test that needs numpy fails on its own import. Every process of the run (xdist's
# workers, the lane beside) inherits the filter.
NUMPY_MISSING = "ignore:Failed to initialize NumPy:UserWarning"
os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), NUMPY_MISSING]))
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)

# Off until the tests are collected (`freezer.Freezer` turns it on): the imports below and pytest's
# start-up allocate millions of objects that live all run, and the collector only walked them.
gc.disable()

_STATUS: list[int] = []


def _exit_without_teardown() -> None:
    """The last exit handler (registered before any other): once `main` has returned, every report is
    written and every other handler has run (inductor's workers stopped, ExecuTorch's temporary flatc
    removed), so the process ends here with `main`'s status instead of tearing down torch's and
    ExecuTorch's modules one by one, which is slow and checks nothing."""
    if _STATUS:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_STATUS[0])


atexit.register(_exit_without_teardown)  # before the imports below: handlers run last-registered first

import datetime as dt  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from torchyard import contract  # noqa: E402
from torchyard.inimage.start import proofs, replay  # noqa: E402
from torchyard.inimage.start.workers import device_count, xdist_args, xdist_plugin_args  # noqa: E402


def _serve_beside(argv: list[str], stack: str | None) -> None:
    """The harness's fork server, started before pytest imports torch: the lane beside the run then starts
    its work sooner, while the run does its own imports. Not where the self-tests are likely proven on this
    stack already (`proofs`): the lane then has nothing to do, and the server's imports would compete with
    the run's."""
    from torchyard.inimage.start import fork_server

    proven = stack is not None and proofs.likely_proven(os.environ, stack, argv)
    if fork_server.serves_this_run(argv) and not proven:
        fork_server.start_server()


def _device(accelerator: str) -> dict[str, object]:
    from torchyard.inimage.evaluation.cache.keys import device_identity
    from torchyard.inimage.start.probe import torch_device

    return device_identity(torch_device(accelerator))


def main(argv: list[str]) -> int:
    accelerator = os.environ.get(contract.ACCELERATOR, "cpu")
    argv = [*xdist_plugin_args(), *argv]
    argv = [*argv, *xdist_args(argv, accelerator, device_count(accelerator))]
    report_dir = Path(contract.Values(os.environ).text(contract.REPORT_DIR))
    store = replay.store_for(os.environ, report_dir)
    key: str | None = None
    if replay.enabled():
        key = replay.fingerprint(argv, os.environ, _device(accelerator))
        status = replay.replay(store, key, report_dir)
        if status is not None:
            return status
    started = dt.datetime.now(dt.UTC)
    try:  # once, without torch: what the proof's key and the fork server's start both need
        stack: str | None = proofs.stack_key(os.environ)
    except OSError as error:  # a file it reads: the self-tests all run, and no proof is kept
        stack = None
        print(f"torchyard: the self-tests will run without a proof: {error}", file=sys.stderr)
    _serve_beside(argv, stack)  # before the device's identity imports torch
    device = _device(accelerator)
    if key is None:  # every run keeps its verdicts: the first --reuse-results run after a plain one replays it
        try:
            key = replay.fingerprint(argv, os.environ, device)
        except OSError as error:  # a file it reads: the run goes on, and is not kept
            print(f"torchyard: this run's verdicts will not be kept for replay: {error}", file=sys.stderr)
    if stack is not None:
        os.environ[proofs.PROOF] = str(proofs.proof_path(os.environ, stack, device, argv))
    status = int(pytest.main(argv))
    if key is not None:
        replay.save(store, key, report_dir, status, started)
    return status


if __name__ == "__main__":
    _STATUS.append(main(sys.argv[1:]))
    sys.exit(_STATUS[0])
