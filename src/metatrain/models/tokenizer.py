"""Build a Hugging Face tokenizer from a GGUF vocabulary, and load a prepared one.

transformers' own GGUF tokenizer loading gets three things wrong for our files, so we build the
backend here and set every special token from the GGUF metadata:

* llama-family files: ``eos_token`` is taken from the *bos* id (SmolLM2 would get ``<|im_start|>``);
* gpt2-style vocabularies that contain the literal pieces ``<s>``/``</s>`` (Qwen2.5) get them added
  as special tokens, so ``<s>`` in text would stop being ordinary text;
* SentencePiece-BPE files (Gemma 3, ``tokenizer.ggml.model == "llama"``) become a Unigram model that
  ignores the merge order and splits words into fragments (``hello world`` -> 5 pieces instead of 2).
  We rebuild a BPE model whose merge ranks follow the piece scores, as llama.cpp tokenizes.

GGUF token types: CONTROL tokens become special added tokens, USER_DEFINED tokens (Gemma's newline
and space runs, ``<tool_call>`` in Qwen2.5) become non-special added tokens that always match whole.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from metatrain.models.errors import ModelError

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPM_SPACE = "▁"

#: The token that ends a turn in each template style; prepared tokenizers use it as ``eos_token``.
TURN_END: dict[str, str] = {"chatml": "<|im_end|>", "gemma": "<end_of_turn>"}


@attrs.frozen
class GGUFVocab:
    """The tokenizer metadata of a GGUF file."""

    model: str
    arch: str
    tokens: list[str]
    types: list[int]
    scores: list[float] | None
    bos_id: int | None
    eos_id: int | None
    pad_id: int | None
    unk_id: int | None
    add_bos: bool
    add_eos: bool


def _scalar(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def read_gguf_vocab(path: Path) -> GGUFVocab:
    """Read the ``tokenizer.ggml.*`` metadata of ``path`` (memory-mapped; no tensors are loaded)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    fields = reader.fields
    if "tokenizer.ggml.tokens" not in fields:
        raise ModelError(f"{path} has no tokenizer vocabulary")
    toks = fields["tokenizer.ggml.tokens"]
    tokens = [bytes(toks.parts[i]).decode("utf-8") for i in toks.data]
    tt = fields.get("tokenizer.ggml.token_type")
    types = [int(tt.parts[i][0]) for i in tt.data] if tt is not None else [NORMAL] * len(tokens)
    sc = fields.get("tokenizer.ggml.scores")
    scores = [float(sc.parts[i][0]) for i in sc.data] if sc is not None else None
    return GGUFVocab(
        model=str(_scalar(reader, "tokenizer.ggml.model")),
        arch=str(_scalar(reader, "general.architecture")),
        tokens=tokens,
        types=types,
        scores=scores,
        bos_id=_scalar(reader, "tokenizer.ggml.bos_token_id"),
        eos_id=_scalar(reader, "tokenizer.ggml.eos_token_id"),
        pad_id=_scalar(reader, "tokenizer.ggml.padding_token_id"),
        unk_id=_scalar(reader, "tokenizer.ggml.unknown_token_id"),
        add_bos=bool(_scalar(reader, "tokenizer.ggml.add_bos_token") or False),
        add_eos=bool(_scalar(reader, "tokenizer.ggml.add_eos_token") or False),
    )


def _spm_piece(token: str) -> str:
    """GGUF stores SentencePiece space runs with real spaces; the model sees them as ``▁``."""
    return SPM_SPACE * len(token) if token and " " in token and not token.strip() else token


def _spm_merges(pieces: list[str], types: list[int], scores: list[float]) -> list[tuple[str, str]]:
    """BPE merges for a SentencePiece-BPE vocabulary: each normal piece splits into two vocabulary
    pieces, ranked by the merged piece's score (highest first), as llama.cpp's SPM tokenizer merges."""
    normal = {p for p, t in zip(pieces, types, strict=True) if t == NORMAL}
    ranked: list[tuple[float, int, str, str]] = []
    for idx, (piece, kind) in enumerate(zip(pieces, types, strict=True)):
        if kind != NORMAL:
            continue
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in normal and right in normal:
                ranked.append((-scores[idx], idx, left, right))
    ranked.sort()
    return [(left, right) for _, _, left, right in ranked]


