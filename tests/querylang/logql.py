"""LogQL log queries parsed by Grafana's grammar (@grafana/lezer-logql, through node) and applied to
log lines with their stream labels, the way Loki selects them.

Supported, and nothing else (anything else fails loudly rather than being ignored): the stream
selector (`=`, `!=`, `=~`, `!~`), line filters (`|=`, `!=`, `|~`, `!~`), `label_format` with the
template `{{ contains "<text>" __line__ }}` (what Grafana's trace-to-logs link writes), and label
filters with string matchers joined by `and`/`or`. Label names a query reads but a line lacks are
empty, as in Loki. Regular expressions are RE2 in Loki; those used here mean the same in Python.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra import REPO_ROOT

TREE_SCRIPT = Path(__file__).with_name("logql_tree.cjs")
GRAMMAR = REPO_ROOT / "node_modules" / "@grafana" / "lezer-logql"
CONTAINS_TEMPLATE = re.compile(r'\{\{\s*contains\s+"((?:[^"\\]|\\.)*)"\s+__line__\s*\}\}')


class LogQLError(ValueError):
    pass


@dataclass(frozen=True)
class Node:
    type: str
    text: str
    error: bool
    children: tuple[Node, ...]

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Node:
        return cls(data["type"], data["text"], data["error"], tuple(cls.of(c) for c in data["children"]))

    def walk(self) -> list[Node]:
        return [self, *(n for c in self.children for n in c.walk())]

    def child(self, *types: str) -> Node:
        found = [c for c in self.children if c.type in types]
        if len(found) != 1:
            raise LogQLError(
                f"expected one of {types} in {self.type} {self.text!r}, got {[c.type for c in self.children]}"
            )
        return found[0]


def parse(queries: Sequence[str]) -> list[Node]:
    """Syntax trees of `queries` by @grafana/lezer-logql; a query with a syntax error raises."""
    node = shutil.which("node")
    if node is None or not GRAMMAR.is_dir():
        raise FileNotFoundError(
            "node and the npm package @grafana/lezer-logql are needed: run scripts/install-system-packages.sh"
        )
    done = subprocess.run(
        [node, str(TREE_SCRIPT)],
        input=json.dumps(list(queries)),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    trees = [Node.of(t) for t in json.loads(done.stdout)]
    for query, tree in zip(queries, trees, strict=True):
        errors = [n for n in tree.walk() if n.error]
        if errors or tree.type != "LogQL":
            raise LogQLError(f"LogQL syntax error in {query!r} at {[e.text for e in errors]}")
    return trees


def string_value(node: Node) -> str:
    """A LogQL string literal: Go double-quoted (escapes) or backquoted (raw)."""
    text = node.text
    if text.startswith("`"):
        return text[1:-1]
    value: str = json.loads(text)
    return value


def _matcher(node: Node) -> Callable[[Mapping[str, str]], bool]:
    name = node.child("Identifier").text
    op = node.child("Eq", "Neq", "Re", "Nre").type
    value = string_value(node.child("String"))
    if op == "Eq":
        return lambda labels: labels.get(name, "") == value
    if op == "Neq":
        return lambda labels: labels.get(name, "") != value
    pattern = re.compile(value)
    if op == "Re":
        return lambda labels: pattern.fullmatch(labels.get(name, "")) is not None
    return lambda labels: pattern.fullmatch(labels.get(name, "")) is None


def _line_filter(node: Node) -> Callable[[str], bool]:
    op = node.child("Filter").text.replace(" ", "")
    value = string_value(node.child("String"))
    if op == "|=":
        return lambda line: value in line
    if op == "!=":
        return lambda line: value not in line
    pattern = re.compile(value)
    if op == "|~":
        return lambda line: pattern.search(line) is not None
    if op == "!~":
        return lambda line: pattern.search(line) is None
    raise LogQLError(f"line filter {op!r} not supported")


Stage = Callable[[dict[str, str], str], bool]


def _label_filter(node: Node) -> Callable[[Mapping[str, str]], bool]:
    if any(c.type == "Matcher" for c in node.children):
        return _matcher(node.child("Matcher"))
    parts = [c for c in node.children if c.type == "LabelFilter"]
    joins = [c.type for c in node.children if c.type in ("Or", "And")]
    if len(parts) != 2 or len(joins) != 1:
        raise LogQLError(f"label filter {node.text!r} not supported")
    left, right = (_label_filter(p) for p in parts)
    if joins[0] == "Or":
        return lambda labels: left(labels) or right(labels)
    return lambda labels: left(labels) and right(labels)


def _label_format(node: Node) -> Stage:
    formats = [n for n in node.walk() if n.type == "LabelFormatMatcher"]
    compiled = []
    for matcher in formats:
        template = string_value(matcher.child("String"))
        match = CONTAINS_TEMPLATE.fullmatch(template.strip())
        if match is None:
            raise LogQLError(f"label_format template {template!r} not supported")
        compiled.append((matcher.child("Identifier").text, json.loads(f'"{match.group(1)}"')))

    def stage(labels: dict[str, str], line: str) -> bool:
        for name, needle in compiled:
            labels[name] = "true" if needle in line else "false"
        return True

    return stage


def _stage(node: Node) -> list[Stage]:
    kinds = [c.type for c in node.children if c.type != "Pipe"]
    if kinds == ["LineFilters"]:
        filters = [_line_filter(f) for f in node.walk() if f.type == "LineFilter"]
        return [lambda labels, line, f=f: f(line) for f in filters]  # type: ignore[misc]
    if kinds == ["LabelFormatExpr"]:
        return [_label_format(node.child("LabelFormatExpr"))]
    if kinds == ["LabelFilter"]:
        label_filter = _label_filter(node.child("LabelFilter"))
        return [lambda labels, line: label_filter(labels)]
    raise LogQLError(f"pipeline stage {node.text!r} ({kinds}) not supported")


@dataclass(frozen=True)
class LogQuery:
    """A parsed log query: its stream matchers and its pipeline."""

    text: str
    matchers: tuple[Callable[[Mapping[str, str]], bool], ...]
    stages: tuple[Stage, ...]
    matcher_texts: tuple[str, ...]
    stage_texts: tuple[str, ...]

    def selects(self, labels: Mapping[str, str], line: str) -> bool:
        if not all(m(labels) for m in self.matchers):
            return False
        working = dict(labels)
        return all(stage(working, line) for stage in self.stages)


def log_queries(queries: Sequence[str]) -> list[LogQuery]:
    out = []
    for query, tree in zip(queries, parse(queries), strict=True):
        expr = tree.child("Expr")
        log_expr = expr.child("LogExpr")
        selector = log_expr.child("Selector")
        matchers = [n for n in selector.walk() if n.type == "Matcher"]
        pipeline = [n for n in log_expr.walk() if n.type == "PipelineStage"]
        stages = [s for p in pipeline for s in _stage(p)]
        out.append(
            LogQuery(
                query,
                tuple(_matcher(m) for m in matchers),
                tuple(stages),
                tuple(m.text for m in matchers),
                tuple(p.text for p in pipeline),
            )
        )
    return out
