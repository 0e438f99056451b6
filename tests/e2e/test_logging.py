"""Trace-aware trainer logging: stdout, one record a line, logfmt/json/text, IDs only inside spans."""

from __future__ import annotations

import io
import json
import logging
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer, format_span_id, format_trace_id

from foxhunt_trainer import configure_logging, log_context
from foxhunt_trainer.logs import LOG_FORMAT_ENV, LOG_LEVEL_ENV, LogSettingsError, log_settings, logfmt_value
from infra import REPO_ROOT

LOGFMT_PAIR = re.compile(r'([A-Za-z_][A-Za-z0-9_.]*)=("(?:[^"\\]|\\.)*"|\S*)')


def parse_logfmt(line: str) -> dict[str, str]:
    """A logfmt line as a dict (quoted values unescaped); the whole line must be pairs."""
    fields: dict[str, str] = {}
    position = 0
    for match in LOGFMT_PAIR.finditer(line):
        assert line[position : match.start()].strip() == "", f"not logfmt at {position}: {line!r}"
        value = match.group(2)
        fields[match.group(1)] = json.loads(value) if value.startswith('"') else value
        position = match.end()
    assert line[position:].strip() == "", line
    return fields


@pytest.fixture
def capture() -> Iterator[tuple[io.StringIO, logging.Logger]]:
    """A stream the trainer's handler writes to, and a logger; the handler is removed afterwards."""
    stream = io.StringIO()
    root = logging.getLogger()
    level = root.level
    handler = configure_logging("logfmt", "DEBUG", stream=stream, environ={})
    yield stream, logging.getLogger("trainer.test")
    root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture
def tracer() -> Iterator[Tracer]:
    provider = TracerProvider()
    yield provider.get_tracer("test")
    provider.shutdown()


def test_records_inside_a_span_carry_its_ids_and_the_job_context_outside_none(capture, tracer):
    stream, log = capture
    log.info("before")
    with log_context(job_id="run-42", model_type="dqn"), tracer.start_as_current_span("training_job") as job_span:
        with log_context(fold=0), tracer.start_as_current_span("epoch") as epoch_span:
            log.info("epoch done", extra={"epoch": 3, "train_loss": 0.52})
        log.warning("after the fold")
    log.info("after")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 4
    before, epoch, job, after = (parse_logfmt(line) for line in lines)
    trace_id = format_trace_id(job_span.get_span_context().trace_id)
    assert epoch == {
        "time": epoch["time"],
        "level": "info",
        "logger": "trainer.test",
        "msg": "epoch done",
        "trace_id": trace_id,
        "span_id": format_span_id(epoch_span.get_span_context().span_id),
        "job_id": "run-42",
        "model_type": "dqn",
        "fold": "0",
        "epoch": "3",
        "train_loss": "0.52",
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", epoch["time"])
    assert (job["trace_id"], job["span_id"]) == (trace_id, format_span_id(job_span.get_span_context().span_id))
    assert "fold" not in job and job["level"] == "warning"
    for outside in (before, after):
        assert not {"trace_id", "span_id", "job_id", "fold"} & set(outside)
    assert re.fullmatch("[0-9a-f]{32}", trace_id) and trace_id != "0" * 32


def test_an_exception_stays_on_one_line(capture, tracer):
    stream, log = capture
    with tracer.start_as_current_span("checkpoint_save"):
        try:
            raise OSError("disk full\nsecond line")
        except OSError:
            log.exception('checkpoint "save" failed')
    # The handler is the root logger's: lines other threads of the process log (a job's progress
    # line) may land in the stream too. This logger's record is one line, traceback included.
    (fields,) = [f for f in map(parse_logfmt, stream.getvalue().splitlines()) if f["logger"] == log.name]
    assert fields["msg"] == 'checkpoint "save" failed'
    assert fields["exc"].startswith("Traceback") and "OSError: disk full\nsecond line" in fields["exc"]
    assert fields["level"] == "error" and len(fields["trace_id"]) == 32


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("plain", "plain"),
        ("two words", '"two words"'),
        ("", '""'),
        ('a="b"', '"a=\\"b\\""'),
        (True, "true"),
        (None, "null"),
        (1.5, "1.5"),
        ("tab\there", '"tab\\there"'),
    ],
)
def test_logfmt_values(value, text):
    assert logfmt_value(value) == text


def test_json_and_text_formats_carry_the_same_fields(tracer):
    root = logging.getLogger()
    level = root.level
    outputs, trace_ids = {}, {}
    for fmt in ("json", "text"):
        stream = io.StringIO()
        handler = configure_logging(fmt, "INFO", stream=stream, environ={})
        try:
            with log_context(job_id="j"), tracer.start_as_current_span("fold") as span:
                logging.getLogger("t").info("fold finished\nnext", extra={"seconds": 2.5})
            trace_ids[fmt] = format_trace_id(span.get_span_context().trace_id)
            logging.getLogger("t").debug("below the level")
        finally:
            root.removeHandler(handler)
        outputs[fmt] = stream.getvalue()
    root.setLevel(level)
    (json_line,) = outputs["json"].splitlines()
    record = json.loads(json_line)
    assert (record["msg"], record["trace_id"], record["job_id"], record["seconds"]) == (
        "fold finished\nnext",
        trace_ids["json"],
        "j",
        2.5,
    )
    assert list(record)[:6] == ["time", "level", "logger", "msg", "trace_id", "span_id"]
    (text_line,) = outputs["text"].splitlines()
    assert re.fullmatch(
        rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d,\d{{3}} INFO t: fold finished\\nnext trace_id={trace_ids['text']} span_id=[0-9a-f]{{16}} job_id=j seconds=2.5",
        text_line,
    )


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({LOG_FORMAT_ENV: "xml"}, "LOG_FORMAT='xml': expected one of logfmt, json, text"),
        ({LOG_LEVEL_ENV: "verbose"}, "LOG_LEVEL='verbose': expected one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
    ],
)
def test_bad_settings_name_the_variable_the_value_and_the_choices(environ, message):
    with pytest.raises(LogSettingsError) as error:
        log_settings(environ)
    assert str(error.value) == message


def test_settings_default_to_logfmt_at_info_and_ignore_case():
    assert log_settings({}) == ("logfmt", "INFO")
    assert log_settings({LOG_FORMAT_ENV: " JSON ", LOG_LEVEL_ENV: "debug"}) == ("json", "DEBUG")


def test_the_trainer_refuses_a_bad_log_format_with_one_line():
    done = subprocess.run(
        [sys.executable, "-m", "examples.synthetic_trainer", "--listen", "127.0.0.1:0"],
        cwd=REPO_ROOT,
        env={"PATH": "/usr/bin:/bin", LOG_FORMAT_ENV: "yaml"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == "synthetic trainer: LOG_FORMAT='yaml': expected one of logfmt, json, text\n", shlex.quote(
        done.stderr
    )
    assert done.stdout == ""
