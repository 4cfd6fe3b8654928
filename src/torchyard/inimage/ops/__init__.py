"""The ops suite: every OpInfo of the entry's own torch (`op_db`), a bounded number of samples each, wrapped as a
module and sent through every backend the entry has, against the float64 reference with the harness's metrics
and bounds; the outcomes checked against the stack's expectations file (`expectations`).

- `catalog`: the operators and their samples, and the rules that set some aside (counted and listed).
- `sweep`: one operator's samples through the backends, in a child process (a native abort is an outcome).
- `expectations`: the known outcomes per stack, as data; collected from a run, compared with one.
"""
