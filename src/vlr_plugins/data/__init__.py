"""Training data for paragraph supervision: samples with their texts, and cached image embeddings.

Importing this package needs only torch and the standard library; safetensors,
pyarrow, PIL and transformers are imported by the functions that use them.
"""

from vlr_plugins.data.embedding_store import EmbeddingStore, EmbeddingStoreWriter
from vlr_plugins.data.errors import DataFormatError, MissingEmbeddingsError
from vlr_plugins.data.precompute import (
    BlipImageEncoder,
    list_images,
    load_encoder,
    precompute_image_embeddings,
)
from vlr_plugins.data.retrieval_set import RetrievalSet, read_retrieval_jsonl
from vlr_plugins.data.sample import (
    TEXT_FIELDS,
    ParagraphSample,
    read_paragraph_samples,
    write_paragraph_samples,
)
from vlr_plugins.data.synthetic_world import SyntheticWorld, SyntheticWorldConfig
from vlr_plugins.data.text_views import DrawnText, check_samples_have_views, draw_texts

__all__ = [
    "ParagraphSample",
    "TEXT_FIELDS",
    "read_paragraph_samples",
    "write_paragraph_samples",
    "EmbeddingStore",
    "EmbeddingStoreWriter",
    "DataFormatError",
    "MissingEmbeddingsError",
    "precompute_image_embeddings",
    "list_images",
    "load_encoder",
    "BlipImageEncoder",
    "RetrievalSet",
    "read_retrieval_jsonl",
    "DrawnText",
    "draw_texts",
    "check_samples_have_views",
    "SyntheticWorld",
    "SyntheticWorldConfig",
]
