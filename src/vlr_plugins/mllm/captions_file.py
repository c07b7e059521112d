"""A captions file that survives ``kill -9``: JSON Lines appended one fsynced record at a time.

Each caption is one line ``{"id": ..., "caption": ...}`` (what ``vlr capst --captions``
reads), written with a single ``write`` on an append-only descriptor and then ``fsync``ed,
so a killed run leaves every finished caption on disk and at most one partial last line.
Reopening with ``resume`` cuts that partial line off, reads the ids already captioned (a
run then skips them: nothing is captioned or written twice), and checks that the run
uses the settings the file was started with (``<file>.settings.json``: model, prompt,
frames, generation), since one file must not mix two models' captions.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vlr_plugins.data._text_files import json_lines
from vlr_plugins.errors import DataFormatError, OutputExistsError, UsageError

__all__ = ["CaptionsFile", "settings_path_of", "failures_path_of"]


def settings_path_of(path: str | os.PathLike[str]) -> Path:
    """Where the settings a captions file was started with are kept: ``<file>.settings.json``."""
    path = Path(path)
    return path.with_name(path.name + ".settings.json")


def failures_path_of(path: str | os.PathLike[str]) -> Path:
    """Where the videos a run could not caption are listed: ``<file>.failures.jsonl``."""
    path = Path(path)
    return path.with_name(path.name + ".failures.jsonl")


def _differences(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key} was {a!r}, now {b!r}")
    return out


class CaptionsFile:
    """Open ``path`` for appending captions of a run with ``settings`` (plain data).

    A new file needs ``path`` absent, or ``overwrite`` (which discards it and its records);
    an existing one needs ``resume`` (its partial last line is cut off; its settings must
    equal ``settings``). ``done`` maps the ids already captioned to their captions.
    ``resume_flag`` / ``overwrite_flag`` are how messages name the options.
    """

    def __init__(self, path: str | os.PathLike[str], settings: Mapping[str, Any], *, resume: bool = False,
                 overwrite: bool = False, resume_flag: str = "resume=True", overwrite_flag: str = "overwrite=True"
                 ) -> None:
        self.path = Path(path)
        self.settings = json.loads(json.dumps(dict(settings)))
        if resume and overwrite:
            raise UsageError(resume_flag, f"and {overwrite_flag} exclude each other")
        if self.path.is_dir():
            raise OutputExistsError(f"{self.path} is a folder; the captions go into a .jsonl file")
        record = settings_path_of(self.path)
        if self.path.exists() and not (resume or overwrite):
            raise OutputExistsError(f"{self.path} exists; pass {resume_flag} to caption the videos it lacks, or "
                                    f"{overwrite_flag} to start it over")
        if overwrite:
            for old in (self.path, record, failures_path_of(self.path)):
                if old.exists():
                    old.unlink()
        self.cut_partial_line = False
        self.done: dict[str, str] = self._read() if self.path.exists() else {}
        if record.exists():
            with open(record, encoding="utf-8") as f:
                started = json.load(f)
            diff = _differences(started, self.settings)
            if diff:
                raise UsageError(resume_flag, f"{self.path} was started with other settings ({'; '.join(diff)}); "
                                              f"finish it with those, or start a new file")
        else:
            from vlr_plugins._io import atomic_write_json

            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(record, self.settings)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _cut_partial_line(self) -> bool:
        """Cut off a partial last line (the record a kill interrupted: it is captioned again)."""
        data = self.path.read_bytes()
        cut = data.rfind(b"\n") + 1
        if cut == len(data):
            return False
        os.truncate(self.path, cut)
        return True

    def _read(self) -> dict[str, str]:
        self.cut_partial_line = self._cut_partial_line()
        done: dict[str, str] = {}
        first: dict[str, int] = {}
        for line_no, rec in json_lines(self.path):
            if not isinstance(rec, dict) or not isinstance(rec.get("id"), str) or not isinstance(rec.get("caption"), str):
                raise DataFormatError(self.path, "expected {\"id\": string, \"caption\": string}", record=line_no)
            if rec["id"] in first:
                raise DataFormatError(self.path, f"duplicate id {rec['id']!r}, first on line {first[rec['id']]}",
                                      record=line_no, field="id")
            first[rec["id"]] = line_no
            done[rec["id"]] = rec["caption"]
        return done

    def append(self, video_id: str, caption: str) -> None:
        """Write one record and fsync it; an id already in the file is refused."""
        if video_id in self.done:
            raise ValueError(f"{self.path}: {video_id!r} is captioned already")
        line = (json.dumps({"id": video_id, "caption": caption}, ensure_ascii=False) + "\n").encode("utf-8")
        written = os.write(self._fd, line)
        if written != len(line):  # a short write leaves a partial line, which a resume cuts off
            raise OSError(f"{self.path}: wrote {written} of {len(line)} bytes")
        os.fsync(self._fd)
        self.done[video_id] = caption

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> CaptionsFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
