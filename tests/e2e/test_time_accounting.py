"""Time accounting and ranks: every second of a job in one phase, per-rank steps, the launcher's env."""

from __future__ import annotations

import sys
import threading
import time
from types import SimpleNamespace
from typing import cast

import pytest

from foxhunt_trainer import TrainingMetrics
from foxhunt_trainer.contract import catalog
from foxhunt_trainer.integrations.phase_blocks import PhaseBlocks
from foxhunt_trainer.job_metrics import JobMetrics
from foxhunt_trainer.phases import MAX_PENDING_SWITCHES, PHASES, PhaseClock
from foxhunt_trainer.ranks import RankInfo

from .test_instrumentation import value


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_each_second_lands_in_the_phase_it_was_spent_in_and_blocks_nest():
    t = FakeClock()
    clock = PhaseClock(clock=t)
    t.advance(3)  # start-up
    clock.set_base("idle")
    with clock.phase("data_wait"):
        t.advance(2)
    with clock.phase("compute"):
        t.advance(5)
        with clock.phase("checkpoint"):
            t.advance(4)
        assert clock.current == "compute"
        t.advance(1)
    t.advance(0.5)  # between steps
    totals = clock.totals()
    assert totals == {
        **dict.fromkeys(PHASES, 0.0),
        "startup": 3,
        "data_wait": 2,
        "compute": 6,
        "checkpoint": 4,
        "idle": 0.5,
    }
    assert sum(totals.values()) == pytest.approx(clock.wall()) == 15.5


def test_the_running_phase_counts_while_it_lasts_and_a_stopped_clock_freezes():
    t = FakeClock()
    clock = PhaseClock(clock=t)
    clock.enter("collective")
    t.advance(7)
    assert clock.totals()["collective"] == 7  # a hung collective shows before it ends
    clock.stop()
    t.advance(100)
    clock.enter("compute")
    assert clock.totals()["collective"] == 7 and clock.wall() == 7 and clock.stopped


def test_substituted_time_counts_as_lost_work_and_totals_never_shrink():
    t = FakeClock()
    clock = PhaseClock("idle", clock=t)
    with clock.phase("compute"):
        t.advance(4)
    clock.substitute("compute", "lost_work")
    with clock.phase("compute"):
        t.advance(3)
    clock.substitute("compute", None)
    with clock.phase("compute"):
        t.advance(2)
    assert clock.totals()["compute"] == 6 and clock.totals()["lost_work"] == 3


def test_a_switched_block_counts_each_stretch_in_its_phase_and_returns_the_clock_reading():
    t = FakeClock()
    clock = PhaseClock("idle", clock=t)
    block = clock.block("data_wait")
    assert block.opened_at == 100
    t.advance(2)
    assert block.switch("compute") == 102  # the reading the loader times its wait with
    t.advance(5)
    with clock.phase("checkpoint"):  # a block opened inside keeps counting on top
        t.advance(1)
        block.switch("data_wait")
        t.advance(1)
        assert clock.current == "checkpoint"
    t.advance(3)  # the switched block's phase resumes
    clock.substitute("compute", "lost_work")
    block.switch("compute")
    t.advance(4)
    block.close()
    block.close()  # idempotent
    t.advance(0.5)
    assert clock.current == "idle"
    totals = clock.totals()
    assert totals == {
        **dict.fromkeys(PHASES, 0.0),
        "data_wait": 5,
        "compute": 5,
        "checkpoint": 2,
        "lost_work": 4,
        "idle": 0.5,
    }
    assert sum(totals.values()) == pytest.approx(clock.wall())
    with pytest.raises(ValueError, match="the phase block is closed"):
        block.switch("compute")
    with pytest.raises(ValueError, match="unknown training phase 'waiting'"):
        clock.block("waiting")


