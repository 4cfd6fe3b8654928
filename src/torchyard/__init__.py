"""torchyard: prove that exported and compiled PyTorch programs compute what eager PyTorch computes."""

__version__ = "0.1.0"
