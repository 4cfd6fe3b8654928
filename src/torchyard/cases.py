"""The public API for adopters' parity cases: `from torchyard.cases import Case`.

Importable where torch is (inside images and venvs); the implementation lives in `torchyard.inimage.cases`.
"""

from torchyard.inimage.cases import Call, Case, KnownFailure
from torchyard.inimage.cases.files import InputFiles

__all__ = ["Call", "Case", "InputFiles", "KnownFailure"]