def test_a_block_switch_queued_after_a_later_reading_counts_from_that_reading():
    # A block switches without the lock: between its clock reading and its queued switch, a
    # scrape can read the totals at a later time. The switch then counts from the scrape's
    # reading, so the total the scrape saw never shrinks.
    t = FakeClock()
    seen: list[dict[str, float]] = []
    scrape_during_next_reading = False

    def time_source() -> float:
        nonlocal scrape_during_next_reading
        if not scrape_during_next_reading:
            return t.now
        scrape_during_next_reading = False
        reading = t.now
        t.advance(2)  # the switching thread is preempted; a scrape reads 2 s later
        seen.append(clock.totals())
        return reading

    clock = PhaseClock("idle", clock=time_source)
    block = clock.block("data_wait")
    t.advance(3)
    scrape_during_next_reading = True
    assert block.switch("compute") == 103  # its own reading, from before the scrape
    assert seen[0]["data_wait"] == 5
    t.advance(1)
    after = clock.totals()
    assert after["data_wait"] == 5  # not 3: the switch counts from the scrape's reading
    assert after["compute"] == 1
    assert sum(after.values()) == pytest.approx(clock.wall())


def test_a_block_that_nobody_reads_applies_its_switches_itself():
    t = FakeClock()
    clock = PhaseClock("idle", clock=t)
    block = clock.block("data_wait")
    for _ in range(10 * MAX_PENDING_SWITCHES):
        t.advance(1)
        block.switch("compute")
        t.advance(2)
        block.switch("data_wait")
        assert len(clock._pending) < MAX_PENDING_SWITCHES  # queued switches stay bounded
    totals = clock.totals()
    assert totals["data_wait"] == 10 * MAX_PENDING_SWITCHES  # 1 s before each switch to compute
    assert totals["compute"] == 20 * MAX_PENDING_SWITCHES


def test_a_frameworks_phase_blocks_switch_in_place_and_close_back_to_the_jobs_phase():
    # What the Lightning and SB3 callbacks open from their start and end hooks.
    t = FakeClock()
    clock = PhaseClock("idle", clock=t)
    blocks = PhaseBlocks(cast(JobMetrics, SimpleNamespace(phases=clock)))
    blocks.switch("data_wait")
    t.advance(2)
    blocks.switch("compute")
    t.advance(3)
    blocks.switch("compute")  # the phase it is in: nothing changes
    t.advance(1)
    with clock.phase("checkpoint"):  # a block the job opens inside keeps counting on top
        blocks.switch("data_wait")
        t.advance(1)
    t.advance(4)  # back in the switched phase
    blocks.close()
    blocks.close()  # idempotent
    t.advance(0.5)
    assert clock.current == "idle"
    assert blocks.current is None
    assert clock.totals() == {
        **dict.fromkeys(PHASES, 0.0), "data_wait": 6, "compute": 4, "checkpoint": 1, "idle": 0.5
    }  # fmt: skip
    blocks.switch("evaluation")  # a new block after the close
    t.advance(2)
    assert clock.totals()["evaluation"] == 2


def test_unknown_phase_is_refused_with_the_known_ones():
    clock = PhaseClock()
    with pytest.raises(ValueError, match=r"unknown training phase 'training'.*compute"):
        clock.enter("training")


def test_totals_stay_consistent_under_concurrent_switches():
    clock = PhaseClock()
    stop = threading.Event()

    def switch() -> None:
        while not stop.is_set():
            with clock.phase("compute"):
                pass

    worker = threading.Thread(target=switch)
    worker.start()
    try:
        for _ in range(200):
            totals, wall = sum(clock.totals().values()), clock.wall()
            assert totals == pytest.approx(wall, abs=0.05)
    finally:
        stop.set()
        worker.join()


class ProcessGroup:
    """The few torch.distributed calls `RankInfo.of_process` makes, for a group of `world_size`."""

    def __init__(self, rank: int | None, world_size: int = 4) -> None:
        self.rank, self.world_size = rank, world_size

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return self.rank is not None

    def get_rank(self) -> int | None:
        return self.rank

    def get_world_size(self) -> int:
        return self.world_size


