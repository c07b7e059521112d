"""The benchmarks file of ``vlr eval``: which benchmarks, read by which reader, against which
embedding store; checked whole, and each error located in it, before anything is read or encoded.

.. code-block:: yaml

    benchmarks:
      - {name: flickr30k, reader: flickr30k, path: data/dataset_flickr30k.json, args: {split: all},
         item_embeddings: stores/flickr30k}
      - {name: carebench, reader: carebench, path: data/carebench.json, item_embeddings: stores/carebench,
         max_tokens: 128, text_kinds: [general, spatial, temporal]}
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from vlr_plugins.data._text_files import read_utf8
from vlr_plugins.data.retrieval_set import RetrievalSet
from vlr_plugins.errors import ConfigError, DataFormatError, MissingFileError, _type_name

__all__ = ["BenchmarkSpec", "load_benchmark_specs", "read_benchmark"]

_STORE_INDEX = "index.json"
_MIN_TOKENS = 3  # [CLS] and [SEP] take 2


@dataclass(frozen=True)
class BenchmarkSpec:
    """One benchmark to evaluate: a registered reader over its annotation file, the
    store of its item embeddings (``vlr precompute``), and optionally its token budget
    and the text kinds to score separately (CaReBench: general, spatial, temporal).

    ``source`` says where the spec was written (``benchmarks.yaml, benchmark 2``), for
    messages; it is not a key of the file.
    """

    name: str
    reader: str
    path: str
    item_embeddings: str
    args: dict[str, Any] = field(default_factory=dict)
    max_tokens: int | None = None
    text_kinds: tuple[str, ...] | None = None
    source: str | None = field(default=None, compare=False, repr=False)

    def result_keys(self) -> list[str]:
        """The names its results are reported under: ``name``, or ``name/kind`` per text kind."""
        return [f"{self.name}/{kind}" for kind in self.text_kinds] if self.text_kinds else [self.name]

    def where(self, key: str | None = None) -> str:
        """``source`` and ``key``, as an error message starts (``b.yaml, benchmark 2, field 'args'``)."""
        where = self.source or f"benchmark {self.name!r}"
        return f"{where}, field {key!r}" if key else where


_KEYS = ("name", "reader", "path", "item_embeddings", "args", "max_tokens", "text_kinds")
_REQUIRED = ("name", "reader", "path", "item_embeddings")


def _reader_arguments(reader: Callable[..., Any]) -> list[str] | None:
    """The keyword arguments ``reader`` takes after the file (``None``: any, it has ``**kwargs``)."""
    params = list(inspect.signature(reader).parameters.values())[1:]
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _reads_retrieval_sets(reader: Callable[..., Any]) -> bool:
    returns = inspect.signature(reader).return_annotation
    if returns is inspect.Signature.empty:
        return True  # unannotated: checked when it returns
    return returns is RetrievalSet or (isinstance(returns, str) and returns.rsplit(".", 1)[-1] == "RetrievalSet")


def _parse_yaml(path: str) -> Any:
    try:
        return yaml.safe_load(read_utf8(path))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or " ".join(str(e).split())
        raise DataFormatError(path, f"not valid YAML: {problem}",
                              record=mark.line + 1 if mark is not None else None) from None


def _spec(path: str, base: str, i: int, entry: Any, first: dict[str, int], require_stores: bool) -> BenchmarkSpec:
    from vlr_plugins.registry import READERS

    def bad(key: str | None, problem: str) -> DataFormatError:
        return DataFormatError(path, problem, record=i, record_kind="benchmark", field=key)

    if not isinstance(entry, dict):
        raise bad(None, f"expected a mapping with {', '.join(_REQUIRED)}, found {_type_name(entry)}")
    for key in entry:
        if key not in _KEYS:
            raise bad(key, f"unknown key (allowed: {', '.join(sorted(_KEYS))})")
    for key in _REQUIRED:
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            found = "nothing" if entry.get(key) is None else _type_name(entry[key])
            raise bad(key, f"missing (a non-empty string is required, found {found})")
    name = entry["name"]
    if name in first:
        raise bad("name", f"duplicate name {name!r}, first used by benchmark {first[name]}")
    first[name] = i
    if entry["reader"] not in READERS:
        raise bad("reader", f"unknown reader {entry['reader']!r}; registered: {', '.join(READERS.names())}")
    reader = READERS.get(entry["reader"])
    if not _reads_retrieval_sets(reader):
        raise bad("reader", f"reader {entry['reader']!r} does not read a retrieval benchmark (a RetrievalSet); "
                            "`vlr list readers` shows them")
    args = entry.get("args") or {}
    if not isinstance(args, dict):
        raise bad("args", f"expected a mapping of the reader's arguments, found {_type_name(args)}")
    accepted = _reader_arguments(reader)
    for key in args:
        if accepted is not None and key not in accepted:
            raise bad(f"args.{key}", f"reader {entry['reader']!r} takes no argument {key!r}; it takes: "
                                     f"{', '.join(accepted) or 'none'}")
    max_tokens = entry.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                   or max_tokens < _MIN_TOKENS):
        raise bad("max_tokens", f"expected an integer >= {_MIN_TOKENS} (special tokens included), "
                                f"found {max_tokens!r}")
    kinds = entry.get("text_kinds")
    if kinds is not None and (not isinstance(kinds, list) or not kinds
                              or not all(isinstance(k, str) and k for k in kinds) or len(set(kinds)) < len(kinds)):
        raise bad("text_kinds", f"expected a list of distinct text kinds such as [general, spatial], found {kinds!r}")
    resolved = {k: (entry[k] if os.path.isabs(entry[k]) else os.path.join(base, entry[k]))
                for k in ("path", "item_embeddings")}
    if not os.path.isfile(resolved["path"]):
        what = "a folder" if os.path.isdir(resolved["path"]) else "not there"
        raise bad("path", f"expected the benchmark's annotation file, {resolved['path']} is {what}")
    if require_stores and not os.path.isfile(os.path.join(resolved["item_embeddings"], _STORE_INDEX)):
        raise bad("item_embeddings", f"no embedding store at {resolved['item_embeddings']} (no {_STORE_INDEX}); "
                                     "write one with `vlr precompute`")
    return BenchmarkSpec(name=name, reader=entry["reader"], args=dict(args), max_tokens=max_tokens,
                         text_kinds=tuple(kinds) if kinds else None, source=f"{path}, benchmark {i}", **resolved)


def load_benchmark_specs(path: str | os.PathLike, *, require_stores: bool = True) -> list[BenchmarkSpec]:
    """Read ``benchmarks: [{name, reader, path, item_embeddings, args?, max_tokens?, text_kinds?}]``.

    Relative paths are taken relative to the YAML file. Everything that can be checked
    without reading the benchmarks is checked here, and the first problem is one
    :class:`~vlr_plugins.errors.DataFormatError` naming the file, the benchmark
    (1-based) and the key: not YAML, an unknown key, a missing or empty required key, a
    repeated name, an unknown reader or one that reads no retrieval benchmark, an
    argument the reader does not take (``args.<name>``; the message lists those it
    takes), a budget below 3, an annotation file or embedding store that is not there.
    A benchmarks file that is not there is a :class:`~vlr_plugins.errors.MissingFileError`.
    ``require_stores=False`` lets the embedding stores be missing (``vlr precompute
    --benchmarks`` writes them).

    Example::

        >>> specs = load_benchmark_specs("benchmarks.yaml")  # doctest: +SKIP
        >>> specs[0].name, specs[0].args  # doctest: +SKIP
        ('flickr30k', {'split': 'all'})
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        what = "is a folder, not a YAML file" if os.path.isdir(path) else "is not there"
        raise MissingFileError(f"benchmarks file {path} {what}")
    raw = _parse_yaml(path)
    if not isinstance(raw, dict):
        found = "an empty file" if raw is None else f"a {_type_name(raw)} at the top level"
        raise DataFormatError(path, f"expected a mapping with a 'benchmarks:' list, found {found}")
    if not isinstance(raw.get("benchmarks"), list) or not raw["benchmarks"]:
        found = "an empty list" if raw.get("benchmarks") == [] else _type_name(raw.get("benchmarks"))
        raise DataFormatError(path, f"expected a list of benchmarks, found {found}", field="benchmarks")
    for key in raw:
        if key != "benchmarks":
            raise DataFormatError(path, "unknown key (a benchmarks file holds only 'benchmarks:')", field=key)
    base = os.path.dirname(os.path.abspath(path))
    first: dict[str, int] = {}
    return [_spec(path, base, i, entry, first, require_stores) for i, entry in enumerate(raw["benchmarks"], start=1)]


