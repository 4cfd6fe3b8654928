"""matrix.toml: schema (frozen dataclasses), loading with pointed errors, selection, per-machine settings."""

from torchyard.matrix.load import load_plan, parse_plan
from torchyard.matrix.schema import (
    AcceleratorConfig,
    Entry,
    ImageRef,
    Index,
    Plan,
    Tolerance,
    VendorPin,
)
from torchyard.matrix.select import narrow_suites, select_entries

__all__ = [
    "AcceleratorConfig",
    "Entry",
    "ImageRef",
    "Index",
    "Plan",
    "Tolerance",
    "VendorPin",
    "load_plan",
    "narrow_suites",
    "parse_plan",
    "select_entries",
]
