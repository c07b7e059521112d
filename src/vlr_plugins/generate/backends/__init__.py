"""Chat clients, one per kind of endpoint; each takes :class:`~vlr_plugins.generate.ChatSettings`
and returns :class:`~vlr_plugins.generate.ChatResult` in the order asked."""

from vlr_plugins.generate.backends.openai_chat import OpenAIChatClient

__all__ = ["OpenAIChatClient"]
