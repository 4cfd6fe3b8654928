"""Imported into the harness's fork server alone, last of `fork_server.PRELOAD`. What the server imported is
frozen out of the collector's sight (`gc.freeze`, CPython's documented use before forking): every child it
forks inherits that, so no collection there walks torch's objects again or copies the pages they share.
The exit handler, registered after the server's imports and so run before theirs, ends the server without
finalizing what it imported: the server never runs torch, and its children leave through `os._exit`."""

import atexit
import gc
import os

gc.freeze()
atexit.register(os._exit, 0)
