"""Library architectures no other test uses (issue #66: findings that generalise), each
built from a small config with random weights, as a user would profile them: a
ConvNeXt image classifier and a Swin in training, ALBERT and ELECTRA in training, and a
Mistral decoder in inference. Read by hand (docs/findings.md) and by
tests/test_generalise_libraries.py: no false alarm, and each precision worth timed."""

from __future__ import annotations

import torch

from reporter.collect.target import Target


def _ids(vocab: int, batch: int, seq: int, n: int = 2):
    gen = torch.Generator().manual_seed(0)
    return [(torch.randint(0, vocab, (batch, seq), generator=gen),) for _ in range(n)]


def _images(batch: int, size: int, classes: int, n: int = 2):
    gen = torch.Generator().manual_seed(0)
    return [(torch.randn(batch, 3, size, size, generator=gen),
             torch.randint(0, classes, (batch,), generator=gen)) for _ in range(n)]


def convnext_train(device: str = "cpu", preset: str = "default") -> Target:
    from transformers import ConvNextConfig, ConvNextForImageClassification

    torch.manual_seed(0)
    config = ConvNextConfig(num_channels=3, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1],
                            num_labels=10, image_size=64)
    model = ConvNextForImageClassification(config).to(device)
    return Target(model=model, batches=_images(8, 64, 10), batch_size=8,
                  forward=lambda m, b: m(pixel_values=b[0], labels=b[1]).loss,
                  loss=lambda out, b: out,
                  optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4))


def swin_train(device: str = "cpu", preset: str = "default") -> Target:
    from transformers import SwinConfig, SwinForImageClassification

    torch.manual_seed(0)
    config = SwinConfig(image_size=64, patch_size=4, embed_dim=48, depths=[2, 2],
                        num_heads=[3, 6], window_size=4, num_labels=10)
    model = SwinForImageClassification(config).to(device)
    return Target(model=model, batches=_images(8, 64, 10), batch_size=8,
                  forward=lambda m, b: m(pixel_values=b[0], labels=b[1]).loss,
                  loss=lambda out, b: out,
                  optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4))


def albert_train(device: str = "cpu", preset: str = "default") -> Target:
    from transformers import AlbertConfig, AlbertForMaskedLM

    torch.manual_seed(0)
    config = AlbertConfig(vocab_size=1000, embedding_size=128, hidden_size=256,
                          num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                          max_position_embeddings=256)
    model = AlbertForMaskedLM(config).to(device)
    return Target(model=model, batches=_ids(1000, 8, 128), batch_size=8,
                  forward=lambda m, b: m(input_ids=b[0], labels=b[0]).loss,
                  loss=lambda out, b: out,
                  optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4))


def electra_train(device: str = "cpu", preset: str = "default") -> Target:
    from transformers import ElectraConfig, ElectraForSequenceClassification

    torch.manual_seed(0)
    config = ElectraConfig(vocab_size=1000, embedding_size=128, hidden_size=256,
                           num_hidden_layers=2, num_attention_heads=4, intermediate_size=1024,
                           max_position_embeddings=256, num_labels=3)
    model = ElectraForSequenceClassification(config).to(device)
    gen = torch.Generator().manual_seed(0)
    batches = [(ids, torch.randint(0, 3, (8,), generator=gen)) for (ids,) in _ids(1000, 8, 128)]
    return Target(model=model, batches=batches, batch_size=8,
                  forward=lambda m, b: m(input_ids=b[0], labels=b[1]).loss,
                  loss=lambda out, b: out,
                  optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4))


def mistral_inference(device: str = "cpu", preset: str = "default") -> Target:
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    config = MistralConfig(vocab_size=1000, hidden_size=256, intermediate_size=688,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           max_position_embeddings=512, sliding_window=None)
    model = MistralForCausalLM(config).to(device).eval()
    return Target(model=model, batches=_ids(1000, 4, 256), batch_size=4,
                  forward=lambda m, b: m(input_ids=b[0]).logits, modes=("inference",))
