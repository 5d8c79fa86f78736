"""seq2seq (seed 000): teacher forcing by a Python loop with slice assignment.

The baseline decodes one time step per call and writes each step's logits into
a preallocated tensor (``outputs[:, t] = ...``): every write is an aten::copy_,
and in backward every CopySlices node copies the whole gradient of
``outputs``. Batches are padded on the CPU with pad_sequence in the
DataLoader's collate function, as in the seed. The fixed twin runs the decoder
GRU over the whole teacher-forced sequence in one call.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

from ..target import Target
from . import sizes

SIZES = {
    "tiny": dict(batch=4, max_len=8, vocab=64, hidden=16, samples=16),
    "default": dict(batch=64, max_len=40, vocab=1000, hidden=32, samples=1024),
    "large": dict(batch=128, max_len=64, vocab=16000, hidden=512, samples=2048),
}
PAD = 0


class Seq2Seq(nn.Module):
    def __init__(self, vocab: int, hidden: int, loop: bool):
        super().__init__()
        self.emb = nn.Embedding(vocab, hidden, padding_idx=PAD)
        self.encoder = nn.GRU(hidden, hidden, batch_first=True)
        self.decoder = nn.GRU(hidden, hidden, batch_first=True)
        self.proj = nn.Linear(hidden, vocab)
        self.loop = loop

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        _, h = self.encoder(self.emb(src))
        emb = self.emb(tgt_in)
        if not self.loop:
            out, _ = self.decoder(emb, h)
            return self.proj(out)
        b, t = tgt_in.shape
        outputs = torch.zeros(b, t, self.proj.out_features, device=src.device)
        for step in range(t):
            out, h = self.decoder(emb[:, step:step + 1], h)
            outputs[:, step] = self.proj(out[:, 0])  # slice assignment: copy_ + CopySlices
        return outputs


class Sentences(torch.utils.data.Dataset):
    """Random token sequences of random length, made in code."""

    def __init__(self, count: int, max_len: int, vocab: int):
        gen = torch.Generator().manual_seed(0)
        lengths = torch.randint(max_len * 3 // 4, max_len + 1, (count, 2), generator=gen)
        self.items = [(torch.randint(1, vocab, (int(a),), generator=gen),
                       torch.randint(1, vocab, (int(b),), generator=gen)) for a, b in lengths]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def collate(items):
    src = pad_sequence([s for s, _ in items], batch_first=True, padding_value=PAD)
    tgt = pad_sequence([t for _, t in items], batch_first=True, padding_value=PAD)
    return src, tgt


def _build(device: str, preset: str, loop: bool) -> Target:
    s = sizes(SIZES, preset)
    torch.manual_seed(0)
    model = Seq2Seq(s["vocab"], s["hidden"], loop).to(device)
    data = DataLoader(Sentences(s["samples"], s["max_len"], s["vocab"]),
                      batch_size=s["batch"], shuffle=True, collate_fn=collate, drop_last=True)
    vocab = s["vocab"]
    return Target(
        model=model, batches=data, batch_size=s["batch"],
        forward=lambda m, batch: m(batch[0], batch[1][:, :-1]),
        loss=lambda out, batch: nn.functional.cross_entropy(
            out.reshape(-1, vocab), batch[1][:, 1:].reshape(-1), ignore_index=PAD),
        optimizer=torch.optim.Adam(model.parameters(), lr=1e-3),
    )


def baseline(device: str = "cpu", preset: str = "default") -> Target:
    return _build(device, preset, loop=True)


def fixed(device: str = "cpu", preset: str = "default") -> Target:
    return _build(device, preset, loop=False)