def read_benchmark(spec: BenchmarkSpec) -> list[RetrievalSet]:
    """The retrieval sets of ``spec``: its reader over its file, one set per text kind
    (``spec.text_kinds``), or the whole set.

    Problems in the annotation file are the reader's :class:`DataFormatError`; an
    argument value the reader refuses, or a text kind the file does not have, is a
    :class:`~vlr_plugins.errors.ConfigError` naming ``spec.source`` and the key.
    """
    from vlr_plugins.registry import READERS

    try:
        full = READERS.get(spec.reader)(spec.path, **spec.args)
    except ConfigError as e:
        raise ConfigError(f"{spec.where('args')}: {e}") from e
    if not isinstance(full, RetrievalSet):
        raise ConfigError(f"{spec.where('reader')}: reader {spec.reader!r} returned a {type(full).__name__}, "
                          "not a RetrievalSet")
    if not spec.text_kinds:
        return [full]
    missing = [k for k in spec.text_kinds if k not in full.kinds()]
    if missing:
        raise ConfigError(f"{spec.where('text_kinds')}: {spec.path} has no texts of kind "
                          f"{', '.join(map(repr, missing))} (its kinds: {', '.join(full.kinds()) or 'none'})")
    return [full.with_texts(k) for k in spec.text_kinds]
