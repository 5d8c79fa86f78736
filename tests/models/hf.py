"""Targets built from well-known models of the transformers library: small configs,
random weights, inputs made in code (nothing downloaded). Test-only."""

from __future__ import annotations

import torch

from reporter.collect.target import Target


def _ids(vocab: int, batch: int, seq: int, n: int = 4):
    gen = torch.Generator().manual_seed(0)
    return [(torch.randint(0, vocab, (batch, seq), generator=gen),) for _ in range(n)]


def _large(preset: str) -> bool:
    """``large``: GPU-sized (what `reporter run` takes on CUDA); else CPU-sized."""
    return preset == "large"


def bert_inference(device: str = "cpu", preset: str = "default",
                   attention: str = "sdpa", seq: int = 128) -> Target:
    """A small BERT encoder in inference: matrix products do the work, as they should.
    ``attention``: transformers' attn_implementation; ``seq``: tokens per sequence on the
    CPU."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    big = _large(preset)
    config = BertConfig(vocab_size=1000, hidden_size=1024 if big else 256,
                        num_hidden_layers=8 if big else 2, num_attention_heads=16 if big else 4,
                        intermediate_size=4096 if big else 1024,
                        attn_implementation=attention)
    model = BertModel(config).to(device).eval()
    batch, seq = (32, 512) if big else (8 * 128 // seq or 1, seq)
    return Target(model=model, batches=_ids(1000, batch, seq), batch_size=batch,
                  forward=lambda m, batch: m(input_ids=batch[0]).last_hidden_state,
                  modes=("inference",))


def bert_eager_inference(device: str = "cpu", preset: str = "default") -> Target:
    """BERT on transformers' eager attention (products, softmax and mask apart) over
    sequences of 512 tokens, where the attention's share is large."""
    return bert_inference(device, preset, attention="eager", seq=512)


def bert_sdpa_inference(device: str = "cpu", preset: str = "default") -> Target:
    """The same BERT on SDPA: its fix."""
    return bert_inference(device, preset, attention="sdpa", seq=512)


def llama_train(device: str = "cpu", preset: str = "default", autocast: str | None = None
                ) -> Target:
    """A small Llama training step (AdamW, foreach)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    big = _large(preset)
    config = LlamaConfig(vocab_size=1000, hidden_size=1024 if big else 256,
                         intermediate_size=2752 if big else 688,
                         num_hidden_layers=4 if big else 2, num_attention_heads=16 if big else 4,
                         num_key_value_heads=8 if big else 2, max_position_embeddings=512)
    model = LlamaForCausalLM(config).to(device)
    batch, seq = (16, 512) if big else (4, 128)
    return Target(model=model, batches=_ids(1000, batch, seq), batch_size=batch,
                  forward=lambda m, batch: m(input_ids=batch[0], labels=batch[0]).loss,
                  loss=lambda out, batch: out,
                  optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4), autocast=autocast)


def llama_train_bf16(device: str = "cpu", preset: str = "default") -> Target:
    """The Llama training step under bf16 autocast: on tensor-core hardware, no
    precision lever is left."""
    return llama_train(device, preset, autocast="bf16")


def gpt2_train(device: str = "cpu", preset: str = "default") -> Target:
    """A small GPT-2 training step, with a per-parameter (for-loop) Adam: its element-wise
    time is the optimizer's."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=1000, n_positions=128, n_embd=128, n_layer=2, n_head=4)
    model = GPT2LMHeadModel(config).to(device)
    return Target(model=model, batches=_ids(1000, 4, 64), batch_size=4,
                  forward=lambda m, batch: m(input_ids=batch[0], labels=batch[0]).loss,
                  loss=lambda out, batch: out,
                  optimizer=torch.optim.Adam(model.parameters(), lr=1e-4, foreach=False))


class _PairwiseHead(torch.nn.Module):
    """A planted problem (seed 001's): token-pair scores built by materialising every pair
    with repeat, then multiplying and summing element by element, instead of h @ h^T."""

    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, ids):
        h = self.encoder(input_ids=ids).last_hidden_state  # (B, T, D)
        t = h.shape[1]
        left = h.unsqueeze(2).repeat(1, 1, t, 1)
        right = h.unsqueeze(1).repeat(1, t, 1, 1)
        return (left * right).sum(-1)


def bert_pairwise_blowup(device: str = "cpu", preset: str = "default") -> Target:
    """The small BERT in inference, with a pairwise head that blows its tensors up."""
    bert = bert_inference(device, preset)
    return Target(model=_PairwiseHead(bert.model).to(device).eval(), batches=bert.batches,
                  batch_size=bert.batch_size, forward=lambda m, batch: m(batch[0]),
                  modes=("inference",))


def vit_train(device: str = "cpu", preset: str = "default") -> Target:
    """A small ViT training step: its matrix products are spread over attention and MLP
    layers, none of which dominates alone."""
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(image_size=128, patch_size=8, hidden_size=96, num_hidden_layers=4,
                       num_attention_heads=3, intermediate_size=384, num_labels=10)
    model = ViTForImageClassification(config).to(device)
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(8, 3, 128, 128, generator=gen),
                torch.randint(0, 10, (8,), generator=gen)) for _ in range(4)]
    return Target(model=model, batches=batches, batch_size=8,
                  forward=lambda m, batch: m(pixel_values=batch[0], labels=batch[1]).loss,
                  loss=lambda out, batch: out,
                  optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4))



