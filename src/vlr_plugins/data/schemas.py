"""Training-sample schemas: which corpus a recipe reads (``data.schema``) and the text fields
its views may name.

* ``paragraph`` -- :class:`~vlr_plugins.data.ParagraphSample` (image id, caption, generated
  captions, hard negatives, paragraph), read by :func:`~vlr_plugins.data.read_paragraph_samples`;
* ``mvc`` -- :class:`~vlr_plugins.data.MVCSample` (a video with its caption views ``O``,
  ``S1``, ``S2``, ``D1``, ``D2``, ``D1*``, ``D2*``, ``P1``, ``P2``), read by
  :func:`~vlr_plugins.data.read_mvc_samples`.
"""

from __future__ import annotations

from vlr_plugins.data.mvc_samples import MVC_TEXT_FIELDS
from vlr_plugins.data.sample import TEXT_FIELDS

__all__ = ["SAMPLE_SCHEMAS", "FIELD_KINDS", "text_fields"]

#: schema name -> its text fields, each ``"one"`` text or ``"many"``
SAMPLE_SCHEMAS: dict[str, dict[str, str]] = {"paragraph": TEXT_FIELDS, "mvc": MVC_TEXT_FIELDS}
#: every schema's fields (their names do not overlap): ``"one"`` or ``"many"``
FIELD_KINDS: dict[str, str] = {f: kind for fields in SAMPLE_SCHEMAS.values() for f, kind in fields.items()}


def text_fields(schema: str) -> dict[str, str]:
    """The text fields of ``schema`` (a key of :data:`SAMPLE_SCHEMAS`)."""
    if schema not in SAMPLE_SCHEMAS:
        raise ValueError(f"unknown sample schema {schema!r}; known: {', '.join(SAMPLE_SCHEMAS)}")
    return SAMPLE_SCHEMAS[schema]
