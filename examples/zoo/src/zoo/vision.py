"""Vision architectures from torchvision and timm, built from their own code with random weights at
CPU-sized inputs (nothing is downloaded: `weights=None`, `pretrained=False`)."""

from __future__ import annotations

import timm
import torch
from torch import nn
from torchvision import models
from torchvision.models.convnext import CNBlockConfig, ConvNeXt
from torchvision.models.segmentation import lraspp_mobilenet_v3_large
from torchvision.models.vision_transformer import VisionTransformer


def image(batch: int = 2, size: int = 64, channels: int = 3):  # type: ignore[no-untyped-def]
    def make(generator: torch.Generator) -> tuple[torch.Tensor]:
        return (torch.randn(batch, channels, size, size, generator=generator),)

    return make


def resnet18() -> nn.Module:
    return models.resnet18(weights=None, num_classes=10)


def mobilenet_v3_small() -> nn.Module:
    return models.mobilenet_v3_small(weights=None, num_classes=10)


def efficientnet_b0() -> nn.Module:
    return models.efficientnet_b0(weights=None, num_classes=10)


def convnext() -> nn.Module:
    """torchvision's ConvNeXt with two narrow stages (its LayerNorm2d, stochastic depth off in eval)."""
    return ConvNeXt([CNBlockConfig(32, 64, 2), CNBlockConfig(64, None, 2)], num_classes=10)


def vit() -> nn.Module:
    """torchvision's VisionTransformer at 32x32, patches of 8, two layers."""
    return VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128, num_classes=10
    )


def lraspp() -> nn.Module:
    """LR-ASPP on MobileNetV3-Large, a segmentation head (its output upsampled to the input's size)."""
    return lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=4)


def timm_model(name: str, **kwargs: object):  # type: ignore[no-untyped-def]
    def make() -> nn.Module:
        return timm.create_model(name, pretrained=False, num_classes=10, **kwargs)

    make.__qualname__ = f"timm_{name}"
    return make
