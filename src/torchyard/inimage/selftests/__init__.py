"""The harness's own tests, apart from the suites a user reads: what they prove is kept as a proof per stack
(`start.proofs`), and a later run on that stack leaves them out."""
