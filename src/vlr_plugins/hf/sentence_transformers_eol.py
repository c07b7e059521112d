"""sentence-transformers files for an exported MLLM embedder: its EOL prompt as a chat template, last-token pooling.

sentence-transformers (6.x) loads a chat MLLM through its ``Transformer`` module: every input
(a string, an image, a video) becomes one user message, the processor's
``apply_chat_template`` renders it, and a ``Pooling(pooling_mode="lasttoken")`` module reads
the state at each row's last real token. That is the EOL embedding once the rendered text
is the EOL prompt. Its hook for that is ``processing_kwargs["chat_template"]``, whose
entries go to ``apply_chat_template``: the export passes a ``chat_template`` written for it,
holding the EOL prompts as the model's own chat template renders them (the part before and
after ``<sent>`` for texts; the whole prompt for an image or a video, whose placeholders
the processor then expands). So ``SentenceTransformer(folder, trust_remote_code=True)
.encode(texts)`` equals ``EOLEmbedder.encode_text``.

What it cannot do: repeat frames (CaRe shows each frame twice; pass clips with each frame
already repeated), sample frames from a file the way ``VideoInput`` does, or cut a sentence
to ``max_text_tokens`` before it fills the prompt (exports for evaluation have none).
Loading needs sentence-transformers >= 6 (``config_sentence_transformers.json`` says so).
"""

from __future__ import annotations

import json
from typing import Any

from vlr_plugins._sentence_transformers import json_files, model_config

__all__ = ["eol_chat_template", "sentence_transformers_files"]

_PROMPT_SENTINEL = "<sent>"


def _literal(text: str) -> str:
    """``text`` as a Jinja string literal (JSON's escapes are Jinja's)."""
    return json.dumps(text, ensure_ascii=True)


def eol_chat_template(embedder: Any) -> str:
    """A Jinja chat template that renders one user message as ``embedder``'s EOL prompt.

    A string (or text parts) fills the text prompt's ``<sent>``; a message with an image
    or video part becomes that modality's prompt, with the model's own placeholders. The
    system prompts sentence-transformers may add are not rendered: the EOL prompt is the
    whole input.
    """
    prompt = embedder.prompt
    chat = embedder._chat
    text = prompt.render_texts([_PROMPT_SENTINEL], chat=chat)[0] if prompt.text is not None else None
    media = {m: embedder.prompts(m, count=1)[0] for m in ("image", "video")
             if getattr(prompt, m) is not None and embedder.kind == "mllm"}
    lines = ["{%- set content = messages[-1]['content'] -%}"]
    if text is not None:
        if text.count(_PROMPT_SENTINEL) != 1:
            raise ValueError(f"EOL prompt {prompt.name!r}: the rendered text prompt holds {_PROMPT_SENTINEL} "
                             f"{text.count(_PROMPT_SENTINEL)} times, expected once")
        before, after = text.split(_PROMPT_SENTINEL)
        lines += [f"{{%- set before = {_literal(before)} -%}}", f"{{%- set after = {_literal(after)} -%}}"]
    lines.append("{%- if content is string -%}")
    lines.append("{{ before }}{{ content }}{{ after }}" if text is not None else
                 "{{ raise_exception('this model has no text EOL prompt') }}")
    lines.append("{%- else -%}{%- set kinds = content | map(attribute='type') | list -%}")
    branch = "if"
    for modality, rendered in media.items():
        lines.append(f"{{%- {branch} '{modality}' in kinds -%}}{{{{ {_literal(rendered)} }}}}")
        branch = "elif"
    body = ("{{ before }}{% for part in content %}{{ part['text'] }}{% endfor %}{{ after }}" if text is not None
            else "{{ raise_exception('this model has no text EOL prompt') }}")
    lines.append(f"{{%- else -%}}{body}{{%- endif -%}}" if media else body)
    lines.append("{%- endif -%}")
    return "\n".join(lines)


def sentence_transformers_files(embedder: Any) -> dict[str, str]:
    """``{relative path: JSON text}``: the files that make an export folder a sentence-transformers
    model: ``modules.json`` (Transformer at the root, then ``1_Pooling`` lasttoken, ``2_Normalize``),
    ``sentence_bert_config.json``, ``1_Pooling/config.json``, ``config_sentence_transformers.json``."""
    forward = {"method": "forward", "method_output_name": "last_hidden_state"}
    modalities = ["text"] + (["image", "video"] if embedder.kind == "mllm" else [])
    modality_config: dict[str, Any] = {m: dict(forward) for m in modalities}
    modality_config["message"] = {**forward, "format": "structured"}
    transformer = {
        "transformer_task": "feature-extraction",
        "modality_config": modality_config,
        "module_output_name": "token_embeddings",
        "processing_kwargs": {"chat_template": {"chat_template": eol_chat_template(embedder),
                                                "add_generation_prompt": True}},
    }
    if embedder.kind == "mllm":
        # the clip's pixel limits, and its frames taken as given (as EOLEmbedder passes them)
        video = embedder._size_kwargs("video")
        if video:
            transformer["processing_kwargs"]["video"] = video
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.sentence_transformer.modules.pooling.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.base.modules.normalize.Normalize"},
    ]
    pooling = {"embedding_dimension": embedder.embedding_dim, "pooling_mode": "lasttoken", "include_prompt": True}
    reason = "the EOL prompt reaches the model through processing_kwargs['chat_template'] (6.x)"
    return json_files({"modules.json": modules, "sentence_bert_config.json": transformer,
                       "1_Pooling/config.json": pooling, "config_sentence_transformers.json": model_config(reason)})
