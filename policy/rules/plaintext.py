"""No plaintext credential in any manifest or stack file: secrets travel only as Pulumi secrets.

Kubernetes Secrets' `data`/`stringData` are not read: their values come from Pulumi secrets (in
the offline render, obvious placeholders). Everything else is: ConfigMap data (and the files
embedded in it), env values, args, annotations, labels. Matches are shown redacted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import yaml

from policy.manifests import mapping, parsed_file, string, walk
from policy.vocabulary import Enforcement, Finding, KubeObject, Policy, PolicyContext

_CREDENTIAL_WORD = r"(?:passw(?:or)?d|passwd|secret|token|api[_-]?key|apikey|credentials?|private[_-]?key|webhook)"
CREDENTIAL_KEY = re.compile(_CREDENTIAL_WORD, re.IGNORECASE)
# Keys that name or point at a credential rather than hold one (secretName, secretKeyRef, token_file, ...).
REFERENCE_KEY = re.compile(
    r"(name|names|ref|refs|file|files|path|paths|dir|mountpath|key_?ref|type|kind|enabled|header|seconds|ttl)$",
    re.IGNORECASE,
)
URL_WITH_PASSWORD = re.compile(r"\b[a-z][a-z0-9+.-]*://([^/\s:@'\"]+):([^/\s@'\"]+)@", re.IGNORECASE)
TOKEN_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a GitHub token", re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})\b")),
    ("a Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("a Slack webhook URL", re.compile(r"hooks\.slack\.com/services/T[A-Za-z0-9]+/B[A-Za-z0-9]+/[A-Za-z0-9]+")),
    ("an AWS access key id", re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    ("a Pulumi access token", re.compile(r"\bpul-[0-9a-f]{40}\b")),
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("a JSON web token", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("a bearer token", re.compile(r"\bBearer\s+[A-Za-z0-9._~+/-]{20,}=*")),
)
# `password: hunter2`, `"api_key": "abc"`, `token=abc` inside embedded files and free text.
EMBEDDED_ASSIGNMENT = re.compile(
    r"""(?<![A-Za-z0-9_.-])(?P<key>[A-Za-z0-9_.-]++)["']?[ \t]*[:=][ \t]*["']?(?P<value>[^\s"',}#{<$][^\s"',}#]*+)"""
)
CLI_FLAG = re.compile(r"^--?(?P<name>[A-Za-z0-9-]++)(=(?P<value>.+))?$")
PLACEHOLDER = re.compile(
    r"^(<[^>]*>|\$\{[^}]*\}|\$\([^)]*\)|\{\{.*\}\}|\$__(env|file)\{[^}]*\}|\*+|x+|\.\.\.|true|false|null|none|~|"
    r"[0-9]+)$",
    re.IGNORECASE,
)
FIX = (
    "move the value into a Kubernetes Secret filled from a Pulumi secret (`pulumi config set --secret <key> ...`) "
    "and reference it (env valueFrom.secretKeyRef, a secret volume, or Grafana's $__file{...})"
)


def redact(value: str) -> str:
    return f"{value[:2]}…({len(value)} chars)" if len(value) > 4 else "…"


def is_literal_credential(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip()) and not PLACEHOLDER.match(value.strip())


def credential_key(key: str) -> bool:
    return bool(CREDENTIAL_KEY.search(key)) and not REFERENCE_KEY.search(key)


def text_findings(text: str, path: str) -> Iterator[Finding]:
    """Credentials recognisable in a string on their own: URLs with passwords, known token shapes,
    and `key: value` assignments to credential-like keys in embedded files."""
    for match in URL_WITH_PASSWORD.finditer(text):
        if is_literal_credential(match.group(2)):
            yield Finding(
                path,
                f"a URL carries a password ({match.group(1)}:{redact(match.group(2))}@...)",
                f"drop the user:password@ part and {FIX}",
            )
    for what, pattern in TOKEN_PATTERNS:
        for match in pattern.finditer(text):
            yield Finding(path, f"the value contains {what} ({redact(match.group(0))})", FIX)
    for match in EMBEDDED_ASSIGNMENT.finditer(text):
        key, value = match.group("key"), match.group("value")
        if credential_key(key) and is_literal_credential(value) and not value.startswith(("http://", "https://")):
            yield Finding(path, f"embedded setting {key!r} holds a literal credential ({redact(value)})", FIX)


