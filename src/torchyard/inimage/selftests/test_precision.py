"""Precision: combinations a device cannot compute are refused before any test, and float32 is full float32."""

from __future__ import annotations

import pytest
import torch

from torchyard.inimage.selftests.planted import RUN_DEVICE
from torchyard.inimage.selftests.whole_runs import REPORTS, whole_run
from torchyard.inimage.start.precision import PrecisionError, check_precision

pytestmark = pytest.mark.harness


def test_fp16_on_cpu_is_refused() -> None:
    with pytest.raises(PrecisionError, match="fp16 on the CPU is refused"):
        check_precision("fp16", "cpu")
    with pytest.raises(PrecisionError, match=r"compute capability 8.0 .* has 7.5"):
        check_precision("bf16", "cuda", (7, 5), hip=False)
    check_precision("bf16", "cuda", (8, 0), hip=False)
    check_precision("bf16", "cuda", (7, 5), hip=True)  # ROCm: HIP's bf16 does not follow NVIDIA's rule


@whole_run(
    "--torchyard-accelerator", "cpu", "--torchyard-precision", "fp16", REPORTS, test_ok="def test_ok():\n    pass\n"
)
def test_fp16_on_cpu_stops_the_run(beside: pytest.RunResult) -> None:
    result = beside
    assert result.ret == 3
    result.stderr.fnmatch_lines(["*fp16 on the CPU is refused*"])


def test_mps_precision_rules() -> None:
    with pytest.raises(PrecisionError, match=r"bf16 on MPS needs macOS 14 or newer; this Mac runs 13.6"):
        check_precision("bf16", "mps", macos=(13, 6))
    check_precision("bf16", "mps", macos=(14, 0))
    check_precision("fp16", "mps", macos=(13, 0))


def tf32_error(device: torch.device) -> float:
    """The relative error of a float32 matrix product on `device` against float64 on the CPU."""
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(512, 512, generator=generator, dtype=torch.float64) for _ in range(2))
    exact = a @ b
    got = (a.float().to(device) @ b.float().to(device)).cpu().double()
    return float((got - exact).norm() / exact.norm())


def test_float32_matrix_products_on_the_run_device_are_full_precision() -> None:
    """TF32 (a 10-bit mantissa) puts a 512-deep float32 product about 1e-4 off float64; full float32 about
    1e-7. The run pinned TF32 off: this checks that the device computed it so."""
    error = tf32_error(RUN_DEVICE)
    assert error < 1e-5, f"float32 matmul on {RUN_DEVICE} is {error:.1e} off float64: TF32 or lower precision is on"
