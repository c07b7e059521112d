"""OpenAIChatClient against a loopback OpenAI-compatible server: requests, order,
concurrency, retries, the cache, re-asked malformed answers, and the key kept secret."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

pytest.importorskip("openai")

from _fake_openai import FakeOpenAI, answer, drop, error, in_order, raw

from vlr_plugins.errors import ConfigError
from vlr_plugins.chat import (
    ChatCache,
    ChatRequest,
    ChatSettings,
    EndpointError,
    OpenAIChatClient,
    parse_json_answer,
)
from vlr_plugins.chat.json_answer import REASK_PROMPT

KEY = "sk-test-0123456789abcdef-secret"
FAST = {"backoff": 0.01, "max_backoff": 0.05}


def client_for(server, tmp_path=None, **overrides):
    settings = ChatSettings(**{"model": "judge-1", "base_url": server.url, **FAST, **overrides})
    cache = None if tmp_path is None else tmp_path / "cache.sqlite"
    return OpenAIChatClient(settings, api_key=KEY, cache=cache, progress=False)


def user(text):
    return [{"role": "user", "content": text}]


def test_sends_model_messages_sampling_and_the_key_as_bearer():
    with FakeOpenAI(in_order("pong")) as server, client_for(server) as client:
        result = client.complete(user("ping"))
    assert result.ok and result.text == "pong" and result.value is None
    [request] = server.requests
    assert request["body"] == {"model": "judge-1", "messages": user("ping"), "temperature": 0.0}
    assert request["headers"]["authorization"] == f"Bearer {KEY}"
    assert client.summary.as_dict() == {
        "requests": 1, "calls": 1, "cache_hits": 0, "retries": 0, "malformed": 0, "reasks": 0,
        "failures": 0, "prompt_tokens": 10, "completion_tokens": 5}


def test_results_come_back_in_input_order_within_the_concurrency_limit():
    # later prompts are answered sooner, so completion order is the reverse of input order
    def script(body):
        i = int(body["messages"][0]["content"])
        return answer(f"answer {i}", delay=0.02 * (8 - i))

    with FakeOpenAI(script) as server, client_for(server, concurrency=3) as client:
        results = client.complete_many([user(str(i)) for i in range(8)])
    assert [r.text for r in results] == [f"answer {i}" for i in range(8)]
    assert server.max_in_flight <= 3
    assert server.max_in_flight >= 2  # the pool did run requests side by side


def test_sampling_params_are_sent_and_reserved_names_refused():
    with FakeOpenAI(in_order("ok")) as server:
        with client_for(server, sampling={"temperature": 0.7, "max_tokens": 64, "seed": 1}) as client:
            client.complete(user("x"))
    assert server.requests[0]["body"] == {"model": "judge-1", "messages": user("x"),
                                          "temperature": 0.7, "max_tokens": 64, "seed": 1}
    with pytest.raises(ConfigError, match="model cannot be a sampling parameter"):
        ChatSettings(model="m", sampling={"model": "other"})


def test_server_specific_sampling_params_sit_beside_the_others_in_the_body():
    # vLLM's top_k, and an explicit extra_body, are sent as create(extra_body=...) would send them
    sampling = {"temperature": 0.0, "top_k": 20, "extra_body": {"min_p": 0.05, "chat_template_kwargs": {"a": 1}}}
    with FakeOpenAI(in_order("ok")) as server, client_for(server, sampling=sampling) as client:
        assert client.complete(user("x")).text == "ok"
    assert server.requests[0]["body"] == {"model": "judge-1", "messages": user("x"), "temperature": 0.0,
                                          "top_k": 20, "min_p": 0.05, "chat_template_kwargs": {"a": 1}}


def test_single_requests_from_many_threads_share_the_concurrency_limit():
    # the pipelines' records each ask complete_many for one request at a time, from their own threads
    def script(body):
        return answer(f"answer {body['messages'][0]['content']}", delay=0.05)

    with FakeOpenAI(script) as server, client_for(server, concurrency=2) as client:
        results = [None] * 6

        def ask(i):
            results[i] = client.complete_many([user(str(i))])

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert [r[0].text for r in results] == [f"answer {i}" for i in range(6)]
    assert 2 == server.max_in_flight  # side by side, never more than the limit
    assert client.summary.calls == 6


@pytest.mark.parametrize("failure", [error(500), error(503), drop(), error(429)], ids=["500", "503", "drop", "429"])
def test_transient_failures_are_retried(failure):
    with FakeOpenAI(in_order(failure, failure, "fine")) as server, client_for(server) as client:
        result = client.complete(user("x"))
    assert result.ok and result.text == "fine"
    assert len(server.requests) == 3
    s = client.summary
    assert (s.calls, s.retries, s.failures) == (3, 2, 0)


def test_retry_after_is_respected():
    with FakeOpenAI(in_order(error(429, headers={"Retry-After": "1"}), "late")) as server:
        with client_for(server) as client:
            start = time.monotonic()
            result = client.complete(user("x"))
            waited = time.monotonic() - start
    assert result.text == "late"
    assert waited >= 1.0  # the jittered backoff alone would be <= 0.01 s
    assert client.summary.retries == 1


def test_a_timeout_is_retried():
    with FakeOpenAI(in_order(answer("too slow", delay=1.0), "quick")) as server:
        with client_for(server, timeout=0.3) as client:
            result = client.complete(user("x"))
    assert result.text == "quick"
    assert (client.summary.calls, client.summary.retries) == (2, 1)


def test_exhausted_retries_give_a_counted_failure_not_an_answer():
    with FakeOpenAI(in_order(error(500, "overloaded"))) as server, client_for(server, max_retries=2) as client:
        results = client.complete_many([user("a"), user("b")])
    assert all(not r.ok and r.text is None for r in results)
    assert results[0].error == "HTTP 500: overloaded (after 3 calls)"
    s = client.summary
    assert (s.requests, s.calls, s.retries, s.failures) == (2, 6, 4, 2)


def test_a_bad_request_is_not_retried():
    with FakeOpenAI(in_order(error(400, "context too long"), "never")) as server, client_for(server) as client:
        result = client.complete(user("x"))
    assert result.error == "HTTP 400: context too long (not retried)"
    assert len(server.requests) == 1


@pytest.mark.parametrize("body, content_type, what, shown", [
    ('{"id": "chatcmpl-1", "choi', "application/json", "not JSON (Unterminated string", '{"id": "chatcmpl-1"'),
    ("<html><body>502 Bad\n Gateway</body></html>", "text/html", "not JSON", "<html><body>502 Bad Gateway"),
    ('{"detail": "Not Found"}', "application/json", "JSON without choices", "Not Found"),
], ids=["cut-json", "html-page", "json-not-a-completion"])
def test_an_answer_that_is_not_a_chat_completion_fails_that_request_by_name(body, content_type, what, shown):
    """A proxy's page, a cut body, another API's JSON: a counted failure naming the body and the
    URL, not retried and never a traceback (json.JSONDecodeError used to escape complete_many)."""
    with FakeOpenAI(in_order(raw(body, content_type=content_type))) as server, \
            client_for(server, max_retries=3) as client:
        results = client.complete_many([user("a"), user("b")])
    assert [r.ok for r in results] == [False, False] and results[0].text is None
    error_text = results[0].error
    assert error_text.startswith(f"the endpoint's answer is not a chat completion: {what}")
    assert shown in error_text.split("starting ", 1)[1] and server.url in error_text
    assert len(server.requests) == 2 and client.summary.failures == 2 and client.summary.retries == 0


def test_a_refused_key_stops_the_run_and_the_message_hides_the_key():
    with FakeOpenAI(in_order(error(401, f"invalid key {KEY}"))) as server, client_for(server) as client:
        with pytest.raises(EndpointError) as info:
            client.complete_many([user(str(i)) for i in range(20)])
    message = str(info.value)
    assert KEY not in message and "invalid key ***" in message
    assert server.url in message and "judge-1" in message and "$OPENAI_API_KEY" in message
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert len(server.requests) < 20  # the requests not yet started were cancelled


def test_the_key_never_appears_in_logs_errors_or_output(caplog, capsys):
    leaky = in_order(error(500, f"upstream saw Authorization: Bearer {KEY}"), error(429, f"slow down {KEY}"),
                     "not json", f"still not json {KEY}")
    caplog.set_level(logging.DEBUG)  # every logger, the openai package's and httpx's included
    with FakeOpenAI(leaky) as server:
        settings = ChatSettings(model="judge-1", base_url=server.url, max_retries=1, reasks=1, **FAST)
        with OpenAIChatClient(settings, api_key=KEY, progress=True) as client:
            failed = client.complete(ChatRequest(user("x"), parse=parse_json_answer))
            malformed = client.complete(ChatRequest(user("y"), parse=parse_json_answer))
            shown = repr(client) + str(client.summary) + repr(settings)
    out = capsys.readouterr()
    assert failed.error and malformed.error
    assert "***" in failed.error
    for text in (caplog.text, out.out, out.err, failed.error, malformed.error, shown,
                 json.dumps([r["body"] for r in server.requests])):
        assert KEY not in text


def test_a_missing_key_names_the_variable(monkeypatch):
    monkeypatch.delenv("JUDGE_KEY", raising=False)
    with pytest.raises(ConfigError, match=r"set the environment variable JUDGE_KEY"):
        OpenAIChatClient(ChatSettings(model="m", api_key_env="JUDGE_KEY"))
    monkeypatch.setenv("JUDGE_KEY", KEY)
    with FakeOpenAI(in_order("ok")) as server:
        with OpenAIChatClient(ChatSettings(model="m", base_url=server.url, api_key_env="JUDGE_KEY"),
                              progress=False) as client:
            assert client.complete(user("x")).text == "ok"
        assert server.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"


def test_a_malformed_answer_is_asked_again_with_the_problem_named():
    with FakeOpenAI(in_order("Sure! here it is", '```json\n{"events": ["a man walks"]}\n```')) as server:
        with client_for(server) as client:
            result = client.complete(ChatRequest(user("extract"), parse=parse_json_answer))
    assert result.ok and result.value == {"events": ["a man walks"]}
    first, second = server.bodies()
    assert first["messages"] == user("extract")
    problem = "not valid JSON (Expecting value at line 1, column 1)"
    assert second["messages"] == [*user("extract"), {"role": "assistant", "content": "Sure! here it is"},
                                  {"role": "user", "content": REASK_PROMPT.format(problem=problem)}]
    s = client.summary
    assert (s.requests, s.calls, s.malformed, s.reasks, s.failures) == (1, 2, 1, 1, 0)


def test_an_answer_that_stays_malformed_is_a_counted_failure():
    with FakeOpenAI(in_order("nope")) as server, client_for(server, reasks=2) as client:
        result = client.complete(ChatRequest(user("extract"), parse=parse_json_answer))
    assert not result.ok and result.value is None and result.text == "nope"
    assert result.error.startswith("malformed answer after 3 tries: not valid JSON")
    s = client.summary
    assert (s.calls, s.malformed, s.reasks, s.failures) == (3, 3, 2, 1)


def test_a_rerun_with_the_cache_makes_no_call(tmp_path):
    script = in_order("garbage", '{"ok": 1}', "second", "third")
    requests = [ChatRequest(user("a"), parse=parse_json_answer), user("b"), user("c")]
    with FakeOpenAI(script) as server:
        with client_for(server, tmp_path, concurrency=1) as client:
            first = client.complete_many(requests)
        calls_before = len(server.requests)
        with client_for(server, tmp_path) as again:
            second = again.complete_many(requests)
        assert len(server.requests) == calls_before == 4  # a, its re-ask, b, c
    assert [r.value for r in first] == [r.value for r in second] == [{"ok": 1}, None, None]
    assert [r.text for r in first] == [r.text for r in second]
    s = again.summary
    assert (s.requests, s.calls, s.cache_hits, s.malformed, s.reasks) == (3, 0, 4, 1, 1)
    with ChatCache(tmp_path / "cache.sqlite") as cache:
        assert len(cache) == 4


def test_other_sampling_params_are_another_cache_entry(tmp_path):
    with FakeOpenAI(in_order("cold", "warm")) as server:
        with client_for(server, tmp_path) as client:
            assert client.complete(user("x")).text == "cold"
        with client_for(server, tmp_path, sampling={"temperature": 1.0}) as client:
            assert client.complete(user("x")).text == "warm"
        assert len(server.requests) == 2


def test_failures_are_not_cached(tmp_path):
    with FakeOpenAI(in_order(error(500), "recovered")) as server:
        with client_for(server, tmp_path, max_retries=0) as client:
            assert not client.complete(user("x")).ok
        with client_for(server, tmp_path, max_retries=0) as client:
            assert client.complete(user("x")).text == "recovered"


_KILLED_RUN = textwrap.dedent("""
    import sys
    from vlr_plugins.chat import ChatSettings, OpenAIChatClient
    url, cache = sys.argv[1], sys.argv[2]
    settings = ChatSettings(model="judge-1", base_url=url, concurrency=1, timeout=60)
    with OpenAIChatClient(settings, api_key="k" * 8, cache=cache, progress=False) as client:
        client.complete_many([[{"role": "user", "content": str(i)}] for i in range(5)])
""")


def test_kill_9_loses_only_the_call_in_flight(tmp_path):
    hang = threading.Event()

    def script(body):
        i = int(body["messages"][0]["content"])
        if i == 2:
            hang.set()
            return answer("never sent", delay=30)
        return f"answer {i}"

    cache = tmp_path / "cache.sqlite"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with FakeOpenAI(script) as server:
        proc = subprocess.Popen([sys.executable, "-c", _KILLED_RUN, server.url, str(cache)], env=env)
        try:
            assert hang.wait(timeout=60), "the run never reached its third request"
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        server.script = lambda body: f"rerun {body['messages'][0]['content']}"
        with client_for(server, tmp_path, concurrency=1) as client:
            results = client.complete_many([user(str(i)) for i in range(5)])
    assert [r.text for r in results] == ["answer 0", "answer 1", "rerun 2", "rerun 3", "rerun 4"]
    assert (client.summary.cache_hits, client.summary.calls) == (2, 3)
