"""One chat client for every OpenAI-compatible endpoint (OpenAI, DeepSeek, vLLM, SGLang,
llama.cpp's server ...), built on the ``openai`` package: concurrent, retried, cached."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from tqdm.auto import tqdm

from vlr_plugins.chat.cache import ChatCache, cache_key
from vlr_plugins.chat.json_answer import malformed_error, reask_messages
from vlr_plugins.chat.media import VIDEO_TRANSPORTS, media_of, to_openai_messages
from vlr_plugins.chat.request import ChatRequest, ChatResult, ChatSettings, EndpointError
from vlr_plugins.chat.retry import retry_after_seconds, retryable_status
from vlr_plugins.chat.summary import RunSummary
from vlr_plugins.errors import ConfigError

__all__ = ["OpenAIChatClient"]

log = logging.getLogger(__name__)

#: characters of a body that is not a chat completion shown in the failure
_SHOWN_BODY = 80
#: statuses that say every request will fail the same way: stop the run
_FATAL = {401: "the key was refused", 403: "the key may not use this model",
          404: "no such model or URL (an OpenAI-compatible base URL usually ends in /v1)"}


class _CallFailed(Exception):
    """A call failed for good (retries exhausted, or a status not worth retrying)."""


def _import_openai():
    try:
        import openai
    except ImportError as e:
        raise ImportError("the chat client needs the openai package: "
                          "pip install 'vlr-plugins[generate]'") from e
    return openai


class OpenAIChatClient:
    """Ask an OpenAI-compatible chat endpoint many things at once, and keep every answer.

    Expects :class:`~vlr_plugins.chat.ChatSettings` (URL, model, concurrency, retries,
    sampling) and reads the API key from ``api_key`` or the environment variable
    ``settings.api_key_env``. The key is never logged, printed, stored in the cache, or part
    of an error message (text an endpoint echoes back is scrubbed of it).

    - :meth:`complete_many` runs up to ``settings.concurrency`` requests at a time on a
      thread pool and returns their results in input order, with a tqdm progress bar;
    - a call that meets a 429, a 5xx, a timeout or a dropped connection is made again
      after an exponential, jittered backoff that honours ``Retry-After``, at most
      ``settings.max_retries`` times; 401/403/404 stop the run (:class:`EndpointError`);
    - with ``cache`` (a path or a :class:`ChatCache`), each answer is stored as it arrives,
      keyed by (model, messages, sampling params): a rerun makes no call it already made;
    - a request with ``parse`` whose answer does not parse is asked again, naming the
      problem, up to ``settings.reasks`` times; then it is a failed result, counted in
      :attr:`summary` (:class:`~vlr_plugins.chat.RunSummary`), never a silent value;
    - a request's own ``sampling`` is laid over ``settings.sampling`` (a per-record seed,
      a prompt's ``max_tokens``); media parts (:mod:`vlr_plugins.chat.media`) are sent
      as data URLs, videos as frames or as a ``file://`` URL (``video_transport``), and
      the cache key holds the file's path, not its pixels;
    - at most ``settings.concurrency`` calls are in flight at once, however many threads
      call :meth:`complete` / :meth:`complete_many` (the pipelines run records side by side).

    The same settings drive other backends later (batch generation); results and summary
    are the backend-independent types of :mod:`vlr_plugins.chat.request`.

    Example::

        >>> settings = ChatSettings(model="Qwen/Qwen2.5-7B-Instruct",
        ...                         base_url="http://127.0.0.1:8000/v1")  # vllm serve
        >>> with OpenAIChatClient(settings, cache="llm-cache.sqlite") as client:  # doctest: +SKIP
        ...     results = client.complete_many([[{"role": "user", "content": "Say hi."}]])
        ...     print(results[0].text, client.summary)
    """

    def __init__(self, settings: ChatSettings, *,
                 cache: ChatCache | str | os.PathLike[str] | None = None,
                 api_key: str | None = None, progress: bool = True,
                 video_transport: str = "frames") -> None:
        if video_transport not in VIDEO_TRANSPORTS:
            raise ConfigError(f"video_transport: expected one of {', '.join(VIDEO_TRANSPORTS)}, "
                              f"found {video_transport!r}")
        openai = _import_openai()
        key = api_key if api_key is not None else os.environ.get(settings.api_key_env)
        if not key:
            raise ConfigError(f"no API key: set the environment variable {settings.api_key_env} "
                              "(or choose another variable in the settings); a local server "
                              "without authentication takes any value, e.g. EMPTY")
        self.settings = settings
        self.summary = RunSummary()
        self.progress = progress
        self.video_transport = video_transport
        self._slots = threading.BoundedSemaphore(settings.concurrency)
        self._secret = key
        self._openai = openai
        self._policy = settings.retry_policy()
        self._owns_cache = cache is not None and not isinstance(cache, ChatCache)
        self.cache = ChatCache(cache) if self._owns_cache else cache
        self._client = openai.OpenAI(api_key=key, base_url=settings.base_url,
                                     timeout=settings.timeout, max_retries=0)
        from openai.types.chat import ChatCompletion

        self._completion = ChatCompletion

    #: requests are answered one by one, side by side (not gathered into batches)
    batched = False

    # --- public -----------------------------------------------------------------------

    @property
    def concurrency(self) -> int:
        """Calls in flight at once (``settings.concurrency``)."""
        return self.settings.concurrency

    def describe(self) -> dict[str, Any]:
        """The backend as plain data for a manifest (no key)."""
        return {"backend": "openai", "model": self.settings.model, "base_url": self.settings.base_url,
                "video_transport": self.video_transport}

    def complete(self, request: ChatRequest | Sequence[Mapping[str, Any]]) -> ChatResult:
        """One request (a :class:`ChatRequest` or a list of messages), answered or failed."""
        return self._run(_as_request(request))

    def complete_many(self, requests: Sequence[ChatRequest | Sequence[Mapping[str, Any]]],
                      *, desc: str = "chat") -> list[ChatResult]:
        """Every request, ``settings.concurrency`` at a time; results in input order.

        An :class:`EndpointError` (or an interrupt) cancels the requests not yet started
        and is raised; answers already received stay in the cache.
        """
        reqs = [_as_request(r) for r in requests]
        if len(reqs) == 1:  # a record's next call: answered in this thread, no pool started for it
            return [self._run(reqs[0])]
        results: list[ChatResult | None] = [None] * len(reqs)
        pool = ThreadPoolExecutor(max_workers=self.settings.concurrency, thread_name_prefix="vlr-chat")
        try:
            futures = {pool.submit(self._run, r): i for i, r in enumerate(reqs)}
            with tqdm(total=len(reqs), desc=desc, disable=not self.progress, leave=False) as bar:
                for future in as_completed(futures):
                    results[futures[future]] = future.result()
                    bar.update()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return results  # type: ignore[return-value]

    def close(self) -> None:
        self._client.close()
        if self._owns_cache and self.cache is not None:
            self.cache.close()

    def __enter__(self) -> OpenAIChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"OpenAIChatClient(model={self.settings.model!r}, base_url={self.settings.base_url!r}, "
                f"key from ${self.settings.api_key_env})")

    # --- one request ------------------------------------------------------------------

    def _run(self, request: ChatRequest) -> ChatResult:
        self.summary.add(requests=1)
        messages = [dict(m) for m in request.messages]
        sampling = {**self.settings.sampling, **(request.sampling or {})}
        for tries in range(1, self.settings.reasks + 2):
            try:
                text = self._answer(messages, sampling)
            except _CallFailed as e:
                self.summary.add(failures=1)
                log.warning("request failed: %s", e)
                return ChatResult(error=str(e))
            if request.parse is None:
                return ChatResult(text=text)
            try:
                return ChatResult(text=text, value=request.parse(text))
            except ValueError as e:
                problem = self._scrub(str(e))
                self.summary.add(malformed=1)
            if tries > self.settings.reasks:
                self.summary.add(failures=1)
                log.warning("malformed answer after %d tries: %s", tries, problem)
                return ChatResult(text=text, error=malformed_error(tries, problem))
            self.summary.add(reasks=1)
            messages = reask_messages(messages, text, problem)
        raise AssertionError("unreachable")

    def _answer(self, messages: list[dict[str, Any]], sampling: dict[str, Any]) -> str:
        """The answer's text, from the cache or the endpoint (with retries)."""
        key = cache_key(self.settings.model, messages, sampling)
        if self.cache is not None:
            cached = self.cache.get(key)
            if cached is not None:
                self.summary.add(cache_hits=1)
                return cached
        wire = messages
        if media_of(messages):
            try:
                wire = to_openai_messages(messages, video_transport=self.video_transport)
            except (OSError, ValueError) as e:  # a missing or undecodable file fails this request only
                raise _CallFailed(f"cannot read the request's media: {e}") from None
        text = self._call_with_retries(wire, sampling)
        if self.cache is not None:
            request = {"model": self.settings.model, "messages": messages, "params": sampling}
            self.cache.put(key, request, text)
        return text

    def _call_with_retries(self, messages: list[dict[str, Any]], sampling: dict[str, Any]) -> str:
        openai = self._openai
        for attempt in range(self._policy.max_retries + 1):
            retry_after = None
            self.summary.add(calls=1)
            try:
                with self._slots:
                    # the body posted as it is: ``chat.completions.create`` would first walk it against
                    # the library's TypedDicts (a third of a call's CPU, for no change to a chat body)
                    response = self._client.post("/chat/completions", cast_to=self._completion,
                                                 body=_request_body(self.settings.model, messages, sampling))
            except openai.APIStatusError as e:
                status = e.status_code
                problem = f"HTTP {status}: {self._scrub(_status_message(e))}"
                if status in _FATAL:
                    raise EndpointError(
                        f"{self.settings.base_url or 'the default OpenAI URL'} refused model "
                        f"{self.settings.model!r}: {problem} ({_FATAL[status]}; the key is read "
                        f"from ${self.settings.api_key_env})") from None
                if not retryable_status(status):
                    raise _CallFailed(f"{problem} (not retried)") from None
                retry_after = retry_after_seconds(e.response.headers)
            except openai.APIConnectionError as e:
                kind = "timed out" if isinstance(e, openai.APITimeoutError) else "connection failed"
                problem = f"{kind}: {self._scrub(str(e))}"
            except json.JSONDecodeError as e:  # a 200 whose body is not JSON (a proxy's page, a cut body)
                raise _CallFailed(self._not_a_completion(f"not JSON ({e.msg}: line {e.lineno} column {e.colno})",
                                                         e.doc)) from None
            except openai.APIResponseValidationError as e:
                raise _CallFailed(self._not_a_completion("not the JSON of a chat completion",
                                                         getattr(e, "body", None))) from None
            else:
                return self._text_of(response)
            if attempt == self._policy.max_retries:
                raise _CallFailed(f"{problem} (after {attempt + 1} calls)")
            delay = self._policy.delay(attempt, retry_after)
            log.info("retrying in %.1fs (retry %d of %d): %s", delay, attempt + 1,
                     self._policy.max_retries, problem)
            self.summary.add(retries=1)
            time.sleep(delay)
        raise AssertionError("unreachable")

    def _text_of(self, response: Any) -> str:
        if isinstance(response, (str, bytes)):  # a body the library could not read as JSON, given as text
            raise _CallFailed(self._not_a_completion("not JSON", response))
        choices = getattr(response, "choices", None)
        if not choices:
            raise _CallFailed(self._not_a_completion("JSON without choices", _dumped(response)))
        message = getattr(choices[0], "message", None)
        if message is None:
            raise _CallFailed(self._not_a_completion("a choice without a message", _dumped(response)))
        usage = getattr(response, "usage", None)
        if usage is not None:
            self.summary.add(prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                             completion_tokens=getattr(usage, "completion_tokens", 0) or 0)
        return getattr(message, "content", None) or ""

    def _not_a_completion(self, what: str, body: Any) -> str:
        """Why an answer of status 200 is no chat completion, with the start of its body (not
        retried: a server that answers so answers every request so)."""
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else "" if body is None else str(body)
        text = " ".join(text.split())
        start = f"{text[:_SHOWN_BODY]}{'...' if len(text) > _SHOWN_BODY else ''}"
        where = self.settings.base_url or "the default OpenAI URL"
        return (f"the endpoint's answer is not a chat completion: {what}, starting {self._scrub(start)!r} "
                f"(not retried; is {where} the server's OpenAI-compatible URL, usually ending in /v1?)")

    def _scrub(self, text: str) -> str:
        """``text`` with the key replaced, for text an endpoint or a library echoed back."""
        return text.replace(self._secret, "***") if len(self._secret) >= 4 else text


