"""Language and audio architectures from transformers, built from small configs with random weights
(nothing is downloaded). Token ids are int64 and attention masks carry padding, as real batches do."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import (
    BertConfig,
    BertModel,
    DynamicCache,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    ViTConfig,
    ViTModel,
    WhisperConfig,
)
from transformers.models.whisper.modeling_whisper import WhisperEncoder

from torchyard.cases import Call

VOCAB = 512


def tokens(batch: int = 2, length: int = 12, padded: int = 3):  # type: ignore[no-untyped-def]
    """Token ids and an attention mask whose second row ends in `padded` pad positions."""

    def make(generator: torch.Generator) -> Call:
        input_ids = torch.randint(0, VOCAB, (batch, length), generator=generator)
        attention_mask = torch.ones(batch, length, dtype=torch.int64)
        attention_mask[1, length - padded :] = 0
        return Call(kwargs={"input_ids": input_ids, "attention_mask": attention_mask})

    return make


def bert() -> nn.Module:
    """BertModel: its output is a ModelOutput (last_hidden_state, pooler_output)."""
    config = BertConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        max_position_embeddings=64,
    )  # fmt: skip
    return BertModel(config, add_pooling_layer=True)


def gpt2() -> nn.Module:
    """GPT2LMHeadModel's logits for a padded batch (no cache)."""
    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=64,
        n_embd=64,
        n_layer=2,
        n_head=4,
        use_cache=False,
        bos_token_id=1,
        eos_token_id=2,
    )
    return LogitsOnly(GPT2LMHeadModel(config))


class LogitsOnly(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.model(input_ids=input_ids, attention_mask=attention_mask).logits
        return logits


def llama_config() -> LlamaConfig:
    return LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip


class LlamaPrefill(nn.Module):
    """LlamaForCausalLM's prefill of a padded batch with its KV cache on: the logits, and each layer's cached
    keys and values (grouped-query attention: 2 key/value heads for 4 query heads)."""

    def __init__(self) -> None:
        super().__init__()
        self.model = LlamaForCausalLM(llama_config())

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, Any]:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=True)
        cache = out.past_key_values
        keys = tuple(layer.keys for layer in cache.layers)
        values = tuple(layer.values for layer in cache.layers)
        return {"logits": out.logits, "keys": keys, "values": values}


class LlamaDecodeStep(nn.Module):
    """One decoding step of LlamaForCausalLM from a cache of `past` positions: the next token's logits and its
    greedy choice (int64), the cache grown by one."""

    def __init__(self) -> None:
        super().__init__()
        self.model = LlamaForCausalLM(llama_config())

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        keys: tuple[torch.Tensor, ...],
        values: tuple[torch.Tensor, ...],
    ) -> dict[str, Any]:
        cache = DynamicCache()
        for layer, (key, value) in enumerate(zip(keys, values, strict=True)):
            cache.update(key, value, layer)
        past = keys[0].shape[2]
        position_ids = (attention_mask.sum(dim=1, keepdim=True) - 1).clamp(min=0)
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, use_cache=True,
            position_ids=position_ids, cache_position=torch.arange(past, past + 1),
        )  # fmt: skip
        logits = out.logits[:, -1]
        grown = out.past_key_values
        return {
            "logits": logits,
            "next_token": logits.argmax(dim=-1),
            "keys": tuple(layer.keys for layer in grown.layers),
        }


def decode_inputs(generator: torch.Generator) -> Call:
    """A cache of 8 positions (the second row's last 2 padding), and one new token each."""
    config = llama_config()
    heads, width = config.num_key_value_heads, config.hidden_size // config.num_attention_heads
    past = 8
    shape = (2, heads, past, width)
    keys = tuple(torch.randn(shape, generator=generator) for _ in range(config.num_hidden_layers))
    values = tuple(torch.randn(shape, generator=generator) for _ in range(config.num_hidden_layers))
    attention_mask = torch.ones(2, past + 1, dtype=torch.int64)
    attention_mask[1, past - 2 : past] = 0
    input_ids = torch.randint(0, VOCAB, (2, 1), generator=generator)
    return Call(kwargs={"input_ids": input_ids, "attention_mask": attention_mask, "keys": keys, "values": values})


def hf_vit() -> nn.Module:
    """transformers' ViTModel at 32x32, patches of 8."""
    config = ViTConfig(
        image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128,
    )  # fmt: skip
    return ViTModel(config, add_pooling_layer=False)


def pixel_values(generator: torch.Generator) -> Call:
    return Call(kwargs={"pixel_values": torch.randn(2, 3, 32, 32, generator=generator)})


def whisper_encoder() -> nn.Module:
    """Whisper's audio encoder (two convolutions over log-mel frames, then attention layers)."""
    config = WhisperConfig(
        num_mel_bins=16, d_model=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128,
        max_source_positions=32, decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=128,
        vocab_size=VOCAB, max_target_positions=32, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        decoder_start_token_id=3,
    )  # fmt: skip
    return WhisperEncoder(config)


def mel_frames(generator: torch.Generator) -> Call:
    return Call(kwargs={"input_features": torch.randn(2, 16, 64, generator=generator)})
