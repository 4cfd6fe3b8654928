"""The zoo's parity cases: the field's architectures, each built from its package's own code with random
weights at a CPU-sized config. matrix.toml names this module's `CASES` for the whole zoo, and `QUICK` for
the subset CI runs on every change (the `cpu-quick` entry).
"""

from __future__ import annotations

import importlib.util

from torchyard.cases import Case, KnownFailure
from zoo import diffusion, language, vision

# ExecuTorch's edge lowering re-traces GPT-2's attention output, no longer contiguous, into transformers'
# Conv1D, whose `x.view(-1, x.size(-1))` then fails (transformers/pytorch_utils.py); torch.export and inductor
# take the same program. The same failure class as pytorch/pytorch#141107 (a view after a permute, open).
GPT2_EDGE_VIEW = KnownFailure(
    "ExecuTorch's edge lowering meets transformers' Conv1D view of a non-contiguous tensor (pytorch/pytorch#141107)",
    raises="ValueError",
    match=r"Cannot view a tensor with shape torch\.Size\(\[2, 12, 64\]\) and strides \(64, 128, 1\)",
)

TORCHVISION = [
    Case("tv_resnet18", vision.resnet18, vision.image(), description="torchvision ResNet-18"),
    Case("tv_mobilenet_v3_small", vision.mobilenet_v3_small, vision.image(), description="torchvision MobileNetV3-S"),
    Case("tv_efficientnet_b0", vision.efficientnet_b0, vision.image(), description="torchvision EfficientNet-B0"),
    Case("tv_convnext", vision.convnext, vision.image(), description="torchvision ConvNeXt, two narrow stages"),
    Case("tv_vit", vision.vit, vision.image(size=32), description="torchvision VisionTransformer, 32x32, patch 8"),
    Case("tv_lraspp", vision.lraspp, vision.image(), description="torchvision LR-ASPP MobileNetV3 segmentation"),
]

TIMM = [
    Case("timm_convnextv2_atto", vision.timm_model("convnextv2_atto"), vision.image(), description="timm ConvNeXt-V2"),
    Case(
        "timm_mobilevitv2_050",
        vision.timm_model("mobilevitv2_050"),
        vision.image(),
        description="timm MobileViT-v2 0.5 (convolutions and separable self-attention)",
    ),
    Case(
        "timm_vit_tiny",
        vision.timm_model("vit_tiny_patch16_224", img_size=64),
        vision.image(),
        description="timm ViT-Tiny at 64x64",
    ),
]

TRANSFORMERS = [
    Case("hf_bert", language.bert, language.tokens(), description="transformers BertModel, padded batch"),
    Case(
        "hf_gpt2",
        language.gpt2,
        language.tokens(),
        description="transformers GPT-2 logits, padded batch",
        known_failures=dict.fromkeys(("executorch-portable", "executorch-xnnpack"), GPT2_EDGE_VIEW),
    ),
    Case(
        "hf_llama_prefill",
        language.LlamaPrefill,
        language.tokens(),
        description="transformers Llama prefill with its KV cache (grouped-query attention)",
    ),
    Case(
        "hf_llama_decode",
        language.LlamaDecodeStep,
        language.decode_inputs,
        description="transformers Llama: one decoding step from a KV cache, greedy token",
    ),
    Case("hf_vit", language.hf_vit, language.pixel_values, description="transformers ViTModel, 32x32"),
    Case("hf_whisper_encoder", language.whisper_encoder, language.mel_frames, description="transformers Whisper"),
]

DIFFUSERS = [
    Case("diffusers_unet2d", diffusion.unet2d, diffusion.noisy_sample, description="diffusers UNet2DModel"),
    Case(
        "diffusers_ddim_step",
        diffusion.DenoisingStep,
        diffusion.sample_only,
        description="diffusers UNet2DModel noise prediction, then DDIMScheduler.step",
    ),
]

CASES = [*TORCHVISION, *TIMM, *TRANSFORMERS, *DIFFUSERS]

if importlib.util.find_spec("lerobot") is not None:  # in the torch 2.11 entry's lock only (it needs torch < 2.12)
    from zoo.robotics import LEROBOT

    CASES += LEROBOT

# One quick one (diffusers' UNet with attention blocks, whose XNNPACK delegation splits): what CI runs on every
# change, within its time.
QUICK = [case for case in CASES if case.name == "diffusers_unet2d"]
