"""Models for issue 66, item 5 (findings that generalise): a healthy CLIP whose quick_gelu
is element-wise work on one tensor, and models that already use torch's fused attention
modules. Test-only."""

from __future__ import annotations

import torch
from torch import nn

from reporter.collect.target import Target


def _clip_model(attention: str = "sdpa") -> nn.Module:
    """transformers' CLIPModel from a small config, random weights, hidden_act quick_gelu
    (CLIP's default), wide MLPs (intermediate 4x hidden) so that the activation's share is
    large."""
    from transformers import CLIPConfig

    from transformers import CLIPModel

    torch.manual_seed(0)
    text = {"vocab_size": 1000, "hidden_size": 128, "intermediate_size": 512,
            "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 32,
            "hidden_act": "quick_gelu"}
    vision = {"hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 2,
              "num_attention_heads": 4, "image_size": 64, "patch_size": 8,
              "hidden_act": "quick_gelu"}
    config = CLIPConfig(text_config=text, vision_config=vision, projection_dim=64)
    config._attn_implementation = attention
    return CLIPModel(config)


def _clip_batches(batch: int, seq: int = 32, n: int = 4) -> list[tuple[torch.Tensor, ...]]:
    gen = torch.Generator().manual_seed(0)
    return [(torch.randint(0, 1000, (batch, seq), generator=gen),
             torch.randn(batch, 3, 64, 64, generator=gen)) for _ in range(n)]


def clip_train(device: str = "cpu", preset: str = "default") -> Target:
    """A healthy CLIP training step (contrastive loss, AdamW): its quick_gelu is a chain of
    element-wise operators on one tensor, no pairwise product."""
    model = _clip_model().to(device)
    batch = 16
    return Target(model=model, batches=_clip_batches(batch), batch_size=batch,
                  forward=lambda m, b: m(input_ids=b[0], pixel_values=b[1],
                                         return_loss=True).loss,
                  loss=lambda out, b: out,
                  optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4))


def clip_inference(device: str = "cpu", preset: str = "default") -> Target:
    """The same CLIP in inference."""
    model = _clip_model().to(device).eval()
    batch = 16
    return Target(model=model, batches=_clip_batches(batch), batch_size=batch,
                  forward=lambda m, b: m(input_ids=b[0], pixel_values=b[1]).logits_per_image,
                  modes=("inference",))


class _Encoder(nn.Module):
    """A classifier over an nn.TransformerEncoder of nn.TransformerEncoderLayer: torch's own
    attention modules, batch first, as their documentation advises."""

    def __init__(self, dim: int = 64, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x).mean(dim=1))


class _Attends(nn.Module):
    """nn.MultiheadAttention called as its documentation shows, need_weights left at its
    default (True): the weights are computed piece by piece, and dropped."""

    def __init__(self, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.head = nn.Linear(dim, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.attn(x, x, x)
        return self.head(out.mean(dim=1))


def _sequences(batch: int, seq: int, dim: int = 64) -> list[tuple[torch.Tensor, ...]]:
    gen = torch.Generator().manual_seed(0)
    return [(torch.randn(batch, seq, dim, generator=gen),
             torch.randint(0, 8, (batch,), generator=gen)) for _ in range(4)]


def _train(model: nn.Module, batch: int, seq: int) -> Target:
    return Target(model=model, batches=_sequences(batch, seq), batch_size=batch,
                  loss=lambda out, b: nn.functional.cross_entropy(out, b[1]),
                  optimizer=torch.optim.SGD(model.parameters(), lr=1e-3))


def _infer(model: nn.Module, batch: int, seq: int) -> Target:
    return Target(model=model.eval(), batches=_sequences(batch, seq), batch_size=batch,
                  modes=("inference",))


def encoder_inference(device: str = "cpu", preset: str = "default") -> Target:
    """nn.TransformerEncoderLayer in inference: torch's fast path
    (aten::_transformer_encoder_layer_fwd), whose attention on the CPU is bmm and softmax
    apart."""
    torch.manual_seed(0)
    return _infer(_Encoder().to(device), 4, 256)


def encoder_train(device: str = "cpu", preset: str = "default") -> Target:
    """The same encoder in training: its self-attention calls scaled_dot_product_attention
    (need_weights=False), no fast path."""
    torch.manual_seed(0)
    return _train(_Encoder().to(device), 4, 256)


def mha_weights_inference(device: str = "cpu", preset: str = "default") -> Target:
    """nn.MultiheadAttention (batch first) asked for its weights, in inference: the fast
    path, with the weights."""
    torch.manual_seed(0)
    return _infer(_Attends().to(device), 4, 256)


def mha_weights_train(device: str = "cpu", preset: str = "default") -> Target:
    """The same in training: the slow path, bmm and softmax for the weights."""
    torch.manual_seed(0)
    return _train(_Attends().to(device), 4, 256)


class _QuickGELU(nn.Module):
    """CLIP's activation: ``x * sigmoid(1.702 x)``, element-wise on one tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class _PairScores(nn.Module):
    """A quick_gelu MLP over tokens, then (with ``pairs``) token-pair scores by
    broadcasting: (B, T, 1, D) * (B, 1, T, D) summed over D, a pairwise tensor that
    ``h @ h.transpose(1, 2)`` never makes."""

    def __init__(self, dim: int, pairs: bool) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), _QuickGELU(), nn.Linear(4 * dim, dim))
        self.pairs = pairs
        self.head = nn.Linear(dim, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.mlp(x)
        if self.pairs:
            scores = (h.unsqueeze(2) * h.unsqueeze(1)).sum(-1)  # (B, T, T)
            h = scores.softmax(-1) @ h
        return self.head(h.mean(dim=1))


def pairwise_broadcast(device: str = "cpu", preset: str = "default") -> Target:
    """Token-pair scores made by broadcasting a multiply (no repeat): a blow-up."""
    torch.manual_seed(0)
    return _train(_PairScores(64, pairs=True).to(device), 4, 128)


def gelu_only(device: str = "cpu", preset: str = "default") -> Target:
    """The same model without the pair scores: its quick_gelu only."""
    torch.manual_seed(0)
    return _train(_PairScores(64, pairs=False).to(device), 4, 128)
