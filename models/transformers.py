"""Transformers for ORT training: a ViT-tiny-style classifier and a GPT-tiny-style character LM.

Both are written so that the TorchScript exporter (TRAINING mode) gives ORT's gradient builder a graph it can
differentiate (see models/transformer_export.py for the traps and for what is done to users' own modules):
attention is spelled out (MatMul → Softmax → Dropout *with* its mask output → MatMul) instead of going
through ``scaled_dot_product_attention``, whose exported Dropout has no mask; LayerNorm is whatever
``exportable()`` makes of it at the export opset. Shapes are static: the sequence length is fixed when
the model is built.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from onnxcomp.errors import OnnxcompError


class SelfAttention(nn.Module):
    """Multi-head self-attention with the probabilities dropped out through ``nn.Dropout`` (mask exported)."""

    def __init__(self, dim: int, heads: int, dropout: float, causal_len: int | None = None) -> None:
        super().__init__()
        if dim % heads:
            raise OnnxcompError(f"attention width {dim} is not divisible by {heads} heads; pick dim = k·heads")
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.attn_drop = nn.Dropout(dropout)
        if causal_len is not None:
            # A buffer, not a parameter: exported as a frozen initializer the Where reads.
            self.register_buffer("causal_mask", torch.tril(torch.ones(causal_len, causal_len, dtype=torch.bool)),
                                 persistent=False)
        else:
            self.causal_mask = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (z.reshape(b, t, self.heads, self.head_dim).transpose(1, 2) for z in self.qkv(x).chunk(3, dim=-1))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        if self.causal_mask is not None:
            scores = scores.masked_fill(~self.causal_mask[:t, :t], float("-inf"))
        probs = self.attn_drop(F.softmax(scores, dim=-1))
        return self.proj((probs @ v).transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    """Pre-norm transformer block: x + Drop(Attn(LN(x))), then x + Drop(MLP(LN(x))) with a GELU MLP."""

    def __init__(self, dim: int, heads: int, dropout: float, mlp_ratio: int = 4,
                 causal_len: int | None = None) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads, dropout, causal_len)
        self.drop1 = nn.Dropout(dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim),
                                 nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop1(self.attn(self.norm1(x)))
        return x + self.mlp(self.norm2(x))


class ViTTiny(nn.Module):
    """ViT-style classifier: patch embedding (conv), learned positions, pre-norm blocks, mean-pooled head.

    The number of tokens is (image / patch)²: 64 patches at 32×32 with the default patch of 4.
    """

    input_kind = "image"

    def __init__(self, num_classes: int, image: int = 32, patch: int = 4, dim: int = 128, depth: int = 4,
                 heads: int = 4, dropout: float = 0.1) -> None:
        super().__init__()
        self.patch, self.image = patch, image
        self.check_image_size(image, image)
        self.patch_embed = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        self.pos_embed = nn.Parameter(torch.zeros(1, (image // patch) ** 2, dim))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*(Block(dim, heads, dropout) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def check_image_size(self, height: int, width: int) -> None:
        if height != self.image or width != self.image:
            raise OnnxcompError(f"this ViT was built for {self.image}×{self.image} images (learned positions for "
                                f"{(self.image // self.patch) ** 2} patches), got {height}×{width}; build it "
                                "with the image size you export")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.patch_embed(x).flatten(2).transpose(1, 2)
        h = self.blocks(self.drop(tokens + self.pos_embed))
        return self.head(self.norm(h).mean(dim=1))


class GPTTiny(nn.Module):
    """GPT-style causal character LM. Input int64 tokens [batch, seq]; output logits [batch·seq, vocab] (flat,
    so onnxblock's CrossEntropyLoss takes next-character labels [batch·seq])."""

    input_kind = "tokens"

    def __init__(self, vocab: int, seq_len: int = 256, dim: int = 128, depth: int = 4, heads: int = 4,
                 dropout: float = 0.1) -> None:
        super().__init__()
        if seq_len < 1:
            raise OnnxcompError(f"sequence length must be a positive integer, got {seq_len}")
        self.seq_len, self.vocab = seq_len, vocab
        self.tok_embed = nn.Embedding(vocab, dim)
        self.pos_embed = nn.Parameter(torch.zeros(1, seq_len, dim))
        nn.init.normal_(self.tok_embed.weight, std=0.02)
        nn.init.normal_(self.pos_embed, std=0.02)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*(Block(dim, heads, dropout, causal_len=seq_len) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def example_input(self, batch: int) -> torch.Tensor:
        return torch.randint(0, self.vocab, (batch, self.seq_len), dtype=torch.int64)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # One-hot product instead of a lookup: ORT's CPU GatherGrad (the lookup's backward) adds repeated
        # token rows in a thread-dependent order — three runs of the same step gave three different
        # embedding gradients — while the product's gradient is a Gemm, deterministic run to run.
        one_hot = F.one_hot(tokens, self.vocab).to(self.tok_embed.weight.dtype)
        h = self.blocks(self.drop(one_hot @ self.tok_embed.weight + self.pos_embed))
        return self.head(self.norm(h)).reshape(-1, self.vocab)


def vit_tiny(num_classes: int, image: int = 32, **options: int) -> ViTTiny:
    return ViTTiny(num_classes, image=image, **options)


def gpt_tiny(num_classes: int, seq_len: int = 256, **options: int) -> GPTTiny:
    return GPTTiny(num_classes, seq_len=seq_len, **options)