def _request_body(model: str, messages: list[dict[str, Any]], sampling: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON body of one chat completion: ``model``, ``messages`` and ``sampling``, whose
    parameters the OpenAI API does not define (``top_k``, ``repetition_penalty`` ... which
    vLLM and SGLang servers take) sit beside the others, as ``create(extra_body=...)`` puts
    them; a sampling ``extra_body`` mapping is merged in the same way."""
    body = dict(sampling)
    extra = body.get("extra_body")
    if isinstance(extra, Mapping):
        del body["extra_body"]
        body.update(extra)
    return {"model": model, "messages": messages, **body}


def _dumped(response: Any) -> str:
    """A parsed answer as the JSON it came from, for a message."""
    dump = getattr(response, "model_dump_json", None)
    try:
        return dump(exclude_unset=True) if callable(dump) else str(response)
    except Exception:  # a model the library built half: show what it holds
        return str(response)


def _status_message(e: Exception) -> str:
    """The endpoint's own error message (``{"error": {"message": ...}}``), else the library's."""
    body = getattr(e, "body", None)
    if isinstance(body, Mapping) and isinstance(body.get("message"), str):
        return body["message"]
    return str(getattr(e, "message", e))


def _as_request(request: ChatRequest | Sequence[Mapping[str, Any]]) -> ChatRequest:
    return request if isinstance(request, ChatRequest) else ChatRequest(messages=request)