def bart_train(device: str = "cpu", preset: str = "default", dropout: float = 0.1) -> Target:
    """A small BART (encoder-decoder) training step with its configuration's default
    dropout (0.1 after attention and the feed-forward blocks), SGD. No test uses it: it
    is the third architecture tried against its report's advice (README, #27)."""
    from transformers import BartConfig, BartForConditionalGeneration

    torch.manual_seed(0)
    config = BartConfig(vocab_size=1000, d_model=256, encoder_layers=2, decoder_layers=2,
                        encoder_attention_heads=4, decoder_attention_heads=4,
                        encoder_ffn_dim=1024, decoder_ffn_dim=1024, max_position_embeddings=256,
                        dropout=dropout, attention_dropout=0.0, activation_dropout=0.0)
    model = BartForConditionalGeneration(config).to(device)
    batches = _ids(1000, 8, 64)
    return Target(model=model, batches=batches, batch_size=8,
                  forward=lambda m, batch: m(input_ids=batch[0], labels=batch[0]).loss,
                  loss=lambda out, batch: out,
                  optimizer=torch.optim.SGD(model.parameters(), lr=1e-3))


def bart_train_no_dropout(device: str = "cpu", preset: str = "default") -> Target:
    """The same BART step with dropout=0.0, as the dropout-cost advice says."""
    return bart_train(device, preset, dropout=0.0)


def bart_train_bf16(device: str = "cpu", preset: str = "default") -> Target:
    """The same BART step under bf16 autocast: the dominant-operator advice's lower
    precision for its matrix products."""
    t = bart_train(device, preset)
    t.autocast = "bf16"
    return t


def t5_train(device: str = "cpu", preset: str = "default", dropout: float = 0.1,
             foreach: bool | None = None, fused: bool | None = None) -> Target:
    """A small T5 (encoder-decoder, relative position buckets) training step with its
    configuration's default dropout (0.1), Adam as constructed by default (on the CPU,
    torch steps its parameters one by one). No test uses it: an architecture tried
    against its report's advice (README, #27)."""
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    config = T5Config(vocab_size=1000, d_model=256, d_kv=64, d_ff=1024, num_layers=2,
                      num_decoder_layers=2, num_heads=4, dropout_rate=dropout,
                      decoder_start_token_id=0, pad_token_id=0)
    model = T5ForConditionalGeneration(config).to(device)
    batches = _ids(1000, 8, 64)
    return Target(model=model, batches=batches, batch_size=8,
                  forward=lambda m, batch: m(input_ids=batch[0], labels=batch[0]).loss,
                  loss=lambda out, batch: out,
                  optimizer=torch.optim.Adam(model.parameters(), lr=1e-4, foreach=foreach,
                                             fused=fused))


def t5_train_no_dropout(device: str = "cpu", preset: str = "default") -> Target:
    """The same T5 step with dropout_rate=0.0, as the dropout-cost advice says."""
    return t5_train(device, preset, dropout=0.0)


def t5_train_foreach(device: str = "cpu", preset: str = "default") -> Target:
    """The same T5 step with Adam(..., foreach=True), the optimizer advice's alternative."""
    return t5_train(device, preset, foreach=True)


def t5_train_fused(device: str = "cpu", preset: str = "default") -> Target:
    """The same T5 step with Adam(..., fused=True), as the optimizer advice says."""
    return t5_train(device, preset, fused=True)


def distilbert_train(device: str = "cpu", preset: str = "default", dropout: float = 0.1,
                     foreach: bool | None = None) -> Target:
    """A small DistilBERT masked-language-model training step with its configuration's
    default dropout (0.1, and 0.1 on the attention weights), Adam as constructed by
    default. No test uses it: an architecture tried against its report's advice
    (README, #27)."""
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    torch.manual_seed(0)
    config = DistilBertConfig(vocab_size=1000, dim=256, n_layers=2, n_heads=4, hidden_dim=1024,
                              max_position_embeddings=256, dropout=dropout,
                              attention_dropout=dropout)
    model = DistilBertForMaskedLM(config).to(device)
    batches = _ids(1000, 8, 128)
    return Target(model=model, batches=batches, batch_size=8,
                  forward=lambda m, batch: m(input_ids=batch[0], labels=batch[0]).loss,
                  loss=lambda out, batch: out,
                  optimizer=torch.optim.Adam(model.parameters(), lr=1e-4, foreach=foreach))


def distilbert_train_no_dropout(device: str = "cpu", preset: str = "default") -> Target:
    """The same DistilBERT step without dropout, as the dropout-cost advice says."""
    return distilbert_train(device, preset, dropout=0.0)


def distilbert_train_foreach(device: str = "cpu", preset: str = "default") -> Target:
    """The same DistilBERT step with Adam(..., foreach=True), as the optimizer advice says."""
    return distilbert_train(device, preset, foreach=True)


def distilbert_train_bf16(device: str = "cpu", preset: str = "default") -> Target:
    """The same DistilBERT step under bf16 autocast, as the near-roofline lever says."""
    t = distilbert_train(device, preset)
    t.autocast = "bf16"
    return t
