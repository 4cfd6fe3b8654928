"""A tensor's digest for the artifact cache's key, in any layout: a strided tensor by its bytes, a sparse,
compressed, MKL-DNN or quantized one by the strided tensors that hold its values (`.contiguous()` refuses
them: `unsupported memory format option Contiguous`), a meta tensor by its shape alone (it holds no values)."""

from __future__ import annotations

import ctypes
import hashlib

import torch

COMPRESSED = {
    torch.sparse_csr: ("crow_indices", "col_indices"),
    torch.sparse_bsr: ("crow_indices", "col_indices"),
    torch.sparse_csc: ("ccol_indices", "row_indices"),
    torch.sparse_bsc: ("ccol_indices", "row_indices"),
}


class NoDigest(Exception):
    """A tensor whose values cannot be read here (a layout or a subclass this module does not know)."""


def tensor_digest(tensor: torch.Tensor) -> str:
    """sha256 of a tensor's dtype, shape and values (read straight from memory: numpy is not required)."""
    data = tensor.detach()
    if data.layout == torch.strided and not data.is_quantized and not data.is_meta:
        return _strided_digest(data)
    digest = hashlib.sha256(f"{data.layout} {data.dtype}{tuple(data.shape)}".encode())
    for part in _value_parts(data):
        digest.update((part if isinstance(part, str) else _strided_digest(part)).encode())
    return digest.hexdigest()


def _strided_digest(data: torch.Tensor) -> str:
    data = data.to("cpu").resolve_conj().resolve_neg().contiguous()
    digest = hashlib.sha256(f"{data.dtype}{tuple(data.shape)}".encode())
    if data.numel():
        digest.update(ctypes.string_at(data.data_ptr(), data.numel() * data.element_size()))
    return digest.hexdigest()


def _value_parts(data: torch.Tensor) -> list[torch.Tensor | str]:
    """The strided tensors (and the scalars, as text) that hold a tensor's values, in a fixed order."""
    if data.is_meta:
        return []
    if data.is_quantized:
        scheme = data.qscheme()
        if scheme in (torch.per_tensor_affine, torch.per_tensor_symmetric):
            scales: list[torch.Tensor | str] = [f"{scheme} {data.q_scale()} {data.q_zero_point()}"]
        else:
            axis = data.q_per_channel_axis()
            scales = [f"{scheme} {axis}", data.q_per_channel_scales(), data.q_per_channel_zero_points()]
        return [*scales, data.int_repr()]
    if data.layout == torch.sparse_coo:
        coalesced = data.coalesce()  # one order of indices, duplicates summed: what it computes with
        return [coalesced.indices(), coalesced.values()]
    if data.layout in COMPRESSED:
        return [*(getattr(data, name)() for name in COMPRESSED[data.layout]), data.values()]
    if data.layout == torch._mkldnn:  # type: ignore[attr-defined]
        return [data.to_dense()]
    raise NoDigest(f"a {data.layout} tensor of {type(data).__qualname__}")