@pytest.mark.parametrize(
    ("group", "env", "expected"),
    [
        (ProcessGroup(2), {}, RankInfo(2, 2, 4, 0)),  # spawned ranks: the group says, one node
        (ProcessGroup(2), {"LOCAL_RANK": "0"}, RankInfo(2, 0, 4, 0)),
        (ProcessGroup(2), {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}, RankInfo(3, 1, 4, 0)),  # launcher
        (ProcessGroup(None), {}, RankInfo(0, 0, 1, 0)),  # torch imported, no group joined
        (None, {}, RankInfo(0, 0, 1, 0)),  # torch.distributed never imported
    ],
)
def test_a_process_group_made_without_a_launcher_gives_the_rank(monkeypatch, group, env, expected):
    if group is None:
        monkeypatch.delitem(sys.modules, "torch.distributed", raising=False)
    else:
        monkeypatch.setitem(sys.modules, "torch.distributed", group)
    assert RankInfo.of_process(env) == expected


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, RankInfo(0, 0, 1, 0)),
        ({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "GROUP_RANK": "1"}, RankInfo(3, 1, 4, 1)),
        ({"RANK": "2", "LOCAL_RANK": "0", "WORLD_SIZE": "4", "NODE_RANK": "1"}, RankInfo(2, 0, 4, 1)),
    ],
)
def test_rank_comes_from_the_launchers_environment(env, expected):
    assert RankInfo.from_env(env) == expected


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "x"}, r"RANK='x': expected a whole number"),
        ({"RANK": "4", "WORLD_SIZE": "4"}, r"inconsistent .*rank must be 0 to world_size-1 \(3\), got 4"),
        ({"WORLD_SIZE": "0"}, r"world_size must be 1 to"),
    ],
)
def test_an_inconsistent_launcher_environment_is_named(env, message):
    with pytest.raises(ValueError, match=message):
        RankInfo.from_env(env)


def test_a_job_exports_per_rank_steps_phases_and_its_place_in_the_world():
    metrics = TrainingMetrics()
    job = metrics.start_job(
        "mlp", "job-r", gpu_uuids=[], rank=RankInfo(rank=2, local_rank=0, world_size=4, node_rank=1)
    )
    ranked = {"model_type": "mlp", "job_id": "job-r", "rank": "2"}
    assert value(metrics, catalog.TRAINING_STEPS_TOTAL.name, **ranked) == 0
    assert job.phases.current == "startup"
    before = time.time()
    with job.phase("compute"):
        time.sleep(0.01)
    assert job.record_step(samples=64, tokens=1000) == 1
    assert job.phases.current == "idle"  # the first step ended start-up
    assert value(metrics, catalog.TRAINING_STEPS_TOTAL.name, **ranked) == 1
    assert value(metrics, catalog.TRAINING_SAMPLES_TOTAL.name, **ranked) == 64
    assert value(metrics, catalog.TRAINING_TOKENS_TOTAL.name, **ranked) == 1000
    assert value(metrics, catalog.TRAINING_LAST_STEP_TIMESTAMP_SECONDS.name, **ranked) >= before
    info = {**ranked, "local_rank": "0", "node_rank": "1", "world_size": "4"}
    assert value(metrics, catalog.TRAINING_RANK_INFO.name, **info) == 1
    job.finish("completed")
    exported = {p: value(metrics, catalog.TRAINING_PHASE_SECONDS_TOTAL.name, **ranked, phase=p) for p in PHASES}
    assert exported["compute"] >= 0.01
    assert sum(exported.values()) == pytest.approx(job.phases.wall())


def test_redone_steps_count_as_lost_work_until_the_step_reached_before():
    metrics = TrainingMetrics()
    job = metrics.start_job("mlp", "job-l", gpu_uuids=[], rank=RankInfo())
    for _ in range(5):
        with job.phase("compute"):
            pass
        job.record_step()
    job.rewind_steps(2)  # rolled back to the checkpoint of step 2
    job.mark_lost_work(until_step=5)
    for expected in ("lost_work", "lost_work", "lost_work", "compute"):  # steps 3-5 redone, 6 is new
        with job.phase("compute"):
            assert job.phases.current == expected
        job.record_step()
    with pytest.raises(ValueError, match="at least 0"):
        job.rewind_steps(-1)
