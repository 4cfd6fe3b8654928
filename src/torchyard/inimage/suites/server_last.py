"""Imported into the harness's fork server alone, last of `fork_server.PRELOAD`: what the server imported is
kept out of the collector's sight, and the server ends without tearing torch down.

Every child the server forks (the lane's lowering child, each whole run) starts with torch's objects,
millions of them. A full collection in a child walked them all again: pytest collects twice at the end of
each session (to report unraisable exceptions), 0.12 s of a whole run's 0.2 s here, eleven whole runs a run.
`gc.freeze` moves what the server holds now into the permanent generation, which its children inherit and
no collection walks (CPython's documented use before forking, which also keeps the collector from
touching, and so copying, the pages the children share).

The server lives until the run ends (it reads the run's end as the end of a pipe) and then exits like any
interpreter, finalizing every module it imported: with torch, half a second of CPU after the run, which
overlapped the next command (and held the run's output open, so a pipe reading it waited too). Exit
handlers run last-registered first, so this one, registered after the server's imports, ends the server
before the rest; none of them has anything to do there: the server never runs torch, and its children
leave through `os._exit` (multiprocessing's forked children never run exit handlers).
"""

import atexit
import gc
import os

gc.freeze()
atexit.register(os._exit, 0)
