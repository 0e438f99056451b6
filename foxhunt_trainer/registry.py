"""Training-job metrics: the registry (`TrainingMetrics`), which owns the families and starts jobs.

One `TrainingMetrics` owns every training-job family of the catalog on its own registry (never
prometheus-client's global one, so two trainers, or two tests, cannot see each other's values).
`start_job` creates the job's label children at once: the counters are exposed at 0 from the first
scrape, so `increase()` in the alert rules sees the step from 0 to 1 when the first NaN or the first
failed checkpoint happens (a series that appears at 1 has no increase). GPU metrics are the
poller's job and are not here; the job only says which GPUs it holds (`ml_training_job_gpu_info`,
one series per GPU UUID, found by `gpus.discover` when the job starts), so rules can join the
poller's series to the job.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import CounterMetricFamily
from prometheus_client.metrics_core import Metric as ClientFamily
from prometheus_client.registry import Collector

from foxhunt_trainer import families, gpu_memory, gpus
from foxhunt_trainer.autolog.state import STATE as AUTOLOG
from foxhunt_trainer.contract import catalog
from foxhunt_trainer.contract.catalog import Metric
from foxhunt_trainer.job_metrics import JOB_STATUSES, JobMetrics, _check_uuids
from foxhunt_trainer.ranks import RankInfo
from foxhunt_trainer.reinforcement import RlFamilies
from foxhunt_trainer.search import SearchFamilies
from foxhunt_trainer.server import METRICS_PORT, MetricsServer, rank_metrics_port
from foxhunt_trainer.summary import progress_interval
from foxhunt_trainer.tallies import TALLIED, TallyCollector
from foxhunt_trainer.termination import HANDLER as SIGTERM_HANDLER


class TrainingMetrics:
    """Every catalog metric a training job produces, on one dedicated registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self._pairs: list[tuple[Metric, families.ClientMetric]] = []
        c, g, h = self._counter, self._gauge, self._histogram
        # A. progress
        self.loss = g(catalog.TRAINING_LOSS)
        self.validation_loss = g(catalog.TRAINING_VALIDATION_LOSS)
        self.current_epoch = g(catalog.TRAINING_CURRENT_EPOCH)
        self.progress_percent = g(catalog.TRAINING_PROGRESS_PERCENT)
        self.epochs_per_second = g(catalog.TRAINING_EPOCHS_PER_SECOND)
        self.iteration_seconds = h(catalog.TRAINING_ITERATION_SECONDS)
        self.convergence_rate = g(catalog.TRAINING_CONVERGENCE_RATE)
        # B. NaN and errors
        self.nan_count = c(catalog.TRAINING_NAN_COUNT)
        self.gradient_explosions = c(catalog.TRAINING_GRADIENT_EXPLOSION_TOTAL)
        self.failures = c(catalog.TRAINING_FAILURES_TOTAL)
        # D. checkpoints
        self.checkpoint_saves = c(catalog.CHECKPOINT_SAVES_TOTAL)
        self.checkpoint_failures = c(catalog.CHECKPOINT_SAVE_FAILURES_TOTAL)
        self.checkpoint_duration = h(catalog.CHECKPOINT_SAVE_DURATION_SECONDS)
        self.checkpoint_size = g(catalog.CHECKPOINT_SIZE_BYTES)
        self.checkpoint_last_good_step = g(catalog.CHECKPOINT_LAST_GOOD_STEP)
        self.checkpoint_last_good_time = g(catalog.CHECKPOINT_LAST_GOOD_TIMESTAMP_SECONDS)
        self.rollbacks = c(catalog.TRAINING_ROLLBACKS_TOTAL)
        self.rollback_budget = g(catalog.TRAINING_ROLLBACK_BUDGET)
        self.resumed = g(catalog.TRAINING_RESUMED)
        # E. model quality
        self.accuracy = g(catalog.MODEL_ACCURACY)
        self.f1_score = g(catalog.MODEL_F1_SCORE)
        self.precision = g(catalog.MODEL_PRECISION)
        self.recall = g(catalog.MODEL_RECALL)
        self.rmse = g(catalog.MODEL_RMSE)
        self.mae = g(catalog.MODEL_MAE)
        self.r2_score = g(catalog.MODEL_R2_SCORE)
        # F. resources
        self.memory_used = g(catalog.TRAINING_MEMORY_USED_BYTES)
        self.cpu_usage = g(catalog.TRAINING_CPU_USAGE_PERCENT)
        self.active_workers = g(catalog.TRAINING_ACTIVE_WORKERS)
        # G. data pipeline
        self.feature_errors = c(catalog.FEATURE_ENGINEERING_ERRORS_TOTAL)
        # H. lifecycle
        self.jobs_by_status = g(catalog.TRAINING_JOBS_BY_STATUS)
        self.job_duration = h(catalog.TRAINING_JOB_DURATION_SECONDS)
        self.job_start_time = g(catalog.TRAINING_JOB_START_TIMESTAMP_SECONDS)
        self.job_end_time = g(catalog.TRAINING_JOB_END_TIMESTAMP_SECONDS)
        self.job_gpu_info = self._info(catalog.TRAINING_JOB_GPU_INFO)
        # Steps and time accounting, per rank
        self.rank_info = self._info(catalog.TRAINING_RANK_INFO)
        # Steps, samples, tokens, model FLOPs, the last step's time and data loading are tallied per
        # job (`tallies`, read at scrape time): they change every step.
        self.checkpoint_written = c(catalog.CHECKPOINT_WRITTEN_BYTES_TOTAL)
        # Optimization (the PyTorch integration)
        self.step_loss = g(catalog.TRAINING_STEP_LOSS)
        self.learning_rate = g(catalog.TRAINING_LEARNING_RATE)
        self.gradient_norm = g(catalog.TRAINING_GRADIENT_NORM)
        self.hyperparameters = self._info(catalog.TRAINING_HYPERPARAMETERS_INFO)
        # Per-fold view
        self.fold_loss = g(catalog.TRAINING_FOLD_LOSS)
        self.fold_validation_loss = g(catalog.TRAINING_FOLD_VALIDATION_LOSS)
        self.fold_epoch = g(catalog.TRAINING_FOLD_EPOCH)
        self.fold_duration = g(catalog.TRAINING_FOLD_DURATION_SECONDS)
        self.folds_planned = g(catalog.TRAINING_FOLDS_PLANNED)
        self.folds_completed = c(catalog.TRAINING_FOLDS_COMPLETED_TOTAL)
        # Model-specific (reinforcement learning) and hyperparameter search: created at first use
        self.rl = RlFamilies(g, c)
        self.search = SearchFamilies(g, c)

        self.collector = families.CatalogCollector(self._pairs)
        self.registry.register(self.collector)
        self._lock = threading.Lock()
        self._jobs: dict[tuple[str, str], JobMetrics] = {}
        self.registry.register(PhaseCollector(self._started_jobs))
        self.registry.register(TallyCollector(lambda: [job.tally for job in self._started_jobs()]))
        self.registry.register(gpu_memory.GpuMemoryCollector(self._started_jobs))
        for status in JOB_STATUSES:
            self.jobs_by_status.labels(status=status).set(0)
        SIGTERM_HANDLER.watch_jobs(self)
        AUTOLOG.metrics_created()  # a program's own metrics: the auto-instrumentation steps aside

    @property
    def catalog_metrics(self) -> tuple[Metric, ...]:
        """Every catalog family this registry exposes."""
        return (
            *self.collector.catalog_metrics,
            catalog.TRAINING_PHASE_SECONDS_TOTAL,
            *TALLIED,
            catalog.TRAINING_GPU_MEMORY_RESERVED_BYTES,
        )

    def _counter(self, metric: Metric) -> Counter:
        client = families.counter(metric)
        self._pairs.append((metric, client))
        return client

    def _gauge(self, metric: Metric) -> Gauge:
        client = families.gauge(metric)
        self._pairs.append((metric, client))
        return client

    def _info(self, metric: Metric) -> Gauge:
        client = families.info(metric)
        self._pairs.append((metric, client))
        return client

    def _histogram(self, metric: Metric) -> Histogram:
        client = families.histogram(metric)
        self._pairs.append((metric, client))
        return client

    # --- jobs -------------------------------------------------------------------------------
    def start_job(
        self,
        model_type: str,
        job_id: str,
        *,
        folds_planned: int = 1,
        workers: int = 1,
        status: str = "running",
        gpu_uuids: Sequence[str] | None = None,
        rank: RankInfo | None = None,
    ) -> JobMetrics:
        """Register a job and create its label children; returns the handle to record with.

        `gpu_uuids`: the NVML UUIDs of the GPUs the job holds; None (the default) discovers them
        from inside the container (`gpus.discover`), an empty sequence says the job has none.
        `rank`: this process's place in a distributed job; None (the default) reads the launcher's
        environment (`RankInfo.from_env`: torchrun's RANK, LOCAL_RANK, WORLD_SIZE, GROUP_RANK).
        The job's time accounting (`job.phases`) starts now, in "startup".
        """
        where = RankInfo.from_env() if rank is None else rank
        interval = progress_interval()  # a bad FOXHUNT_PROGRESS_SECONDS stops the job before it starts
        held = gpus.discover().uuids if gpu_uuids is None else _check_uuids(gpu_uuids)
        with self._lock:
            key = (model_type, job_id)
            if key in self._jobs:
                raise ValueError(f"job {job_id!r} of model type {model_type!r} already started")
            job = JobMetrics(self, model_type, job_id, where)
            self._jobs[key] = job
        job.create_children(folds_planned=folds_planned, workers=workers)
        job.set_gpus(held)
        job.set_status(status)
        job.start_reporting(interval)
        return job

    def job(
        self,
        model_type: str,
        job_id: str,
        *,
        folds_planned: int = 1,
        workers: int = 1,
        status: str = "running",
        gpu_uuids: Sequence[str] | None = None,
    ) -> JobMetrics:
        """The job's handle, started here (with these arguments) if it was not started yet.

        The handle is a context manager: `with metrics.job("dqn", job_id) as job:` records an
        exception that leaves the block as the job's failure (by error type), finishes the job
        "failed" and re-raises; a clean exit finishes it "completed" unless it finished already.
        Ctrl-C, and any clean or SystemExit exit after the process got SIGTERM, finish it "stopped"
        (`foxhunt_trainer.termination`).
        """
        with self._lock:
            existing = self._jobs.get((model_type, job_id))
        if existing is not None:
            return existing
        return self.start_job(
            model_type, job_id, folds_planned=folds_planned, workers=workers, status=status, gpu_uuids=gpu_uuids
        )

    def _started_jobs(self) -> list[JobMetrics]:
        with self._lock:
            return list(self._jobs.values())

    def stop_running_jobs(self) -> int:
        """Finish every job not finished yet as "stopped" (the process is being stopped from
        outside: SIGTERM); returns how many."""
        stopped = 0
        for job in self._started_jobs():
            if not job.finished:
                job.finish("stopped")
                stopped += 1
        return stopped

    def _refresh_status_counts(self) -> None:
        with self._lock:
            statuses = [j.status for j in self._jobs.values()]
        for status in JOB_STATUSES:
            self.jobs_by_status.labels(status=status).set(statuses.count(status))

    # --- the per-job helpers, keyed by (model_type, job_id) ---------------------------------
    def record_training_iteration(
        self, model_type: str, job_id: str, epoch: int, train_loss: float, val_loss: float, duration_secs: float
    ) -> None:
        self.job(model_type, job_id).record_training_iteration(epoch, train_loss, val_loss, duration_secs)

    def record_nan_detection(self, model_type: str, job_id: str, tensor_type: str) -> None:
        self.job(model_type, job_id).record_nan_detection(tensor_type)

    def record_checkpoint_save(
        self,
        model_type: str,
        job_id: str,
        success: bool,
        duration: float,
        size: int,
        error_type: str | None = None,
    ) -> None:
        self.job(model_type, job_id).record_checkpoint_save(success, duration, size, error_type)

    def serve(self, port: int = METRICS_PORT, addr: str = "0.0.0.0") -> MetricsServer:
        """Serve this registry on `addr:port` (`/metrics`, `/healthz`) from a daemon thread."""
        return MetricsServer(self.registry, port, addr)

    def serve_rank(self, rank: RankInfo | None = None, addr: str = "0.0.0.0") -> MetricsServer:
        """Serve this process's metrics on its rank's port (`rank_metrics_port`: base port plus
        local rank; `rank` defaults to the launcher's environment)."""
        where = RankInfo.from_env() if rank is None else rank
        return MetricsServer(self.registry, rank_metrics_port(where.local_rank), addr)


