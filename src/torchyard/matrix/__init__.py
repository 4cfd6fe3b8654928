"""matrix.toml: schema (frozen dataclasses), loading with pointed errors, and entry selection."""

from torchyard.matrix.load import load_plan, parse_plan
from torchyard.matrix.schema import (
    ACCELERATOR_NAMES,
    SUITE_NAMES,
    AcceleratorConfig,
    Entry,
    ImageRef,
    Index,
    Plan,
    Tolerance,
    VendorPin,
)
from torchyard.matrix.select import select_entries

__all__ = [
    "ACCELERATOR_NAMES",
    "SUITE_NAMES",
    "AcceleratorConfig",
    "Entry",
    "ImageRef",
    "Index",
    "Plan",
    "Tolerance",
    "VendorPin",
    "load_plan",
    "parse_plan",
    "select_entries",
]
