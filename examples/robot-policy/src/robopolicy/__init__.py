"""robopolicy: a small vision-and-state robot policy."""

from robopolicy.policy import Policy, load_normalization

__all__ = ["Policy", "load_normalization"]