def document_findings(document: Any, skip: Sequence[str] = ()) -> Iterator[Finding]:
    """Every credential-like leaf, name/value pair, CLI flag and string pattern in a parsed document."""
    for path, key, value in walk(document):
        if _skipped(path, skip):
            continue
        if credential_key(key) and is_literal_credential(value):
            yield Finding(path, f"key {key!r} holds a literal credential ({redact(str(value))})", FIX)
        elif isinstance(value, str):
            yield from text_findings(value, path)
    yield from _name_value_pairs(document, "", skip)


def _skipped(path: str, skip: Sequence[str]) -> bool:
    return any(path == s or path.startswith((f"{s}.", f"{s}[")) for s in skip)


def _name_value_pairs(value: Any, path: str, skip: Sequence[str]) -> Iterator[Finding]:
    """env-style {name: DB_PASSWORD, value: ...} entries and ["--token", "abc"] argument lists."""
    if path and _skipped(path, skip):
        return
    if isinstance(value, Mapping):
        name = string(value.get("name"))
        if name and credential_key(name) and is_literal_credential(value.get("value")):
            yield Finding(f"{path}.value", f"{name} is set to a literal credential ({redact(value['value'])})", FIX)
        for key in value:
            yield from _name_value_pairs(value[key], f"{path}.{key}" if path else str(key), skip)
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
        items = list(value)
        for index, item in enumerate(items):
            if isinstance(item, str) and (flag := CLI_FLAG.match(item)) and credential_key(flag.group("name")):
                given = flag.group("value")
                following = items[index + 1] if index + 1 < len(items) else None
                literal = given if given is not None else following
                if isinstance(literal, str) and not literal.startswith("-") and is_literal_credential(literal):
                    yield Finding(
                        f"{path}[{index}]", f"argument {item.split('=')[0]} is given a literal credential", FIX
                    )
            else:
                yield from _name_value_pairs(item, f"{path}[{index}]", skip)


def check_plaintext_secrets(obj: KubeObject, _ctx: PolicyContext) -> Iterator[Finding]:
    skip = ("data", "stringData") if obj.kind == "Secret" else ()
    seen: set[tuple[str, str]] = set()
    for finding in document_findings(obj.manifest, skip):
        if (finding.path, finding.problem) not in seen:
            seen.add((finding.path, finding.problem))
            yield finding


def rendered_file_findings(files: Mapping[str, str]) -> Iterator[tuple[str, Finding]]:
    """Every rendered file: its parsed document's credential-like values, or its text's."""
    for name, text in files.items():
        document = parsed_file(name, text)
        findings = document_findings(document) if isinstance(document, Mapping | list) else text_findings(text, "")
        yield from ((name, finding) for finding in findings)


def stack_file_findings(text: str) -> Iterator[Finding]:
    """A `Pulumi.<stack>.yaml`: credential-like config keys with plaintext values (a `secure:` value
    is encrypted and fine), and URL passwords or tokens anywhere in the text, comments included."""
    try:
        document = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        yield Finding("", f"not valid YAML ({exc})", "fix the YAML")
        return
    config = mapping(mapping(document).get("config"))
    for finding in document_findings(config):
        yield Finding(
            f"config.{finding.path}",
            finding.problem,
            "remove it from the file and run `pulumi config set --secret <key> <value>` (stored encrypted as secure:)",
        )
    for number, line in enumerate(text.splitlines(), start=1):
        for what, pattern in (("a URL with a password", URL_WITH_PASSWORD), *TOKEN_PATTERNS):
            match = pattern.search(line)
            if match and (pattern is not URL_WITH_PASSWORD or is_literal_credential(match.group(2))):
                yield Finding(
                    f"line {number}",
                    f"the line holds {what} ({redact(match.group(0))})",
                    "delete it (comments too) and keep the value only as a Pulumi secret",
                )


NO_PLAINTEXT_SECRETS = Policy(
    id="no-plaintext-secrets",
    description=(
        "No manifest holds a plaintext credential (credential-like keys, env values or arguments, tokens, URLs "
        "with user:password@) outside a Kubernetes Secret's data; secrets come only from Pulumi secrets."
    ),
    enforcement=Enforcement.MANDATORY,
    remediation="Keep credentials in Pulumi secrets and reference them from Kubernetes Secrets.",
    check=check_plaintext_secrets,
    file_check=rendered_file_findings,
    stack_file_check=stack_file_findings,
    tags=("security", "secrets"),
)
