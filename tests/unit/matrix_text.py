"""A small valid matrix used by the unit tests; each test changes one thing in it."""

VALID = """\
exclude-newer = 2026-11-01T00:00:00Z

[indexes]
pypi = "https://pypi.org/simple"
extra = "https://example.invalid/simple"

[accelerators.cpu]
base-image = "debian:bookworm-slim@sha256:7802002798b0e351323ed2357ae6dc5a8c4d0a05a57e7f4d8f97136151d3d603"
indexes = ["pypi"]
runs-on = ["ubuntu-24.04"]

[accelerators.cuda]
base-image = "ubuntu:24.04@sha256:1e622c5f073b4f6bfad6632f2616c7f59ef256e96fe78bf6a595d1dc4376ac02"
indexes = ["pypi", "extra"]
index-strategy = "unsafe-best-match"
runs-on = ["self-hosted", "gpu", "cuda"]
docker-run = ["--shm-size", "8g"]

[accelerators.cuda.vendor]
torch = "2.9.1"

[[entry]]
name = "cpu"
accelerator = "cpu"
python = "3.11"
requirements = ["torch==2.14.*", "pytest"]

[[entry]]
name = "cuda"
accelerator = "cuda"
python = "3.12"
requirements = ["torch==2.14.*"]
suites = ["export", "parity"]
exclude-newer = 2026-10-01

[entry.tolerances."float32.inductor"]
max-scaled-error = 1e-4
min-cosine = 0.9999
"""
