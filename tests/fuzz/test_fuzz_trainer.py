"""Fuzzed calls of the trainer library's public API: hostile label values (quotes, backslashes,
newlines, unicode, 10,000 characters), NaN, infinities, negative and huge numbers. Each call is
recorded or refused with a ValueError, TypeError or OverflowError (an integer beyond any float)
that says what is wrong (never another exception), and both exposition formats of the registry stay parseable by prometheus-client's
strict parsers. The case count is in the test name."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from foxhunt_trainer import TrainingMetrics
from foxhunt_trainer.contract.exposition import render_openmetrics, render_text
from foxhunt_trainer.ranks import RankInfo

labels = st.one_of(
    st.text(max_size=40),
    st.sampled_from(['a"b', "a\\b", "line\nbreak", "}{,=", "", " ", "\x00", "é😀", "x" * 10_000, "# EOF"]),
)
numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([float("nan"), float("inf"), -float("inf"), -1, 0, 1e308, -1e308, 10**400]),
)
counts = st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.sampled_from([-1, 0, 2**63]))

CALLS: dict[str, Callable[[Any, Any, Any, Any], Any]] = {
    "record_training_iteration": lambda j, n, m, c: j.record_training_iteration(c, n, m, n),
    "set_progress": lambda j, n, m, c: j.set_progress(n),
    "record_step": lambda j, n, m, c: j.record_step(samples=c, tokens=c),
    "record_data_load": lambda j, n, m, c: j.record_data_load(n, c),
    "record_batches": lambda j, n, m, c: j.record_batches(c),
    "record_checkpoint_save": lambda j, n, m, c: j.record_checkpoint_save(True, n, c),
    "record_fold": lambda j, n, m, c: j.record_fold(c, n, m, c, n),
    "set_resource_usage": lambda j, n, m, c: j.set_resource_usage(n, m),
    "set_active_workers": lambda j, n, m, c: j.set_active_workers(c),
    "check_finite": lambda j, n, m, c: j.check_finite(n),
    "record_nan_detection": lambda j, n, m, c: j.record_nan_detection(),
    "record_failure": lambda j, n, m, c: j.record_failure(str(m)),
    "set_status": lambda j, n, m, c: j.set_status(str(n)),
    "mark_lost_work": lambda j, n, m, c: j.mark_lost_work(c),
    "rewind_steps": lambda j, n, m, c: j.rewind_steps(c),
}
job_ids = itertools.count()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(model_type='a"b\\c\nd', job_id="x" * 10_000, calls=[("record_training_iteration", float("nan"), 1e308, -1)])
@given(
    model_type=labels,
    job_id=labels,
    calls=st.lists(st.tuples(st.sampled_from(sorted(CALLS)), numbers, numbers, counts), max_size=8),
)
def test_60_hostile_call_sequences_are_recorded_or_refused_and_the_page_parses(
    model_type: str, job_id: str, calls: list[tuple[str, Any, Any, int]]
) -> None:
    metrics = TrainingMetrics()
    try:
        job = metrics.start_job(model_type, f"{job_id}-{next(job_ids)}", gpu_uuids=(), rank=RankInfo())
    except (ValueError, TypeError) as err:
        assert str(err)
        return
    for name, number, other, count in calls:
        try:
            CALLS[name](job, number, other, count)
        except (ValueError, TypeError, OverflowError) as err:
            assert str(err), name
    try:
        job.finish("completed")
    except (ValueError, TypeError) as err:
        assert str(err)
    text = render_text(metrics.registry).decode()
    assert list(parse_text(text))
    openmetrics = render_openmetrics(metrics.registry).decode()
    assert list(parse_openmetrics(openmetrics))  # type: ignore[no-untyped-call]
