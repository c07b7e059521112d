"""docs/scaling.md cannot drift from the CLI: every ``vlr`` command line in its shell blocks
parses with the real ``vlr`` parser (parsed only, never run), every ``torchrun`` prefix with
torch's own torchrun parser, and every link of the page leads to a file (and heading) that
exists.

The shell blocks are read the way bash would split them, as far as the page needs: ``\\``
continuations, comments, ``;`` / ``&&`` / ``&`` / ``|``, ``for VAR in ...; do ... done``
loops (the body is checked for every value), ``VAR=value`` assignments, ``srun [options]``,
``bash -c '...'``; the shell variables the page uses get the sample values of ``SAMPLE``
(an unknown variable fails the test, so that a new one is given a value here).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from vlr_plugins.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "scaling.md"
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)

#: what a SLURM job, torchrun's agent or the reader's shell would give the page's variables
SAMPLE = {
    "SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "8", "SLURM_NNODES": "2", "SLURM_NODEID": "1",
    "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node[07-08]", "NODE_RANK": "1", "HEAD": "node07",
}
#: the modules ``torchrun -m`` may start, and the ``vlr`` verb each is
MODULES = {"vlr_plugins.cli": None, "vlr_plugins.integrations.open_clip.train": "openclip-train"}
_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", ";;"}
_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
_SUBSTITUTION = re.compile(r"\$\([^()]*\)")


@dataclass(frozen=True)
class Command:
    """One ``vlr`` invocation of the page: its arguments after ``vlr``, and how it was started."""

    argv: tuple[str, ...]
    launcher: str  # "vlr", "python -m vlr_plugins.cli" or "torchrun"
    source: str  # the shell text it came from, for messages

    @property
    def verb(self) -> str:
        return self.argv[0] if self.argv else ""


def shell_blocks(text: str) -> list[str]:
    return [body for lang, body in FENCE.findall(text) if lang in ("bash", "sh", "shell")]


def _tokens(block: str) -> list[str]:
    """The block's words, a ``;`` after every line (comments and continuations gone)."""
    out: list[str] = []
    for line in block.replace("\\\n", " ").splitlines():
        line = _SUBSTITUTION.sub("SUBSTITUTED", line)  # $(...) runs nothing here
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        out += list(lexer) + [";"]
    return out


def _simple_commands(tokens: list[str]) -> list[list[str]]:
    commands, current = [], []
    for token in tokens:
        if token in _SEPARATORS:
            if current:
                commands.append(current)
            current = []
        else:
            current.append(token)
    if current:
        commands.append(current)
    return commands


def _expand(word: str, env: dict[str, str], source: str) -> str:
    def value(m: re.Match[str]) -> str:
        name = m[1] or m[2]
        if name not in env:
            raise AssertionError(f"docs/scaling.md uses ${name}, which has no sample value in SAMPLE "
                                 f"(tests/docs/test_scaling_page.py): {source}")
        return env[name]

    return _VARIABLE.sub(value, word)


def _strip_keyword(command: list[str]) -> list[str]:
    return command[1:] if command and command[0] in ("do", "then", "else", "time") else command


def _run(commands: list[list[str]], env: dict[str, str], found: list[Command]) -> None:
    i = 0
    while i < len(commands):
        command = _strip_keyword(commands[i])
        if not command or command[0] in ("done", "fi", "wait"):
            i += 1
            continue
        if command[0] == "for":
            assert len(command) >= 3 and command[2] == "in", f"a for loop the test cannot read: {command}"
            depth, j = 1, i + 1
            while depth:
                assert j < len(commands), f"a for loop without its done: {command}"
                inner = _strip_keyword(commands[j])
                depth += bool(inner) and inner[0] == "for"
                depth -= bool(inner) and inner[0] == "done"
                j += 1
            body = commands[i + 1:j - 1]
            for value in command[3:]:
                _run(body, {**env, command[1]: _expand(value, env, " ".join(command))}, found)
            i = j
            continue
        _one(command, env, found)
        i += 1


def _one(command: list[str], env: dict[str, str], found: list[Command]) -> None:
    source = " ".join(command)
    if command[0] == "export":
        command = command[1:]
    while command and re.fullmatch(r"\w+=.*", command[0]):  # VAR=value (before a command, or alone)
        name, _, value = command[0].partition("=")
        if len(command) == 1:
            env[name] = _expand(value, env, source)
        command = command[1:]
    if not command:
        return
    if command[0] == "srun":  # srun's own options, then the program it starts
        starts = [k for k, word in enumerate(command) if word in ("vlr", "torchrun", "python", "bash")]
        assert starts, f"srun starts no command the test knows: {source}"
        command = command[starts[0]:]
    if command[:2] == ["bash", "-c"]:
        _run(_simple_commands(_tokens(command[2])), env, found)
        return
    words = [_expand(word, env, source) for word in command]
    if words[0] == "vlr":
        found.append(Command(tuple(words[1:]), "vlr", source))
    elif words[:3] == ["python", "-m", "vlr_plugins.cli"]:
        found.append(Command(tuple(words[3:]), "python -m vlr_plugins.cli", source))
    elif words[0] == "torchrun" or words[:3] == ["python", "-m", "torch.distributed.run"]:
        found.append(_torchrun(words[1:] if words[0] == "torchrun" else words[3:], source))


def _torchrun(args: list[str], source: str) -> Command:
    """torchrun's own options parsed by torch's parser; the program must be ``-m`` a vlr module."""
    from torch.distributed.run import parse_args

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parsed = parse_args(args)
    except SystemExit:
        raise AssertionError(f"torchrun refuses this line: {err.getvalue().strip().splitlines()[-1]}\n  {source}")
    assert parsed.module, f"torchrun starts a vlr module with -m: {source}"
    assert parsed.training_script in MODULES, f"torchrun -m {parsed.training_script}: not a vlr module ({source})"
    verb = MODULES[parsed.training_script]
    return Command(tuple(([verb] if verb else []) + list(parsed.training_script_args)), "torchrun", source)


def page_commands(text: str) -> list[Command]:
    found: list[Command] = []
    for block in shell_blocks(text):
        _run(_simple_commands(_tokens(block)), dict(SAMPLE), found)
    return found


def _parse(argv: tuple[str, ...], source: str) -> argparse.Namespace:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser().parse_args(list(argv))
    except SystemExit:
        raise AssertionError(f"vlr refuses this line: {err.getvalue().strip().splitlines()[-1]}\n  {source}")


@pytest.fixture(scope="module")
def commands() -> list[Command]:
    return page_commands(DOC.read_text(encoding="utf-8"))


def test_every_vlr_command_of_the_page_parses(commands):
    from vlr_plugins.generate.pipeline import load_pipeline
    from vlr_plugins.recipe import list_recipes

    recipes = list_recipes()
    for c in commands:
        args = _parse(c.argv, c.source)
        if c.verb == "train":
            assert args.recipe in recipes, f"vlr train {args.recipe}: no such shipped recipe ({c.source})"
        if c.verb == "generate" and args.target != "stats":
            pipeline = load_pipeline(args.target)
            stages = [s.name for s in pipeline.stages]
            for stage in args.stages or ():
                assert stage in stages, f"--stages {stage}: pipeline {args.target} has {stages} ({c.source})"
            for item in args.set or ():
                if item.startswith("roles."):
                    role = item.split(".")[1]
                    assert role in pipeline.roles, f"--set {item}: no role {role} in {args.target} ({c.source})"


def test_the_openclip_train_lines_parse_with_open_clip_trains_own_parser(commands):
    pytest.importorskip("open_clip_train")
    from open_clip_train.params import parse_args as parse_open_clip_args

    from vlr_plugins.integrations.open_clip.train import build_parser as vlr_options
    from vlr_plugins.recipe import list_recipes

    lines = [c for c in commands if c.verb == "openclip-train"]
    assert lines
    for c in lines:
        ours, rest = vlr_options().parse_known_args(list(c.argv[1:]))
        if ours.vlr_recipe is not None:
            assert ours.vlr_recipe in list_recipes(), f"--vlr-recipe {ours.vlr_recipe}: no such recipe ({c.source})"
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                parse_open_clip_args(rest)
        except SystemExit:
            raise AssertionError(f"open_clip_train refuses {rest}: {err.getvalue().strip().splitlines()[-1]}\n"
                                 f"  {c.source}")


def test_the_page_covers_every_command_in_every_way_it_scales(commands):
    def verbs(pick) -> set[str]:
        return {c.verb for c in commands if pick(c)}

    sharded = {"precompute", "caption", "generate", "mine"}
    assert sharded <= verbs(lambda c: "--shard-index" in c.argv and "--shard-count" in c.argv)
    assert {"precompute", "caption", "mine", "generate"} <= verbs(lambda c: "--merge-only" in c.argv)
    assert {"precompute", "caption", "mine", "generate", "train", "openclip-train"} <= verbs(
        lambda c: c.launcher == "torchrun")
    multi_node = [c for c in commands if c.launcher == "torchrun" and "--nnodes" in c.source]
    assert {"precompute", "train", "openclip-train"} <= {c.verb for c in multi_node}
    assert all("--rdzv-endpoint" in c.source and "--node-rank" in c.source for c in multi_node)
    assert {"generate", "precompute", "mine", "caption"} <= verbs(
        lambda c: c.argv[c.argv.index("--engine") + 1] == "ray" if "--engine" in c.argv else False)
    local = verbs(lambda c: c.launcher == "torchrun" and "--standalone" in c.source)
    assert {"precompute", "train", "openclip-train"} <= local  # CPU gloo variants one can run on a laptop
    text = DOC.read_text(encoding="utf-8")
    assert "#SBATCH --array=0-" in text and "--shard-index $SLURM_ARRAY_TASK_ID" in text
    assert "## Not yet" in text


def test_the_shell_reader_sees_what_bash_would():
    text = ("```bash\n#SBATCH --array=0-1\nfor s in a b; do\n  vlr generate paragraph --stages $s \\\n"
            "    --shard-index $SLURM_ARRAY_TASK_ID   # a comment\ndone; wait\n"
            "srun bash -c 'torchrun --nproc-per-node 2 -m -- vlr_plugins.cli openclip-train --logs $HEAD'\n"
            "X=$(hostname) && CUDA_VISIBLE_DEVICES=0 vlr mine nli in.csv --model $X --out o.csv &\n```\n")
    found = page_commands(text)
    assert [c.argv for c in found] == [
        ("generate", "paragraph", "--stages", "a", "--shard-index", "3"),
        ("generate", "paragraph", "--stages", "b", "--shard-index", "3"),
        ("openclip-train", "--logs", "node07"),
        ("mine", "nli", "in.csv", "--model", "SUBSTITUTED", "--out", "o.csv"),
    ]
    with pytest.raises(AssertionError, match="no sample value"):
        page_commands("```bash\nvlr list $NOT_A_SAMPLE\n```\n")
    with pytest.raises(AssertionError, match="ambiguous option"):  # why the page writes `-m --`
        page_commands("```bash\ntorchrun --standalone -m vlr_plugins.cli openclip-train --logs logs\n```\n")
    with pytest.raises(AssertionError, match="vlr refuses"):
        c = page_commands("```bash\nvlr precompute --out s --shard-index 1 --shard-count 0\n```\n")[0]
        _parse(c.argv, c.source)


_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {_slug(m[1]) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", text, re.MULTILINE)}


def test_every_link_of_the_page_resolves():
    text = FENCE.sub("", DOC.read_text(encoding="utf-8"))
    links = _LINK.findall(text)
    assert links
    for link in links:
        if re.match(r"^[a-z]+:", link):
            continue  # a web address: not checked offline
        target, _, anchor = link.partition("#")
        path = (DOC.parent / target).resolve() if target else DOC
        assert path.is_file(), f"docs/scaling.md links {link}: no file {path}"
        if anchor and path.suffix == ".md":
            assert anchor in _anchors(path), f"docs/scaling.md links {link}: no such heading in {path.name}"


def test_every_repository_path_the_page_names_exists():
    text = DOC.read_text(encoding="utf-8")
    named = set(re.findall(r"\b((?:tests|docs|src|recipes)/[\w./-]+\.(?:py|md|yaml))\b", text))
    assert named
    for path in sorted(named):
        assert (ROOT / path).is_file(), f"docs/scaling.md names {path}, which does not exist"


@pytest.mark.parametrize("page", ["README.md", "docs/precompute.md", "docs/mmengine.md"])
def test_the_page_is_linked_from(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    target = "docs/scaling.md" if page == "README.md" else "scaling.md"
    links = [link for link in _LINK.findall(text) if link.partition("#")[0] == target]
    assert links, f"{page} does not link {target}"
    for link in links:
        anchor = link.partition("#")[2]
        assert not anchor or anchor in _anchors(DOC), f"{page} links {link}: no such heading in scaling.md"
