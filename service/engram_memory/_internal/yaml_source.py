"""Reading YAML while remembering where everything came from.

PyYAML's composed node tree carries a line for every key and item; `YamlSource` keeps that
map so a validation error at any path can be reported as `<file>:<line>: <path>: <message>`.
It also reports what PyYAML would accept silently: duplicate keys (the last one wins) and
keys YAML 1.1 reads as booleans or numbers (`off:`, `yes:`, `1:`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

Path_ = tuple[str | int, ...]
_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlSource:
    """One YAML file: its display name and the line of every path in it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lines: dict[Path_, int] = {(): 1}
        self.problems: list[str] = []
        self.key_problems = 0

    def line_of(self, loc: Iterable[str | int]) -> int:
        path = tuple(part for part in loc if part != "[key]")
        while path not in self.lines:
            path = path[:-1]
        return self.lines[path]

    def report(self, loc: Sequence[str | int], message: str) -> None:
        self.problems.append(f"{self.name}:{self.line_of(loc)}: {dotted(loc)}: {message}")


def dotted(loc: Iterable[str | int]) -> str:
    text = ""
    for part in loc:
        if part == "[key]":
            continue
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + part
    return text or "<document>"


def _forget(source: YamlSource, prefix: Path_) -> None:
    """Drop the lines recorded under `prefix` (a duplicate key replaces its value)."""
    depth = len(prefix)
    for path in [path for path in source.lines if path[:depth] == prefix]:
        del source.lines[path]


def _index(node: Node, path: Path_, source: YamlSource) -> None:
    """Record the line of every key and item; report duplicate keys (PyYAML keeps the last
    silently, which would hide an author's mistake)."""
    if isinstance(node, MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, ScalarNode) else "<complex key>"
            line = key_node.start_mark.line + 1
            if key_node.tag not in {_STR_TAG, _MERGE_TAG}:
                # YAML 1.1 reads `off`, `yes`, `1` ... as bool/int: say so, not "[0]".
                source.key_problems += 1
                source.problems.append(
                    f"{source.name}:{line}: {dotted((*path, key))}: key is not a string "
                    f"(YAML reads it as {key_node.tag.rsplit(':', 1)[-1]}); quote it"
                )
            if key in seen and key != "<<":
                source.problems.append(
                    f"{source.name}:{line}: {dotted((*path, key))}: duplicate key "
                    f"(first at line {seen[key]})"
                )
                # PyYAML keeps the LAST value, so every later problem in it must point
                # at the duplicate's lines, not the first occurrence's.
                _forget(source, (*path, key))
            seen.setdefault(key, line)
            source.lines[(*path, key)] = line
            _index(value_node, (*path, key), source)
    elif isinstance(node, SequenceNode):
        for position, item in enumerate(node.value):
            source.lines[(*path, position)] = item.start_mark.line + 1
            _index(item, (*path, position), source)


def read_yaml(path: Path, source: YamlSource) -> object:
    """The document at `path` (None if unreadable or empty), indexing lines into `source`
    and adding every reading problem to `source.problems`."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        source.problems.append(f"{source.name}:1: <document>: cannot read: {exc}")
        return None
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            source.problems.append(f"{source.name}:1: <document>: empty file")
            return None
        _index(node, (), source)
        document: object = loader.construct_document(node)
        return document
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        source.problems.append(f"{source.name}:{line}: <document>: {exc.problem or exc}")
        return None
    except yaml.YAMLError as exc:
        source.problems.append(f"{source.name}:1: <document>: {exc}")
        return None
    finally:
        loader.dispose()
