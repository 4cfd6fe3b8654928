"""Imported into the harness's fork server alone, last of `inner.PRELOAD`: the server ends without
tearing torch down.

The server lives until the run ends (it reads the run's end as the end of a pipe) and then exits like any
interpreter, finalizing every module it imported: with torch, half a second of CPU after the run, which
overlapped the next command (and held the run's output open, so a pipe reading it waited too). Exit
handlers run last-registered first, so this one, registered after the server's imports, ends the server
before the rest; none of them has anything to do there: the server never runs torch, and its children
leave through `os._exit` (multiprocessing's forked children never run exit handlers).
"""

import atexit
import os

atexit.register(os._exit, 0)
