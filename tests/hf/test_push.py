"""`vlr push`: an exported folder reaches a Hub byte for byte, privately, under a commit naming the recipe.

The Hub is a fake on 127.0.0.1 (hub_server.py) speaking the endpoints huggingface_hub calls for
create_repo + upload_folder over LFS; Xet is switched off because the fake has no Xet storage.
"""

from __future__ import annotations

import json
import logging
import random
import re
import socket
import traceback
from collections import Counter

import pytest

pytest.importorskip("huggingface_hub")
import httpx2
from hub_server import FakeHub
from huggingface_hub import constants, set_client_factory
from huggingface_hub.utils import _detect_agent, _http

from vlr_plugins import __version__
from vlr_plugins.hf.push import PushError, push_folder

pytestmark = [
    pytest.mark.timeout(30),
    # huggingface_hub's LFS PUT passes a file as data=, which httpx2 deprecates: not ours to fix
    pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning"),
]

TOKEN = "hf_FakeTokenThatMustNeverLeak0123456789"
LFS_THRESHOLD = 64 * 1024


def _export(root, *, recipe="paragraph/c5", extra=None):
    """A folder shaped like the exporter's: config, safetensors (LFS), tokenizer (one big: LFS), card."""
    rng = random.Random(0)
    folder = root / "export"
    files = {
        "config.json": json.dumps({"model_type": "vlr_blip_text", "recipe": recipe, "embed_dim": 32}).encode(),
        "model.safetensors": rng.randbytes(300_000),
        "tokenizer.json": json.dumps({"vocab": {f"tok{i}": i for i in range(8000)}}).encode(),
        "tokenizer_config.json": b'{"model_max_length": 512}',
        "vocab.txt": "\n".join(f"tok{i}" for i in range(100)).encode(),
        "README.md": b"---\nlicense: apache-2.0\ntags: [vlr-plugins]\n---\n# A text encoder\n",
        "pooling/config.json": b'{"mode": "cls"}',
        **(extra or {}),
    }
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder, files


@pytest.fixture
def hub(request, monkeypatch, tmp_path):
    """A fake Hub that accepts TOKEN, with huggingface_hub online, Xet off, and nowhere else to reach."""
    server = FakeHub(token=TOKEN, lfs_threshold=LFS_THRESHOLD)
    request.addfinalizer(server.close)
    endpoint = server.start()
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # read once, when huggingface_hub is imported
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    # requests that ignore endpoint= (the agent-harness registry) would go to huggingface.co: keep them here
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(_detect_agent, "_registry", {"standardEnvVars": [], "harnesses": {}})
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token-here"))
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(var, raising=False)
    # huggingface_hub's client has no timeout and trusts proxy variables: bound it and keep it local
    set_client_factory(lambda: httpx2.Client(event_hooks={"request": [_http.hf_request_event_hook]},
                                             follow_redirects=True, timeout=10, trust_env=False))
    request.addfinalizer(lambda: set_client_factory(_http.default_client_factory))
    return server


def test_push_sends_every_file_byte_identical_in_one_private_commit_naming_the_recipe(hub, tmp_path):
    folder, files = _export(tmp_path)
    url = push_folder(folder, "me/blip-c5", token=TOKEN, endpoint=hub.endpoint)

    repo = hub.repos["me/blip-c5"]
    assert repo.private
    assert repo.branches["main"] == files
    (commit,) = repo.commits
    assert commit["summary"] == f"Upload paragraph/c5 text encoder (vlr-plugins {__version__})"
    # safetensors by pattern, tokenizer.json by size: both went through LFS upload + verify
    assert sorted(commit["lfs"]) == ["model.safetensors", "tokenizer.json"]
    assert url == f"{hub.endpoint}/me/blip-c5/commit/{url.rsplit('/', 1)[-1]}"
    routes = hub.routes()
    assert routes[0] == "create" and routes[-1] == "commit"
    # the card is validated twice: when upload_folder lists the folder, and again in create_commit
    assert Counter(routes) == {"create": 1, "validate-yaml": 2, "preupload": 1, "lfs-batch": 1,
                               "lfs-upload": 2, "lfs-verify": 2, "commit": 1}
    assert hub.unexpected == []
    # the token travels to the Hub; the storage PUTs carry none (presigned URLs on the real Hub)
    for seen in hub.requests:
        assert seen.authorization == (None if seen.route == "lfs-upload" else f"Bearer {TOKEN}"), seen


