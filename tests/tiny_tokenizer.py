"""A byte-level tokenizer with the project's chat templates, for tests that need no model weights."""

from __future__ import annotations

from typing import Any

from metatrain.models import CHAT_TEMPLATES

SPECIAL = ["<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>", "<bos>", "<pad>"]


def tiny_tokenizer(style: str) -> Any:
    """A byte-level tokenizer (no merges) with both styles' special tokens and ``style``'s template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {ch: i for i, ch in enumerate(bytes_to_unicode().values())}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    eos = "<|im_end|>" if style == "chatml" else "<end_of_turn>"
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<bos>", eos_token=eos, pad_token="<pad>"
    )
    tok.add_special_tokens({"additional_special_tokens": SPECIAL})
    tok.chat_template = CHAT_TEMPLATES[style]
    return tok


def save_tiny_model(path: Any, tok: Any, seed: int = 0) -> Any:
    """Save a 2-layer random Llama with ``tok``'s vocabulary, and ``tok``, to ``path``; return ``path``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        eos_token_id=tok.convert_tokens_to_ids(tok.eos_token),
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path
