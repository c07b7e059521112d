"""Recipe files written by the recipe tests."""

from __future__ import annotations

import textwrap


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


BASE = textwrap.dedent("""
    name: mine
    text_views:
      positives:
        - {field: caption, max_tokens: 77}
    loss: {type: MultiPositiveInfoNCELoss}
    model: {type: BlipTextEncoder, pretrained: x}
""")