class PhaseCollector(Collector):
    """`ml_training_phase_seconds_total` of every started job, read from its clock at scrape time
    (a long checkpoint or a hung collective shows while it lasts, not only once it ends)."""

    def __init__(self, jobs: Callable[[], Sequence[JobMetrics]]) -> None:
        self._jobs = jobs

    def describe(self) -> list[ClientFamily]:
        metric = catalog.TRAINING_PHASE_SECONDS_TOTAL
        return [ClientFamily(metric.name, metric.help, metric.type.value)]

    def collect(self) -> Iterator[ClientFamily]:
        metric = catalog.TRAINING_PHASE_SECONDS_TOTAL
        family = CounterMetricFamily(metric.name, metric.help, labels=metric.labels)
        for job in self._jobs():
            ranked = job.rank_labels
            values = [ranked[label] for label in catalog.RANK_JOB]
            for phase, seconds in job.phases.totals().items():
                family.add_metric([*values, phase], seconds)
        yield _catalog_named(family, metric)


def _catalog_named(family: CounterMetricFamily, metric: Metric) -> ClientFamily:
    """The family with its samples under the catalog's name (prometheus-client adds `_total`)."""
    named = ClientFamily(metric.name, metric.help, metric.type.value)
    named.samples = [s._replace(name=metric.name) for s in family.samples if not s.name.endswith("_created")]
    return named
