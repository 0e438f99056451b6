"""`python -m examples.synthetic_trainer`: run the synthetic trainer with its metrics on :9094."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from types import FrameType

from examples.synthetic_trainer.faults import FaultPlan
from examples.synthetic_trainer.job import SyntheticTrainer, TrainerSettings
from foxhunt_trainer import METRICS_PORT, TrainingMetrics, init_observability, log_context

log = logging.getLogger("examples.synthetic_trainer")


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host or "0.0.0.0", int(port)


def _epochs(text: str) -> frozenset[int]:
    return frozenset(int(x) for x in text.split(",") if x)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m examples.synthetic_trainer", description=__doc__)
    p.add_argument("--listen", type=_host_port, default=("0.0.0.0", METRICS_PORT), help="metrics HOST:PORT")
    p.add_argument("--model-type", default="dqn", help="model_type label (dqn, ppo, ...)")
    p.add_argument("--job-id", default="", help="job_id label (default: a new UUID)")
    p.add_argument("--folds", type=int, default=3)
    p.add_argument("--epochs-per-fold", type=int, default=10)
    p.add_argument("--epoch-seconds", type=float, default=0.5, help="simulated wall time of one epoch")
    p.add_argument("--checkpoint-every", type=int, default=2, help="epochs between checkpoint saves")
    p.add_argument("--checkpoint-dir", type=Path, default=None, help="default: a temporary directory")
    p.add_argument("--nan-at-epochs", type=_epochs, default=frozenset(), help="e.g. 5,9 (job-wide epochs from 1)")
    p.add_argument("--nan-tensor", default="loss", choices=("loss", "gradient", "activation"))
    p.add_argument("--stop-on-nan", action="store_true", help="fail the job at the first NaN")
    p.add_argument("--fail-checkpoint-at-epochs", type=_epochs, default=frozenset())
    p.add_argument("--slowdown-from-epoch", type=int, default=None)
    p.add_argument("--slowdown-factor", type=float, default=1.0, help="epoch time multiplier from then on")
    p.add_argument("--linger", type=float, default=0.0, help="seconds to serve metrics after the job (-1: forever)")
    p.add_argument("--seed", type=int, default=0)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        init_observability("synthetic-trainer")
    except ValueError as error:  # LOG_FORMAT or LOG_LEVEL
        print(f"synthetic trainer: {error}", file=sys.stderr)
        return 2
    faults = FaultPlan(
        nan_epochs=args.nan_at_epochs,
        nan_tensor=args.nan_tensor,
        checkpoint_failure_epochs=args.fail_checkpoint_at_epochs,
        slowdown_from_epoch=args.slowdown_from_epoch,
        slowdown_factor=args.slowdown_factor,
    )
    faults.install_signal_handlers()
    stop = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    metrics = TrainingMetrics()
    host, port = args.listen
    job_id = args.job_id or str(uuid.uuid4())
    with tempfile.TemporaryDirectory(prefix="synthetic-trainer-") as scratch:
        settings = TrainerSettings(
            job_id=job_id,
            checkpoint_dir=args.checkpoint_dir or Path(scratch),
            model_type=args.model_type,
            folds=args.folds,
            epochs_per_fold=args.epochs_per_fold,
            epoch_seconds=args.epoch_seconds,
            checkpoint_every=args.checkpoint_every,
            stop_on_nan=args.stop_on_nan,
            seed=args.seed,
        )
        settings.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        job = metrics.start_job(settings.model_type, job_id, folds_planned=settings.folds)
        server = metrics.serve(port, host)  # after the job started: its first scrape has the job's series
        url = f"http://{host}:{server.port}/metrics"
        with log_context(job_id=job_id, model_type=settings.model_type):
            log.info("serving metrics", extra={"url": url})
            status = SyntheticTrainer(settings, faults, job, stop).run()
            job.finish(status)
            log.info("job finished", extra={"status": status})
        if args.linger:
            stop.wait(None if args.linger < 0 else args.linger)
    server.close()
    return 0 if status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
