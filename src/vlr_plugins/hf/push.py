"""Push an exported folder to the Hugging Face Hub: ``vlr push FOLDER REPO_ID``.

The folder is what the exporter wrote (``config.json`` + ``*.safetensors``, tokenizer files, model
card; or an open_clip folder, ``open_clip_config.json`` + ``open_clip_model.safetensors``). :func:`push_folder` checks that it looks like one and holds no pickle-based weights, creates
the repository (private unless asked otherwise; an existing repository keeps its visibility), and
uploads the folder in one commit whose message names the recipe.

The token is ``token=`` when given, else whatever huggingface_hub resolves (``HF_TOKEN``, then the
file ``hf auth login`` writes). It is never printed or logged, and a :class:`PushError` never
carries it: the Hub's own exception (whose request holds the ``Authorization`` header) is not
chained, and the server's message is quoted with the token masked.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from vlr_plugins.errors import UserError

__all__ = ["PushError", "push_folder"]

logger = logging.getLogger(__name__)

# pickle-based formats run code when loaded; an exported folder carries safetensors only
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
# upload_folder never sends these (huggingface_hub's DEFAULT_IGNORE_PATTERNS), so they are not checked
_SKIPPED_DIRS = (".git", ".cache")
_SERVER_DETAIL_CHARS = 300
# an open_clip Hub folder (`vlr export open_clip:MODEL:CHECKPOINT`, open_clip's push_to_hf_hub)
_OPEN_CLIP_CONFIG, _OPEN_CLIP_WEIGHTS = "open_clip_config.json", "open_clip_model.safetensors"


class PushError(UserError, RuntimeError):
    """A push that was refused, locally (the folder) or by the Hub (``status`` is the HTTP code)."""

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status


def _check_exported(folder: Path) -> dict[str, Any]:
    """Return the folder's ``config.json``; raise :class:`PushError` when it is not an export."""
    if not folder.is_dir():
        raise PushError(f"{folder} is not a folder; expected one written by the exporter")
    files = [p for p in folder.rglob("*")
             if p.is_file() and p.relative_to(folder).parts[0] not in _SKIPPED_DIRS]
    pickled = sorted(str(p.relative_to(folder)) for p in files if p.suffix.lower() in _PICKLE_SUFFIXES)
    if pickled:
        raise PushError(f"{folder} holds pickle-based weights ({', '.join(pickled)}); only safetensors are "
                        "pushed: re-export the model, or remove those files")
    config_path = folder / "config.json"
    open_clip_config = folder / _OPEN_CLIP_CONFIG
    if not config_path.is_file() and open_clip_config.is_file():  # an open_clip Hub folder
        config_path = open_clip_config
        if not (folder / _OPEN_CLIP_WEIGHTS).is_file():
            raise PushError(f"{folder} has {_OPEN_CLIP_CONFIG} but no {_OPEN_CLIP_WEIGHTS}; expected an open_clip "
                            "folder written by `vlr export open_clip:MODEL:CHECKPOINT`")
    elif not config_path.is_file():
        raise PushError(f"{folder} has no config.json; expected a folder written by the exporter")
    if not any(p.suffix == ".safetensors" for p in files):
        raise PushError(f"{folder} has no *.safetensors weights; expected a folder written by the exporter")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PushError(f"{config_path}: not readable JSON ({e})") from None
    if not isinstance(config, dict):
        raise PushError(f"{config_path}: expected a JSON object, found {type(config).__name__}")
    if config_path.name == _OPEN_CLIP_CONFIG and not isinstance(config.get("model_cfg"), dict):
        raise PushError(f"{config_path}: no 'model_cfg' object, which open_clip builds the model from")
    missing = _declared_but_missing(folder, config)
    if missing:
        raise PushError(f"{folder} is half an export: {'; '.join(missing)}; re-export it (vlr export ... --overwrite)")
    return config