def _spm_backend(vocab: GGUFVocab) -> Tokenizer:
    from tokenizers import Tokenizer, decoders, normalizers
    from tokenizers.models import BPE

    if vocab.scores is None:
        raise ModelError("SentencePiece GGUF vocabulary has no scores")
    pieces = [_spm_piece(t) for t in vocab.tokens]
    ids: dict[str, int] = {}
    for i, piece in enumerate(pieces):
        ids.setdefault(piece, i)
    if len(ids) != len(pieces):
        raise ModelError("GGUF vocabulary has duplicate pieces; cannot build a faithful tokenizer")
    unk = pieces[vocab.unk_id] if vocab.unk_id is not None else None
    backend = Tokenizer(
        BPE(
            vocab=ids,
            merges=_spm_merges(pieces, vocab.types, vocab.scores),
            unk_token=unk,
            fuse_unk=True,
            byte_fallback=True,
            dropout=None,
        )
    )
    backend.normalizer = normalizers.Replace(" ", SPM_SPACE)
    backend.decoder = decoders.Sequence(
        [decoders.Replace(SPM_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    return backend


def _bpe_backend(path: Path) -> Tokenizer:
    """Byte-level BPE (``tokenizer.ggml.model == "gpt2"``): transformers' converter is right here."""
    from transformers.integrations.ggml import convert_gguf_tokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    parsed = load_gguf_checkpoint(str(path), return_tensors=False)
    backend, _ = convert_gguf_tokenizer(parsed["config"]["model_type"], parsed["tokenizer"])
    return backend


def _with_added_tokens(backend: Tokenizer, vocab: GGUFVocab) -> Tokenizer:
    """Replace the backend's added tokens with the GGUF's CONTROL (special) and USER_DEFINED ones."""
    from tokenizers import Tokenizer

    spm = vocab.model == "llama"
    added = []
    for i, (token, kind) in enumerate(zip(vocab.tokens, vocab.types, strict=True)):
        if kind not in (CONTROL, USER_DEFINED):
            continue
        content = _spm_piece(token) if spm else token
        added.append(
            {
                "id": i,
                "content": content,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": spm and SPM_SPACE in content,
                "special": kind == CONTROL,
            }
        )
    data = json.loads(backend.to_str())
    data["added_tokens"] = added
    return Tokenizer.from_str(json.dumps(data))


def build_tokenizer(
    gguf_path: Path,
    template_style: str,
    chat_template: str,
    model_max_length: int,
    vocab: GGUFVocab | None = None,
) -> PreTrainedTokenizerFast:
    """A fast tokenizer for ``gguf_path`` with our chat template, the style's turn-end token as
    ``eos_token``, a pad token (GGUF's, else eos) and left padding."""
    from transformers import PreTrainedTokenizerFast

    vocab = vocab or read_gguf_vocab(gguf_path)
    if vocab.model == "llama":
        backend = _spm_backend(vocab)
    elif vocab.model == "gpt2":
        backend = _bpe_backend(gguf_path)
    else:
        raise ModelError(f"unsupported GGUF tokenizer model {vocab.model!r} in {gguf_path}")
    backend = _with_added_tokens(backend, vocab)
    turn_end = TURN_END[template_style]
    if backend.token_to_id(turn_end) is None:
        raise ModelError(f"{gguf_path.name}: vocabulary lacks the turn-end token {turn_end!r}")

    def tok(i: int | None) -> str | None:
        return vocab.tokens[i] if i is not None and 0 <= i < len(vocab.tokens) else None

    pad = tok(vocab.pad_id) or turn_end
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=tok(vocab.bos_id),
        eos_token=turn_end,
        unk_token=tok(vocab.unk_id),
        pad_token=pad,
        add_bos_token=vocab.add_bos,
        add_eos_token=vocab.add_eos,
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=model_max_length,
    )
    tokenizer.chat_template = chat_template
    return tokenizer


def stop_token_ids(tokenizer: PreTrainedTokenizerBase, gguf_eos: str | None) -> list[int]:
    """Generation stop ids: the turn end (tokenizer eos) first, then the GGUF's own eos if different."""
    ids = [tokenizer.eos_token_id]
    if gguf_eos is not None:
        extra = tokenizer.convert_tokens_to_ids(gguf_eos)
        if isinstance(extra, int) and extra not in ids:
            ids.append(extra)
    return [i for i in ids if i is not None]


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """Load a prepared model's tokenizer (as ``AutoTokenizer`` would); pad token and left padding ensured."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer
