"""What a chat client is asked and answers, whatever serves it: settings, requests, results."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from vlr_plugins.chat.retry import RetryPolicy
from vlr_plugins.errors import ConfigError, UserError

__all__ = ["ChatRequest", "ChatResult", "ChatSettings", "EndpointError"]

#: request fields a client sets itself; never sampling parameters
_RESERVED = frozenset({"model", "messages", "stream", "n"})


class EndpointError(UserError):
    """The endpoint refuses every request (bad key, unknown model, wrong URL): a run stops
    at the first such answer rather than failing each request. The message names the URL,
    the model and the key's environment variable, never the key."""


@dataclass(frozen=True)
class ChatSettings:
    """Where and how to ask: any OpenAI-compatible chat endpoint.

    ========================  ==================================================================
    ``model``                 the model name the endpoint serves (``deepseek-chat``,
                              ``Qwen/Qwen2.5-72B-Instruct`` under ``vllm serve`` ...)
    ``base_url``              e.g. ``http://127.0.0.1:8000/v1``; ``None``: ``OPENAI_BASE_URL``
                              or OpenAI's own
    ``api_key_env``           the environment variable holding the key (default
                              ``OPENAI_API_KEY``); the key itself is never a setting
    ``concurrency``           requests in flight at once
    ``timeout``               seconds for one call, then it counts as failed (and is retried)
    ``max_retries``           retries of one call after a 429, 5xx, timeout or dropped connection
    ``backoff`` /             first and largest wait between retries, seconds (exponential,
    ``max_backoff``           jittered; never shorter than the server's ``Retry-After``)
    ``reasks``                times a malformed answer (e.g. not the JSON asked for) is asked
                              again before the request counts as failed
    ``sampling``              sent with every request (``temperature``, ``max_tokens``,
                              ``seed``, ``response_format`` ...); part of the cache key
    ========================  ==================================================================

    Example::

        >>> ChatSettings(model="deepseek-chat", base_url="https://api.deepseek.com/v1",
        ...              concurrency=32).sampling
        {'temperature': 0.0}
    """

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 8
    timeout: float = 120.0
    max_retries: int = 6
    backoff: float = 1.0
    max_backoff: float = 60.0
    reasks: int = 3
    sampling: Mapping[str, Any] = field(default_factory=lambda: {"temperature": 0.0})

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model.strip():
            raise ConfigError(f"model: expected a model name, found {self.model!r}")
        if not self.api_key_env or not isinstance(self.api_key_env, str):
            raise ConfigError("api_key_env: expected an environment variable name, "
                              f"found {self.api_key_env!r}")
        for name, low in (("concurrency", 1), ("max_retries", 0), ("reasks", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"{name}: expected an integer >= {low}, found {value!r}")
        for name in ("timeout", "backoff", "max_backoff"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0 or (name == "timeout" and value == 0):
                raise ConfigError(f"{name}: expected a positive number of seconds, found {value!r}")
        reserved = sorted(_RESERVED & set(self.sampling))
        if reserved:
            raise ConfigError(f"sampling: {', '.join(reserved)} cannot be a sampling parameter "
                              "(the client sets it)")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str = "chat settings") -> ChatSettings:
        """Settings from a plain mapping (a YAML file's section); unknown keys are an error
        naming ``where`` and the keys that are known."""
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} "
                              f"(known: {', '.join(known)})")
        return cls(**dict(data))

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(max_retries=self.max_retries, base_delay=self.backoff,
                           max_delay=self.max_backoff)

    def describe(self) -> dict[str, Any]:
        """The settings as plain data for a report (the key's variable name, not the key)."""
        return {f.name: (dict(v) if isinstance(v := getattr(self, f.name), Mapping) else v)
                for f in fields(self)}


@dataclass(frozen=True)
class ChatRequest:
    """One request: the chat ``messages`` and, for an answer that must have a format,
    ``parse(text) -> value``, which raises :class:`~vlr_plugins.chat.json_answer.MalformedAnswer`
    (a ``ValueError``) when the answer is malformed, so that it is asked again.

    ``sampling`` (optional) is laid over the client's ``settings.sampling`` for this request
    alone (``{"max_tokens": 160, "seed": 12345}``); it is part of the cache key. A message's
    content may hold media parts (:mod:`vlr_plugins.chat.media`), which each backend
    turns into what its model takes.
    """

    messages: Sequence[Mapping[str, Any]]
    parse: Callable[[str], Any] | None = None
    sampling: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        reserved = sorted(_RESERVED & set(self.sampling or {}))
        if reserved:
            raise ConfigError(f"sampling: {', '.join(reserved)} cannot be a sampling parameter "
                              "(the client sets it)")


@dataclass(frozen=True)
class ChatResult:
    """The answer to one :class:`ChatRequest`.

    ``text``: the last answer's text (``None`` when no call succeeded); ``value``:
    ``parse(text)`` when the request had a parser and the answer passed it; ``error``:
    why there is no usable answer (``None`` when there is), e.g. ``"HTTP 500 after 7
    calls: ..."`` or ``"malformed answer after 4 tries: ..."``.
    """

    text: str | None = None
    value: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None
