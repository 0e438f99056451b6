"""Trace-aware logging for trainers: stdout, one record a line, logfmt (default), JSON or text.

`init_observability` installs it (`configure_logging`). Every record carries `time`, `level`,
`logger` and `msg`; a record emitted inside a sampled span also carries `trace_id` (32 hex) and
`span_id` (16 hex) of that span, and none outside one (no zeros); the job's `job_id`,
`model_type` and `fold` come from `log_context`, where the trainer has set them; anything passed
as `extra=` follows. An exception's traceback is one field (`exc`), newlines escaped, so a
record stays one line for the container runtime, the log shipper and Loki.

    time=2026-11-30T21:52:09.123Z level=info logger=examples.synthetic_trainer.job msg="epoch done"
    trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7 job_id=run-42 model_type=dqn
    fold=0 epoch=3 train_loss=0.52

(one line). Grafana's Loki datasource finds `trace_id=<hex>` (logfmt and text) and
`"trace_id": "<hex>"` (JSON) and links it to the trace in Tempo. Loki queries the fields with
`| logfmt` or `| json`.

`LOG_FORMAT` (logfmt, json, text) and `LOG_LEVEL` (DEBUG, INFO, WARNING, ERROR, CRITICAL) choose
the format and the threshold; a bad value stops the trainer at start with a message naming it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any, TextIO

from foxhunt_trainer.trace_context import current_ids

LOG_FORMAT_ENV = "LOG_FORMAT"
LOG_LEVEL_ENV = "LOG_LEVEL"
LOG_FORMATS: tuple[str, ...] = ("logfmt", "json", "text")
LOG_LEVELS: tuple[str, ...] = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DEFAULT_FORMAT = "logfmt"
DEFAULT_LEVEL = "INFO"
# The job's fields, in this order after the trace IDs, where the trainer has set them.
CONTEXT_FIELDS: tuple[str, ...] = ("job_id", "model_type", "fold")

_NO_CONTEXT: Mapping[str, str] = MappingProxyType({})
_context: ContextVar[Mapping[str, str]] = ContextVar("foxhunt_log_context", default=_NO_CONTEXT)
# Attributes every LogRecord has: anything else on a record came in through `extra=`.
_RECORD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "trace_ids",
    "log_context",
}


class LogSettingsError(ValueError):
    """A bad LOG_FORMAT or LOG_LEVEL."""


@contextmanager
def log_context(**fields: object) -> Iterator[None]:
    """Records logged in this block (this thread or task) carry `fields` (None values are skipped),
    on top of those of enclosing blocks: `with log_context(job_id=..., model_type=...)`."""
    added = {key: str(value) for key, value in fields.items() if value is not None}
    token = _context.set(MappingProxyType({**_context.get(), **added}))
    try:
        yield
    finally:
        _context.reset(token)


class TraceContextFilter(logging.Filter):
    """Stamps each record with the current span's IDs (or None) and the `log_context` fields."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.trace_ids = current_ids()
        record.log_context = _context.get()
        return True


def record_fields(record: logging.LogRecord) -> list[tuple[str, object]]:
    """The record's fields after `msg`: trace IDs, job context, `extra=` values, the exception."""
    fields: list[tuple[str, object]] = []
    ids: tuple[str, str] | None = getattr(record, "trace_ids", None)
    if ids is not None:
        fields += [("trace_id", ids[0]), ("span_id", ids[1])]
    context: Mapping[str, str] = getattr(record, "log_context", {})
    fields += [(key, context[key]) for key in CONTEXT_FIELDS if key in context]
    fields += [(key, value) for key, value in sorted(context.items()) if key not in CONTEXT_FIELDS]
    fields += [(key, value) for key, value in record.__dict__.items() if key not in _RECORD_ATTRIBUTES]
    if record.exc_info:
        fields.append(("exc", logging.Formatter().formatException(record.exc_info)))
    if record.stack_info:
        fields.append(("stack", record.stack_info))
    return fields


def _timestamp(record: logging.LogRecord) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


def logfmt_value(value: object) -> str:
    """A logfmt value: bare when it can be, else double-quoted with `\\`, `"` and control
    characters escaped (so a value never breaks the line)."""
    text = value if isinstance(value, str) else json.dumps(value) if isinstance(value, bool | None) else str(value)
    if text and not any(c in text for c in ' ="\\') and text.isprintable():
        return text
    escaped = json.dumps(text, ensure_ascii=False)  # quotes, backslashes, \n, \t, \u00XX
    return escaped


def _logfmt(pairs: list[tuple[str, object]]) -> str:
    return " ".join(f"{key}={logfmt_value(value)}" for key, value in pairs)


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        head: list[tuple[str, object]] = [
            ("time", _timestamp(record)),
            ("level", record.levelname.lower()),
            ("logger", record.name),
            ("msg", record.getMessage()),
        ]
        return _logfmt(head + record_fields(record))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record_fields(record):
            document[key] = value
        return json.dumps(document, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """`2026-11-30 21:52:09,123 INFO logger: message key=value ...`: for people, still one line."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage().replace("\\", "\\\\").replace("\n", "\\n")
        line = f"{self.formatTime(record)} {record.levelname} {record.name}: {message}"
        fields = record_fields(record)
        return f"{line} {_logfmt(fields)}" if fields else line


FORMATTERS: Mapping[str, type[logging.Formatter]] = {
    "logfmt": LogfmtFormatter,
    "json": JsonFormatter,
    "text": TextFormatter,
}


def log_settings(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(format, level) from LOG_FORMAT and LOG_LEVEL; a bad value raises LogSettingsError naming it."""
    env = os.environ if environ is None else environ
    fmt = env.get(LOG_FORMAT_ENV, "").strip().lower() or DEFAULT_FORMAT
    if fmt not in LOG_FORMATS:
        raise LogSettingsError(
            f"{LOG_FORMAT_ENV}={env.get(LOG_FORMAT_ENV)!r}: expected one of {', '.join(LOG_FORMATS)}"
        )
    level = env.get(LOG_LEVEL_ENV, "").strip().upper() or DEFAULT_LEVEL
    if level not in LOG_LEVELS:
        raise LogSettingsError(f"{LOG_LEVEL_ENV}={env.get(LOG_LEVEL_ENV)!r}: expected one of {', '.join(LOG_LEVELS)}")
    return fmt, level


class _TrainerHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler `configure_logging` installs (a marker class: installed once per process)."""


def configure_logging(
    fmt: str | None = None,
    level: str | None = None,
    *,
    stream: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> logging.Handler:
    """Install the trace-aware handler on the root logger (replacing one installed before) and set
    the root level. `fmt`/`level` default to LOG_FORMAT/LOG_LEVEL; `stream` to stdout."""
    env_fmt, env_level = log_settings(environ)
    fmt = (fmt or env_fmt).lower()
    level = (level or env_level).upper()
    log_settings({LOG_FORMAT_ENV: fmt, LOG_LEVEL_ENV: level})  # the same checks for arguments
    handler = _TrainerHandler(stream if stream is not None else sys.stdout)
    handler.setFormatter(FORMATTERS[fmt]())
    handler.addFilter(TraceContextFilter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _TrainerHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler
