"""foxhunt-report without a server: its arguments, its one-line errors, the page it writes from a
job's data (every plot an inline SVG, nothing fetched, every value escaped) and the comparison."""

from __future__ import annotations

import argparse
import re

import pytest

from foxhunt_trainer import report
from foxhunt_trainer.contract import verdicts
from foxhunt_trainer.report import JobData, ReportError, comparison_lines, connect, render_html, summary_lines
from foxhunt_trainer.report_svg import Plot, Series, Span


def args(*argv: str) -> argparse.Namespace:
    return report.parser().parse_args(["job", *argv])


def job(job_id: str, verdict: verdicts.Verdict, data_wait: float, rate: float) -> JobData:
    t0 = 1_800_000_000.0
    line = [(t0 + i, float(i % 7)) for i in range(60)]
    plots = [
        Plot(name, name, unit, [Series("a <b>", line)])
        for name, unit in (
            ("loss", ""),
            ("phases", "ratio"),
            ("gpu_busy", "percent"),
            ("mfu", "ratio"),
            ("samples_per_second", "per_second"),
            ("rank_compute", "seconds"),
        )
    ]
    final = {
        "goodput": 1 - data_wait,
        "shares": {"compute": 1 - data_wait, "data_wait": data_wait},
        "verdict": verdict.name,
        "samples_per_second": rate,
        "steps": 600.0,
        "mfu": 0.25,
        "gpu_busy": 90.0,
    }
    return JobData(
        job_id, "mlp", t0, t0 + 60, True, ["0", "1"], plots, [Span("TrainingInputBound", t0 + 5, t0 + 40)], final
    )


def test_credentials_over_plain_http_are_refused() -> None:
    with pytest.raises(ReportError, match="credentials over plain HTTP are refused") as error:
        connect(args("--url", "http://prom:9090"), {report.TOKEN_ENV: "secret"})
    assert error.value.status == report.EXIT_USAGE


@pytest.mark.parametrize("url", ["prom:9090", "ftp://prom", "https://"])
def test_a_url_that_is_not_http_is_refused(url) -> None:
    with pytest.raises(ReportError, match="expected http://HOST:PORT or https://HOST:PORT"):
        connect(args("--url", url), {})


def test_basic_auth_needs_a_password_file_and_reads_it(tmp_path) -> None:
    with pytest.raises(ReportError, match="basic auth needs a password file"):
        connect(args("--url", "https://prom:9090", "--username", "me"), {})
    with pytest.raises(ReportError, match="cannot read the password file"):
        connect(args("--url", "https://prom:9090", "--username", "me", "--password-file", str(tmp_path / "no")), {})
    (tmp_path / "pw").write_text("s3cret\n")
    prom = connect(args("--url", "https://prom:9090", "--username", "me", "--password-file", str(tmp_path / "pw")), {})
    assert prom.headers["Authorization"] == "Basic bWU6czNjcmV0"  # me:s3cret
    assert prom.context is not None


def test_a_token_file_from_the_environment_becomes_the_bearer_header(tmp_path) -> None:
    (tmp_path / "token").write_text("abc\n")
    prom = connect(args(), {report.URL_ENV: "https://prom:9090", report.TOKEN_FILE_ENV: str(tmp_path / "token")})
    assert prom.headers["Authorization"] == "Bearer abc"


def test_arguments_errors_are_one_line_with_exit_1(capsys) -> None:
    assert report.main(["a", "b", "c", "--url", "http://x:1"], {}) == report.EXIT_USAGE
    assert capsys.readouterr().err == "foxhunt-report: give one job, or two to compare\n"
    assert report.main(["a", "--lookback", "forever", "--url", "http://x:1"], {}) == report.EXIT_USAGE
    assert "expected a PromQL duration" in capsys.readouterr().err


def test_the_page_has_every_plot_as_inline_svg_fetches_nothing_and_escapes_values() -> None:
    text = render_html(
        [job("run-a", verdicts.INPUT_BOUND, 0.6, 40.0), job("run-b", verdicts.COMPUTE_SATURATED, 0.05, 300)]
    )
    assert "<script" not in text and "a <b>" not in text and "a &lt;b&gt;" in text
    assert "default-src 'none'" in text
    assert set(re.findall(r"\w+://[^\s\"'<>]+", text)) == {"http://www.w3.org/2000/svg"}
    plots = re.findall(r'data-plot="(\w+)" data-points="(\d+)"', text)
    names = ["loss", "phases", "gpu_busy", "mfu", "samples_per_second", "rank_compute", "alerts"]
    assert [name for name, _ in plots] == names * 2
    assert all(int(points) > 0 for _, points in plots)
    assert text.count("<polyline") == 12 and text.count('<rect class="span"') == 2


def test_a_plot_without_data_says_why() -> None:
    empty = job("run-a", verdicts.INPUT_BOUND, 0.6, 40.0)
    empty.plots[3] = Plot("mfu", "MFU", "ratio", [], "no MFU (a GPU whose peak the table does not know)")
    text = render_html([empty])
    assert 'data-plot="mfu" data-points="0"' in text and "a GPU whose peak the table does not know" in text


def test_the_comparison_names_the_input_bound_run_and_the_faster_one() -> None:
    lines = comparison_lines(
        [job("run-a", verdicts.INPUT_BOUND, 0.6, 40.0), job("run-b", verdicts.COMPUTE_SATURATED, 0.05, 300)]
    )
    assert lines[0] == "input-bound: run-a (data wait 60.0% of its time); run-b was compute-saturated"
    assert lines[1] == "run-b trained 7.5x the samples per second of run-a"
    neither = comparison_lines([job("x", verdicts.COMPUTE_SATURATED, 0.0, 1), job("y", verdicts.UNDERUTILIZED, 0.1, 1)])
    assert neither[0] == "neither run was input-bound: x was compute-saturated; y was underutilized"


def test_the_terminal_summary_has_the_verdict_advice_and_alerts() -> None:
    lines = summary_lines(job("run-a", verdicts.INPUT_BOUND, 0.6, 40.0))
    assert lines[0] == "job run-a (mlp), 2 ranks: 1m00s, finished"
    assert lines[1] == "  goodput 40.0%, badput 60.0% (data_wait 60.0%)"
    assert lines[2] == "  verdict: input-bound: the job waits for data"
    assert lines[3] == f"  to change: {verdicts.INPUT_BOUND.change}"
    assert lines[-1].startswith("  alerts fired: TrainingInputBound (")


def test_an_alert_that_fired_twice_is_one_entry_with_its_count() -> None:
    twice = job("run-a", verdicts.INPUT_BOUND, 0.6, 40.0)
    twice.alerts.append(Span("TrainingInputBound", twice.start + 45, twice.start + 50))
    fired = summary_lines(twice)[-1]
    assert fired.count("TrainingInputBound") == 1 and fired.endswith(", 2 times)")