def test_a_real_export_arrives_byte_identical(hub, tmp_path, tiny_encoder):
    from vlr_plugins.hf import export_text_encoder

    folder = export_text_encoder(tiny_encoder, tmp_path / "blip-c5", recipe="paragraph/c5")
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    push_folder(folder, "me/blip-c5", token=TOKEN, endpoint=hub.endpoint)

    repo = hub.repos["me/blip-c5"]
    assert repo.branches["main"] == files
    assert "model.safetensors" in repo.commits[0]["lfs"]
    assert repo.commits[0]["summary"] == f"Upload paragraph/c5 text encoder (vlr-plugins {__version__})"


def test_public_when_asked_with_the_callers_message(hub, tmp_path):
    folder, _ = _export(tmp_path)
    push_folder(folder, "me/open", private=False, commit_message="first release", token=TOKEN,
                endpoint=hub.endpoint)
    assert hub.repos["me/open"].private is False
    assert hub.repos["me/open"].commits[0]["summary"] == "first release"


def test_second_push_reuses_the_repo_and_uploads_no_known_lfs_object(hub, tmp_path):
    folder, files = _export(tmp_path, recipe=None)
    push_folder(folder, "me/again", token=TOKEN, endpoint=hub.endpoint)
    (folder / "vocab.txt").write_bytes(b"changed")
    before = len(hub.requests)
    push_folder(folder, "me/again", token=TOKEN, endpoint=hub.endpoint)

    repo = hub.repos["me/again"]
    assert repo.branches["main"] == {**files, "vocab.txt": b"changed"}
    assert [c["summary"] for c in repo.commits] == [f"Upload text encoder (vlr-plugins {__version__})"] * 2
    assert "lfs-upload" not in [s.route for s in hub.requests[before:]]
    assert hub.requests[before].route == "create" and hub.requests[before].status == 409  # exist_ok


def test_create_pr_opens_a_pull_request_and_leaves_main_alone(hub, tmp_path):
    folder, files = _export(tmp_path)
    push_folder(folder, "me/pr", token=TOKEN, endpoint=hub.endpoint)
    (folder / "vocab.txt").write_bytes(b"proposed")
    url = push_folder(folder, "me/pr", token=TOKEN, endpoint=hub.endpoint, create_pr=True)

    repo = hub.repos["me/pr"]
    assert url == f"{hub.endpoint}/me/pr/discussions/1"
    assert repo.branches["main"] == files
    assert repo.branches["refs/pr/1"]["vocab.txt"] == b"proposed"


def test_with_xet_on_regular_files_take_the_same_endpoints(hub, tmp_path, monkeypatch):
    """huggingface_hub's default path when hf_xet is installed (a pipelined upload) for a folder the Hub
    stores as plain git blobs; the Xet storage that LFS-sized files would use then is not faked."""
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", False)
    hub.lfs_patterns, hub.lfs_threshold = (), 2**30
    folder, files = _export(tmp_path)
    push_folder(folder, "me/xet", token=TOKEN, endpoint=hub.endpoint)
    assert hub.repos["me/xet"].branches["main"] == files
    assert hub.routes() == ["create", "validate-yaml", "preupload", "commit"]


def test_token_comes_from_HF_TOKEN_when_not_given(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    folder, files = _export(tmp_path)
    push_folder(folder, "me/env", endpoint=hub.endpoint)
    assert hub.repos["me/env"].branches["main"] == files
    assert {s.authorization for s in hub.requests if s.route != "lfs-upload"} == {f"Bearer {TOKEN}"}


def test_cli_push_prints_the_url_and_never_the_token(hub, tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    caplog.set_level(logging.DEBUG)  # huggingface_hub's and ours, down to its request log
    folder, _ = _export(tmp_path)
    from vlr_plugins.cli import build_parser

    args = build_parser().parse_args(["push", str(folder), "me/cli", "--public", "--endpoint", hub.endpoint,
                              "-m", "from the CLI"])

    assert args.fn(args) == 0
    out, err = capsys.readouterr()
    assert out.strip().startswith(f"{hub.endpoint}/me/cli/commit/")
    assert hub.repos["me/cli"].private is False and hub.repos["me/cli"].commits[0]["summary"] == "from the CLI"
    assert "me/cli" in caplog.text  # the log was captured, and it is clean
    for text in (out, err, caplog.text):
        assert TOKEN not in text


def test_a_server_echoing_the_token_does_not_leak_it_through_the_error(hub, tmp_path, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    hub.fail(403, on="create", message="token lacks write access", echo_authorization=True)
    folder, _ = _export(tmp_path)
    with pytest.raises(PushError) as info:
        push_folder(folder, "me/echo", token=TOKEN, endpoint=hub.endpoint)

    assert TOKEN in json.dumps([s.authorization for s in hub.requests])  # it was sent, and echoed
    err = info.value
    assert "token lacks write access" in str(err) and "***" in str(err)
    assert err.__cause__ is None and err.__context__ is None  # the Hub error (with its headers) is dropped
    shown = "".join(traceback.format_exception(err))
    out, stderr = capsys.readouterr()
    # httpcore2's DEBUG trace prints the response headers as the server sent them, echo included;
    # everything else, ours and huggingface_hub's, stays clean
    logged = "\n".join(r.getMessage() for r in caplog.records if not r.name.startswith("httpcore2"))
    for text in (shown, repr(vars(err)), out, stderr, logged):
        assert TOKEN not in text


@pytest.mark.parametrize("case", ["wrong-token", "no-token", "403", "404", "revision", "503", "500-commit"])
def test_hub_errors_become_clear_push_errors(hub, tmp_path, case):
    folder, _ = _export(tmp_path)
    kwargs = {"token": TOKEN, "endpoint": hub.endpoint}
    if case == "wrong-token":
        kwargs["token"] = "hf_wrong"
    elif case == "no-token":
        kwargs["token"] = None
    elif case == "403":
        hub.fail(403, on="commit", message="you may not write to me/x")
    elif case == "404":
        hub.fail(404, on="preupload", message="Repository not found", code="RepoNotFound")
    elif case == "revision":
        kwargs["revision"] = "no-such-branch"
    elif case == "503":
        hub.fail(503, on="create", message="maintenance")
    elif case == "500-commit":
        hub.fail(500, on="commit", message="boom")

    with pytest.raises(PushError) as info:
        push_folder(folder, "me/x", **kwargs)

    message, ep = str(info.value), hub.endpoint
    expected = {
        "wrong-token": f"authentication failed for {ep}: log in with `hf auth login` or set HF_TOKEN",
        "no-token": f"authentication failed for {ep}: log in with `hf auth login` or set HF_TOKEN",
        "403": f"authentication failed for {ep}: log in with `hf auth login` or set HF_TOKEN, with a token "
               "that may write to me/x",
        "404": f"repository me/x not found on {ep}",
        "revision": f"revision 'no-such-branch' not found in me/x on {ep}",
        "503": f"the Hub at {ep} answered 503; try again later",
        "500-commit": f"the Hub at {ep} answered 500; try again later",
    }[case]
    assert message.startswith(expected), message
    statuses = {"wrong-token": 401, "no-token": 401, "403": 403, "404": 404, "revision": 404, "503": 503,
                "500-commit": 500}
    assert info.value.status == statuses[case]
    assert TOKEN not in message
    # answered once, not retried: create_repo's 401/403 fallback asks repo-info, nothing more
    assert sum(s.status >= 400 for s in hub.requests) <= 2, hub.requests


@pytest.mark.parametrize("extra, missing, expected", [
    ({"pytorch_model.bin": b"\x80\x02pickle"}, None, "pickle-based weights (pytorch_model.bin)"),
    ({"sub/optimizer.pt": b"x", "extra.pkl": b"y"}, None, "(extra.pkl, sub/optimizer.pt)"),
    (None, "config.json", "has no config.json"),
    (None, "model.safetensors", "has no *.safetensors weights"),
])
def test_a_folder_that_is_not_a_clean_export_is_refused_before_any_request(hub, tmp_path, extra, missing,
                                                                            expected):
    folder, _ = _export(tmp_path, extra=extra)
    if missing:
        (folder / missing).unlink()
    with pytest.raises(PushError, match="expected|safetensors") as info:
        push_folder(folder, "me/x", token=TOKEN, endpoint=hub.endpoint)
    assert expected in str(info.value) and str(folder) in str(info.value)
    assert hub.requests == [] and hub.repos == {}


@pytest.mark.parametrize("repo_id", ["my model!", "blip-c5", "me/models/blip-c5", "me/-blip"])
def test_a_malformed_repo_id_is_refused_before_any_request(hub, tmp_path, repo_id):
    folder, _ = _export(tmp_path)
    with pytest.raises(PushError, match=re.escape(f"not a valid Hub repository id {repo_id!r}: expected namespace/name")):
        push_folder(folder, repo_id, token=TOKEN, endpoint=hub.endpoint)
    assert hub.requests == [] and hub.repos == {}


def test_offline_mode_is_refused_before_any_request(hub, tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    folder, _ = _export(tmp_path)
    with pytest.raises(PushError, match="HF_HUB_OFFLINE is set"):
        push_folder(folder, "me/x", token=TOKEN, endpoint=hub.endpoint)
    assert hub.requests == []


def test_an_unreachable_hub_is_named(hub, tmp_path):
    with socket.socket() as s:  # a port nobody listens on once this closes
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    folder, _ = _export(tmp_path)
    with pytest.raises(PushError, match=rf"could not reach the Hub at http://127\.0\.0\.1:{port}"):
        push_folder(folder, "me/x", token=TOKEN, endpoint=f"http://127.0.0.1:{port}")


def test_cli_refusal_exits_2_with_one_error_line(tmp_path, capsys):
    from vlr_plugins.cli import main

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")
    assert main(["push", str(tmp_path), "me/refused"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "pytorch_model.bin" in err[0]


def test_an_mllm_embedder_export_arrives_byte_identical(hub, tmp_path):
    pytest.importorskip("torchvision")  # Qwen2-VL's video processor
    from _tiny_mllm import tiny_qwen2vl

    from vlr_plugins.hf import export_eol_embedder
    from vlr_plugins.mllm import EOLEmbedder

    model, processor = tiny_qwen2vl(seed=2)
    folder = export_eol_embedder(EOLEmbedder(model=model, processor=processor), tmp_path / "care-tiny",
                                 recipe="care/stage2_paper")
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    push_folder(folder, "me/care-tiny", token=TOKEN, endpoint=hub.endpoint)
    repo = hub.repos["me/care-tiny"]
    assert repo.branches["main"] == files and "modeling_vlr_eol.py" in files
    assert repo.commits[0]["summary"] == f"Upload care/stage2_paper MLLM embedder (vlr-plugins {__version__})"


def test_an_open_clip_export_arrives_byte_identical(hub, tmp_path):
    open_clip = pytest.importorskip("open_clip")
    import torch

    from vlr_plugins.cli import main

    from _tiny_towers import TINY_OPEN_CLIP

    (tmp_path / "vlr-push-tiny.json").write_text(json.dumps(TINY_OPEN_CLIP))
    open_clip.add_model_config(tmp_path / "vlr-push-tiny.json")
    torch.save({"state_dict": open_clip.create_model("vlr-push-tiny").state_dict()}, tmp_path / "epoch_1.pt")
    folder = tmp_path / "tiny-clip"
    assert main(["export", f"open_clip:vlr-push-tiny-ctx248:{tmp_path / 'epoch_1.pt'}", str(folder)]) == 0
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert set(files) == {"README.md", "open_clip_config.json", "open_clip_model.safetensors",  # + ST's
                          "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
                          "open_clip_sentence_transformers.py"}

    push_folder(folder, "me/tiny-clip", token=TOKEN, endpoint=hub.endpoint)
    repo = hub.repos["me/tiny-clip"]
    assert repo.branches["main"] == files and repo.commits[0]["lfs"] == ["open_clip_model.safetensors"]
    assert repo.commits[0]["summary"] == f"Upload open_clip model (vlr-plugins {__version__})"


@pytest.mark.parametrize("files, expected", [
    ({"open_clip_config.json": b'{"model_cfg": {}}', "model.safetensors": b"w"}, "no open_clip_model.safetensors"),
    ({"open_clip_config.json": b'{"preprocess_cfg": {}}', "open_clip_model.safetensors": b"w"}, "no 'model_cfg'"),
    ({"open_clip_config.json": b'{"model_cfg": {}}', "open_clip_model.safetensors": b"w",
      "open_clip_pytorch_model.bin": b"\x80\x02"}, "pickle-based weights (open_clip_pytorch_model.bin)"),
])
def test_an_open_clip_folder_that_is_not_a_clean_export_is_refused_before_any_request(hub, tmp_path, files,
                                                                                      expected):
    folder = tmp_path / "tiny-clip"
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    with pytest.raises(PushError) as info:
        push_folder(folder, "me/x", token=TOKEN, endpoint=hub.endpoint)
    assert expected in str(info.value) and str(folder) in str(info.value)
    assert hub.requests == [] and hub.repos == {}
