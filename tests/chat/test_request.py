"""ChatSettings: defaults, checks that name the setting, a YAML section, a report without the key."""

from __future__ import annotations

import pytest
import yaml

from vlr_plugins.chat import ChatSettings, RetryPolicy
from vlr_plugins.errors import ConfigError


def test_defaults():
    s = ChatSettings(model="deepseek-chat")
    assert (s.base_url, s.api_key_env, s.concurrency, s.reasks, dict(s.sampling)) == (
        None, "OPENAI_API_KEY", 8, 3, {"temperature": 0.0})
    assert s.retry_policy() == RetryPolicy(max_retries=6, base_delay=1.0, max_delay=60.0)


@pytest.mark.parametrize("kwargs, message", [
    ({"model": " "}, "model: expected a model name, found ' '"),
    ({"model": "m", "concurrency": 0}, "concurrency: expected an integer >= 1, found 0"),
    ({"model": "m", "max_retries": 1.5}, "max_retries: expected an integer >= 0, found 1.5"),
    ({"model": "m", "timeout": 0}, "timeout: expected a positive number of seconds, found 0"),
    ({"model": "m", "api_key_env": ""}, "api_key_env: expected an environment variable name, found ''"),
    ({"model": "m", "sampling": {"stream": True, "messages": []}},
     "sampling: messages, stream cannot be a sampling parameter"),
])
def test_bad_settings_name_the_setting(kwargs, message):
    with pytest.raises(ConfigError) as info:
        ChatSettings(**kwargs)
    assert str(info.value).startswith(message)


def test_from_a_yaml_section():
    section = yaml.safe_load("""
judge:
  model: Qwen/Qwen2.5-72B-Instruct
  base_url: http://127.0.0.1:8000/v1
  concurrency: 64
  sampling: {temperature: 0.0, max_tokens: 1024}
""")["judge"]
    s = ChatSettings.from_mapping(section, where="capst.yaml: judge")
    assert s.concurrency == 64 and s.sampling == {"temperature": 0.0, "max_tokens": 1024}
    with pytest.raises(ConfigError, match=r"capst.yaml: judge: unknown key\(s\) api_key, url \(known: model, "):
        ChatSettings.from_mapping({"model": "m", "url": "x", "api_key": "sk-..."}, where="capst.yaml: judge")


def test_describe_is_plain_data_without_a_key():
    d = ChatSettings(model="m", api_key_env="JUDGE_KEY").describe()
    assert d["api_key_env"] == "JUDGE_KEY" and d["sampling"] == {"temperature": 0.0}
    assert "api_key" not in d
