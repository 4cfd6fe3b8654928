"""Error metrics between one output and its reference, and the verdict against a tolerance."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from torchyard.inimage.start.tolerances import Bounds
from torchyard.names import NOISE_MISS


@dataclass(frozen=True)
class Comparison:
    """How one output leaf compares with the reference. `problem` is why it fails, or "" when it passes;
    `rule` names the rule it was judged by where that is not the plain bounds (a small leaf's)."""

    output: str  # the leaf's path in the output pytree ("" for a bare tensor), or its position
    shape: list[int]
    dtype: str
    max_abs_error: float
    scaled_max_error: float
    rel_l2_error: float
    cosine: float
    problem: str
    rule: str = ""
    batch: str = ""  # which batch, where a case has input files (`Case.batch_labels`)
    # Eager's own (scaled max, rel L2) error at the run's precision against float64, where the noise rule held
    # this leaf to `noise_factor` times it (`noise_bounds`); None where it was held to the table's bounds alone
    noise: tuple[float, float] | None = None
    # The (scaled max, rel L2) bounds the noise rule held it to, where it did: what a comparison with another run
    # reads as its bound (the result's `bounds` are the table's)
    held_to: tuple[float, float] | None = None

    @property
    def passed(self) -> bool:
        return not self.problem

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


# Bounds that hold any value: a comparison made only to measure (eager's own error, a step's precision spread).
UNBOUNDED = Bounds(math.inf, math.inf, -math.inf)


def _finite(value: float) -> float:
    return value if math.isfinite(value) else float("inf")


def beyond_bounds(scaled: float, rel_l2: float, cosine: float, bounds: Bounds) -> list[str]:
    """Each metric outside its bound, said in words; none when all are within (a bound itself passes)."""
    failures = []
    if scaled > bounds.max_scaled_error:
        failures.append(f"scaled max error {scaled:.3g} > {bounds.max_scaled_error:.3g}")
    if rel_l2 > bounds.max_rel_l2:
        failures.append(f"relative L2 error {rel_l2:.3g} > {bounds.max_rel_l2:.3g}")
    if cosine < bounds.min_cosine:
        failures.append(f"cosine {cosine:.9f} < {bounds.min_cosine}")
    return failures


def noise_bounds(bounds: Bounds, noise: tuple[float, float] | None, dtype: torch.dtype) -> Bounds:
    """`bounds` with the scaled max and relative L2 errors tightened to `bounds.noise_factor` times eager's own
    (`noise`: eager at the run's precision against float64), each taken as at least the dtype's machine epsilon:
    below one unit in the last place, a backend's own correct rounding is as large (a transcendental function's
    approximation a few ulps off: benchmarks/README.md, "The noise rule"). The table's bounds stay the ceiling.
    A fault some times the precision's own error is caught, dense or in a few elements."""
    if not bounds.noise_factor or noise is None or not dtype.is_floating_point:
        return bounds
    least = torch.finfo(dtype).eps
    scaled, rel_l2 = (bounds.noise_factor * max(value, least) for value in noise)
    return dataclasses.replace(
        bounds, max_scaled_error=min(bounds.max_scaled_error, scaled), max_rel_l2=min(bounds.max_rel_l2, rel_l2)
    )


def compare_values(
    output: torch.Tensor,
    reference: torch.Tensor,
    expected_dtype: torch.dtype,
    bounds: Bounds,
    position: str,
    *,
    floor: float = 0.0,
    spread: tuple[float, float, float] | None = None,
    spread_factor: float = 1.0,
    noise: tuple[float, float] | None = None,
) -> Comparison:
    """`output` against `reference` within `bounds` (`_plain_values`), tightened by the noise rule where eager's
    own error is known (`noise`, `noise_bounds`: a miss says so); a leaf that misses them, where the precision
    itself moves it by `spread` (a training step's leaf: `Reference.spreads`), is judged again within
    `spread_factor` times that, and the rule, the bounds it was held to and why, named. A step's leaf is held by
    the noise rule below that widened ceiling."""
    ceiling = bounds if spread is None else _spread_bounds(bounds, spread, spread_factor)
    tight = noise_bounds(ceiling, noise, expected_dtype)
    if tight != ceiling:
        assert noise is not None
        comparison = _plain_values(output, reference, expected_dtype, tight, position, floor=floor)
        comparison = dataclasses.replace(comparison, noise=noise, held_to=(tight.max_scaled_error, tight.max_rel_l2))
        if comparison.passed:
            return comparison
        within = _plain_values(output, reference, expected_dtype, ceiling, position, floor=floor).passed
        if not within and spread is None:
            return comparison
        if within:
            whose = "the table's bounds" if ceiling == bounds else "its bounds, widened by the precision's spread,"
            said = (
                f"{comparison.problem} {NOISE_MISS} eager {_dtype_name(expected_dtype)} is {noise[0]:.3g} scaled, "
                f"{noise[1]:.3g} rel L2 from float64, and {bounds.noise_factor:g} times that is the bound; {whose} "
                f"{ceiling.max_scaled_error:.3g}, {ceiling.max_rel_l2:.3g} pass it)"
            )
            return dataclasses.replace(comparison, problem=said)
    comparison = _plain_values(output, reference, expected_dtype, bounds, position, floor=floor)
    if comparison.passed or spread is None:
        return comparison
    if ceiling == bounds:
        return comparison
    judged = _plain_values(output, reference, expected_dtype, ceiling, position, floor=floor)
    rule = (
        f"precision-spread rule: two eager steps whose weights and inputs differ by the precision's rounding land "
        f"{spread[0]:.3g} apart (scaled), so bounds {spread_factor:g} times that: scaled max error "
        f"{ceiling.max_scaled_error:.3g}, rel L2 {ceiling.max_rel_l2:.3g}, cosine {ceiling.min_cosine:.9f}"
    )
    return dataclasses.replace(judged, rule="; ".join(part for part in (judged.rule, rule) if part))


def _spread_bounds(bounds: Bounds, spread: tuple[float, float, float], factor: float) -> Bounds:
    """`bounds` widened to `factor` times a step's precision spread where that is wider."""
    scaled, rel_l2, off = (factor * value for value in spread)
    return dataclasses.replace(
        bounds,
        max_scaled_error=max(bounds.max_scaled_error, scaled),
        max_rel_l2=max(bounds.max_rel_l2, rel_l2),
        min_cosine=min(bounds.min_cosine, 1.0 - off),
    )


def _plain_values(
    output: torch.Tensor,
    reference: torch.Tensor,
    expected_dtype: torch.dtype,
    bounds: Bounds,
    position: str,
    *,
    floor: float = 0.0,
) -> Comparison:
    """Compare `output` (any device) with `reference` (float64 CPU, or exact for integer results).

    `expected_dtype` is what eager produces on the device: a backend that returns another dtype (an
    integer where true division gives floats, say) fails outright. `floor` is the smallest magnitude errors
    are measured against: a leaf that is zero in exact arithmetic (a bias's gradient before BatchNorm) is
    rounding noise in float32, measured against its group's scale (the training step's), not its own.
    """
    # Values as they read: a sparse layout dense, a lazily conjugated complex tensor resolved.
    output = _readable(output.detach().cpu())
    reference = _readable(reference.detach().cpu())
    shape = list(output.shape)
    problem = ""
    if output.dtype != expected_dtype:
        problem = f"dtype {output.dtype} differs from eager's {expected_dtype}"
    elif list(reference.shape) != shape:
        problem = f"shape {shape} differs from the reference's {list(reference.shape)}"
    if problem:
        return Comparison(position, shape, str(output.dtype), math.inf, math.inf, math.inf, 0.0, problem)
    if output.is_complex():
        output, reference = torch.view_as_real(output), torch.view_as_real(reference)
    if not output.is_floating_point():
        exact = torch.equal(output.to(torch.int64), reference.to(torch.int64))
        error = float((output.to(torch.float64) - reference.to(torch.float64)).abs().max()) if output.numel() else 0.0
        return Comparison(
            position, shape, str(output.dtype), error, error, error, 1.0, "" if exact else "integer values differ"
        )
    actual = output.to(torch.float64).flatten()
    expected = reference.to(torch.float64).flatten()
    finite = torch.isfinite(actual) & torch.isfinite(expected)
    if not bool(finite.all()):
        # An infinity of the reference's sign, or NaN where the reference has NaN, is the right value (log 0,
        # a masked score); any other non-finite value, on either side, is wrong. The finite rest is measured.
        same = (actual == expected) | (actual.isnan() & expected.isnan())
        wrong = int((~torch.isfinite(actual) & ~same).sum())
        missed = int((~torch.isfinite(expected) & torch.isfinite(actual)).sum())
        if wrong or missed:
            said = [f"{wrong} non-finite values (NaN or Inf)"] if wrong else []
            said += [f"{missed} finite values where the reference is NaN or Inf"] if missed else []
            return Comparison(position, shape, str(output.dtype), math.inf, math.inf, math.inf, 0.0, "; ".join(said))
        actual, expected = actual[finite], expected[finite]
    if actual.numel() == 0:
        return Comparison(position, shape, str(output.dtype), 0.0, 0.0, 0.0, 1.0, "")
    difference = actual - expected
    max_abs = float(difference.abs().max())
    if floor and float(expected.abs().max()) < floor:
        # Zero at its group's scale: only how far it strays from zero, against the floor, means anything.
        scaled = max_abs / floor
        problem = f"scaled max error {scaled:.3g} > {bounds.max_scaled_error:.3g} (against {floor:.3g})"
        rule = (  # its rel L2 and cosine carry that scaled error and 1: the table's columns show no others
            f"small-leaf rule: largest error {max_abs:.3g} is {scaled:.3g} of its group's floor {floor:.3g} "
            f"(bound {bounds.max_scaled_error:.3g}); rel L2 and cosine not bounded"
        )
        return Comparison(position, shape, str(output.dtype), _finite(max_abs), _finite(scaled), _finite(scaled),
                          1.0, problem if scaled > bounds.max_scaled_error else "", rule)  # fmt: skip
    scale = float(expected.abs().max()) or 1.0
    reference_norm = float(expected.norm())
    rel_l2 = float(difference.norm()) / reference_norm if reference_norm else float(difference.norm())
    norms = float(actual.norm()) * reference_norm
    cosine = float(actual @ expected) / norms if norms else (1.0 if float(actual.norm()) == reference_norm else 0.0)
    scaled = max_abs / scale
    failures = beyond_bounds(scaled, rel_l2, cosine, bounds)
    return Comparison(
        position,
        shape,
        str(output.dtype),
        _finite(max_abs),
        _finite(scaled),
        _finite(rel_l2),
        cosine,
        "; ".join(failures),
    )


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _readable(tensor: torch.Tensor) -> torch.Tensor:
    return (tensor.to_dense() if tensor.layout != torch.strided else tensor).resolve_conj()


def compare_statistics(
    output: torch.Tensor, reference: torch.Tensor, expected_dtype: torch.dtype, position: str
) -> Comparison:
    """For random programs: shape, dtype, finiteness, and mean and standard deviation against the
    reference's own draw (two independent samples: each bound is six standard errors of the difference)."""
    output = output.detach().cpu()
    shape = list(output.shape)
    expected_shape = list(reference.shape)
    problem = ""
    if output.dtype != expected_dtype or shape != expected_shape:
        problem = f"got {output.dtype} {shape}, eager gives {expected_dtype} {expected_shape}"
    elif not bool(torch.isfinite(output).all()):
        problem = "non-finite values (NaN or Inf)"
    elif output.numel() > 1:
        values, expected = output.to(torch.float64).flatten(), reference.detach().cpu().to(torch.float64).flatten()
        mean, std = float(values.mean()), float(values.std())
        want_mean, want_std = float(expected.mean()), float(expected.std())
        variance = (std**2 + want_std**2) / values.numel()
        mean_bound = 6 * math.sqrt(variance) + 1e-12
        std_bound = 6 * math.sqrt(variance / 2) + 1e-12
        if abs(mean - want_mean) > mean_bound or abs(std - want_std) > std_bound:
            problem = (
                f"moments mean={mean:.4f} std={std:.4f} differ from eager's mean={want_mean:.4f} std={want_std:.4f}"
                f" (bounds {mean_bound:.3g}, {std_bound:.3g})"
            )
    return Comparison(position, shape, str(output.dtype), 0.0, 0.0, 0.0, 1.0, problem)


def compare_objects(output: object, reference: object, position: str) -> Comparison:
    """A leaf that is not a tensor on one side or both (None, a bool, a string): the same type and an equal
    value, or a tensor where eager gives one, else it fails saying what each gave."""
    kind = type(output).__name__
    same = type(output) is type(reference) and not isinstance(output, torch.Tensor) and output == reference
    problem = "" if same else f"{_shown(output)} where eager gives {_shown(reference)}"
    shape = list(output.shape) if isinstance(output, torch.Tensor) else []
    return Comparison(position, shape, kind, 0.0 if same else math.inf, 0.0 if same else math.inf,
                      0.0 if same else math.inf, 1.0 if same else 0.0, problem)  # fmt: skip


def _shown(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {list(value.shape)}"
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."
