"""The built-in targets: they build, step, and each fixed twin computes the same thing."""

from __future__ import annotations

import pytest
import torch

from reporter.target import DEFAULT_SUITE, build, resolve
from reporter.targets import bloat, seq2seq


@pytest.mark.parametrize("name", DEFAULT_SUITE)  # ddp needs ranks: tests/test_distributed.py
def test_every_builtin_builds_at_tiny_size(name):
    spec, builder = resolve(name)
    target = build(spec, builder, "cpu", "tiny")
    assert target.batch_size > 0
    batch = next(iter(target.batches))
    forward = target.forward or (lambda m, b: m(b[0]))
    out = forward(target.model, batch)
    if target.loss is not None:
        loss = target.loss(out, batch)
        assert loss.dim() == 0 and torch.isfinite(loss)


def test_bloated_mixing_equals_matmul_mixing():
    gen = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(3, 2, 24, 16, generator=gen).unbind(0)
    torch.testing.assert_close(bloat.bloated_mixing(q, k, v), bloat.matmul_mixing(q, k, v),
                               rtol=1e-4, atol=1e-5)


def test_bloat_models_with_the_same_weights_give_the_same_output():
    slow = bloat.MixerModel(16, 2, bloat.bloated_mixing)
    fast = bloat.MixerModel(16, 2, bloat.matmul_mixing)
    fast.load_state_dict(slow.state_dict())
    x = torch.randn(2, 12, 16)
    torch.testing.assert_close(slow(x), fast(x), rtol=1e-4, atol=1e-5)


def test_seq2seq_loop_and_one_call_decode_the_same():
    looped = seq2seq.Seq2Seq(vocab=50, hidden=8, loop=True)
    whole = seq2seq.Seq2Seq(vocab=50, hidden=8, loop=False)
    whole.load_state_dict(looped.state_dict())
    src, tgt = torch.randint(1, 50, (3, 7)), torch.randint(1, 50, (3, 5))
    torch.testing.assert_close(looped(src, tgt), whole(src, tgt), rtol=1e-4, atol=1e-5)


def test_seq2seq_pads_on_the_cpu_with_pad_sequence():
    items = [(torch.tensor([1, 2, 3]), torch.tensor([4])), (torch.tensor([5]), torch.tensor([6, 7]))]
    src, tgt = seq2seq.collate(items)
    assert src.tolist() == [[1, 2, 3], [5, 0, 0]]
    assert tgt.tolist() == [[4, 0], [6, 7]]