def _declared_but_missing(folder: Path, config: dict[str, Any]) -> list[str]:
    """What the folder's own files say it holds and it lacks: the code ``auto_map`` names, the
    image processor of a bundled BLIP image side, the tokenizer of a vlr model, the root module's
    config of a sentence-transformers ``modules.json``."""
    missing = []
    auto_map = config.get("auto_map") if isinstance(config.get("auto_map"), dict) else {}
    for ref in auto_map.values():
        for one in ref if isinstance(ref, list) else [ref]:
            module = one.split("--")[-1].rsplit(".", 1)[0] if isinstance(one, str) else None
            if module and not (folder / f"{module}.py").is_file():
                missing.append(f"config.json's auto_map names {module}.py, which is not there")
    if (config.get("model_type") == "vlr_blip_text_encoder" and config.get("vision_config")
            and not (folder / "preprocessor_config.json").is_file()):
        missing.append("config.json has an image side (vision_config) but no preprocessor_config.json")
    if str(config.get("model_type", "")).startswith("vlr_") and not (folder / "tokenizer_config.json").is_file():
        missing.append("no tokenizer_config.json (the tokenizer the model reads)")
    modules_file = folder / "modules.json"
    if modules_file.is_file():
        try:
            modules = json.loads(modules_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            return [*missing, f"modules.json is not readable JSON ({e})"]
        if not (folder / "sentence_bert_config.json").is_file() and any(
                isinstance(m, dict) and m.get("path") == "" for m in modules if isinstance(modules, list)):
            missing.append("modules.json names a module at the root but there is no sentence_bert_config.json")
    return missing


def _recipe_name(config: dict[str, Any]) -> str | None:
    recipe = config.get("recipe")
    if recipe is None and isinstance(config.get("vlr_eol"), dict):  # an MLLM embedder's export
        recipe = config["vlr_eol"].get("recipe")
    if isinstance(recipe, dict):  # an exporter may store the whole recipe; its name is what we want
        recipe = recipe.get("name")
    return recipe if isinstance(recipe, str) and recipe.strip() else None


def _default_message(config: dict[str, Any]) -> str:
    from vlr_plugins import __version__

    recipe = _recipe_name(config)
    kind = ("MLLM embedder" if isinstance(config.get("vlr_eol"), dict)
            else "open_clip model" if isinstance(config.get("model_cfg"), dict) else "text encoder")
    what = f"{recipe} {kind}" if recipe else kind
    return f"Upload {what} (vlr-plugins {__version__})"


def _mask(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def _http_error(exc: BaseException) -> BaseException | None:
    """The Hub HTTP error behind ``exc``: LFS uploads wrap it in a RuntimeError (``__cause__``)."""
    from huggingface_hub.errors import HfHubHTTPError

    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, HfHubHTTPError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _translate(exc: BaseException, *, repo_id: str, endpoint: str, revision: str | None,
               secrets: tuple[str, ...]) -> PushError | None:
    """A :class:`PushError` for a Hub or connection failure, or None to let ``exc`` through."""
    import httpx2
    from huggingface_hub.errors import HFValidationError, OfflineModeIsEnabled, RevisionNotFoundError

    if isinstance(exc, OfflineModeIsEnabled):
        return PushError("HF_HUB_OFFLINE is set: pushing needs the network; unset HF_HUB_OFFLINE")
    if isinstance(exc, HFValidationError):  # refused locally, before any request: a malformed repo id
        return PushError(f"not a valid Hub repository id ({_mask(str(exc), secrets)})")
    err = _http_error(exc)
    if err is None:
        if isinstance(exc, httpx2.TransportError):
            return PushError(f"could not reach the Hub at {endpoint}: {_mask(str(exc), secrets)}")
        return None
    response = getattr(err, "response", None)
    status = getattr(response, "status_code", None)
    detail = _mask((getattr(err, "server_message", None) or "").strip(), secrets)[:_SERVER_DETAIL_CHARS]
    said = f" (the Hub said: {detail})" if detail else ""
    if status in (401, 403):
        message = f"authentication failed for {endpoint}: log in with `hf auth login` or set HF_TOKEN"
        if status == 403:
            message += f", with a token that may write to {repo_id}"
    elif status == 404 and isinstance(err, RevisionNotFoundError):
        message = f"revision {revision!r} not found in {repo_id} on {endpoint}: create the branch first"
    elif status == 404:
        message = (f"repository {repo_id} not found on {endpoint}: check the namespace, and that your token "
                   "may create repositories in it")
    elif status is not None and status >= 500:
        message = f"the Hub at {endpoint} answered {status}; try again later"
    else:
        message = f"the Hub at {endpoint} refused the push of {repo_id} with HTTP {status}"
    return PushError(message + said, status=status)


def push_folder(folder: str | Path, repo_id: str, *, private: bool = True, token: str | None = None,
                commit_message: str | None = None, revision: str | None = None,
                endpoint: str | None = None, create_pr: bool = False) -> str:
    """Upload an exported folder to the model repository ``repo_id``; return the commit (or PR) URL.

    Args:
        folder: a folder written by the exporter: ``config.json`` (or open_clip's
            ``open_clip_config.json`` with ``open_clip_model.safetensors``) and ``*.safetensors`` (no
            ``*.bin`` / ``*.pt`` / ``*.pkl`` / other pickle files).
        repo_id: ``namespace/name``; created when missing, private unless ``private=False``.
            An existing repository keeps its visibility.
        token: a Hub token; None lets huggingface_hub resolve it (``HF_TOKEN``, then the file
            ``hf auth login`` writes).
        commit_message: default ``"Upload <recipe> text encoder (vlr-plugins <version>)"``, the
            recipe read from ``config.json`` (key ``recipe``).
        revision: the branch to commit to (default ``main``); it must exist.
        endpoint: the Hub URL (default ``HF_ENDPOINT`` or https://huggingface.co).
        create_pr: open a pull request instead of committing to the branch.

    Raises:
        PushError: the folder is not an export, or the Hub refused (401/403, 404, 5xx, ...).

    Example::

        url = push_folder("exports/c5", "me/blip-paragraph-c5", private=True)
    """
    folder = Path(folder)
    config = _check_exported(folder)
    if create_pr and revision not in (None, "main"):
        raise PushError("create_pr (--create-pr) opens a pull request against main; "
                        f"found revision {revision!r}")
    try:
        from huggingface_hub import HfApi, constants
    except ImportError:
        raise PushError("pushing needs huggingface_hub: pip install 'vlr-plugins[hf]'") from None
    _check_repo_id(repo_id)
    if constants.is_offline_mode():
        raise PushError("HF_HUB_OFFLINE is set: pushing needs the network; unset HF_HUB_OFFLINE")

    api = HfApi(endpoint=endpoint, token=token)
    message = commit_message or _default_message(config)
    logger.info("pushing %s to %s on %s (%s)", folder, repo_id, api.endpoint,
                "private" if private else "public")
    failure = None
    try:
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        info = api.upload_folder(repo_id=repo_id, folder_path=folder, repo_type="model",
                                 commit_message=message, revision=revision, create_pr=create_pr)
    except Exception as e:
        secrets = (token,) if token else _resolved_token()
        failure = _translate(e, repo_id=repo_id, endpoint=api.endpoint, revision=revision, secrets=secrets)
        if failure is None:
            raise
    if failure is not None:
        raise failure  # outside the handler: the Hub error (and its request headers) stays unreferenced
    return str(info.pr_url or info.commit_url)


def _check_repo_id(repo_id: str) -> None:
    """Refuse a malformed repository id here, before the offline check and any request."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    detail = ""
    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        detail = f" ({' '.join(str(e).split())})"
    if detail or repo_id.count("/") != 1:
        raise PushError(f"not a valid Hub repository id {repo_id!r}: expected namespace/name, of letters, digits, "
                        f"'-', '_' and '.'{detail}")


def _resolved_token() -> tuple[str, ...]:
    from huggingface_hub import get_token

    try:
        resolved = get_token()
    except Exception:  # noqa: BLE001 -- masking is best-effort; it must not replace the push error
        return ()
    return (resolved,) if resolved else ()


# --------------------------------------------------------------------------- CLI


def cmd_push(args: argparse.Namespace) -> int:
    url = push_folder(args.folder, args.repo_id, private=not args.public, commit_message=args.message,
                      revision=args.revision, endpoint=args.endpoint, create_pr=args.create_pr)
    print(url)
    return 0
