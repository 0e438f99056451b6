"""`torch.distributed`: collective timing for DistributedDataParallel and direct collectives.

    from observability.instrument.integrations.torch_distributed import instrument_rank

    job = metrics.start_job("llm", job_id)          # rank, local rank, world size from torchrun
    server = metrics.serve_rank()                   # this rank's port: base port + LOCAL_RANK
    timer = instrument_rank(job)                    # placement (node, GPU) and collective counts
    ddp = DistributedDataParallel(model)
    timer.register_ddp(ddp)                         # the gradient all-reduce, timed per bucket
    timer.all_reduce(loss_sum)                      # a direct collective, timed

What lands where (`observability.instrument.collectives` has the metrics):
- every collective: its operation, message bytes (NCCL's size: the bucket for DDP) and busy time;
- the exposed communication time, in the job's `collective` phase: for DDP, from the moment the
  step's last gradient bucket is handed over (backward has no compute left to overlap) until every
  bucket of the step is reduced; for a blocking collective, the call; for an async one, its
  `wait()`. The compute before it stays in the phase the trainer is in (`compute` around the step).

DDP's own broadcasts (parameters at construction, buffers before forward with
`broadcast_buffers=True`) do not pass through the communication hook and are not counted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import GradBucket

from observability.instrument.collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    BROADCAST,
    REDUCE_SCATTER,
    CollectiveCounts,
    track_rank,
)
from observability.instrument.phases import COLLECTIVE
from observability.instrument.training import JobMetrics


def message_bytes(tensor: torch.Tensor) -> int:
    return int(tensor.numel() * tensor.element_size())


class CollectiveTimer:
    """Times one rank's collectives into `counts` and the job's `collective` phase; thread-safe
    (DDP completes its buckets on the process group's threads)."""

    def __init__(self, job: JobMetrics, counts: CollectiveCounts) -> None:
        self.job = job
        self.counts = counts
        self._lock = threading.Lock()
        # DDP: buckets of the current step in flight, and the phase to go back to once the step's
        # last bucket is reduced (set while the rank only waits on them).
        self._ddp_in_flight = 0
        self._ddp_resume: str | None = None

    # --- DistributedDataParallel ----------------------------------------------------------------
    def register_ddp(self, model: torch.nn.parallel.DistributedDataParallel, group: Any = None) -> None:
        """Time `model`'s gradient all-reduce with a communication hook that does what DDP does
        by default: sum each bucket over the group and divide it by the group's size."""
        # DDP compares the hook's annotations with its own classes; this module's are strings
        # (postponed evaluation), so it gets an unannotated hook with DDP's parameter names.
        model.register_comm_hook(state=group, hook=lambda state, bucket: self.ddp_allreduce_hook(state, bucket))

    def ddp_allreduce_hook(self, group: Any, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
        """The DDP communication hook `register_ddp` registers."""
        process_group = group if group is not None else dist.group.WORLD
        tensor = bucket.buffer()
        nbytes = message_bytes(tensor)
        tensor.div_(dist.get_world_size(process_group))
        with self._lock:
            self._ddp_in_flight += 1
            expose = bucket.is_last() and self._ddp_resume is None
        if expose:
            # backward has handed over its last gradients: from here the rank only waits
            resume = self.job.phases.enter(COLLECTIVE)
            with self._lock:
                self._ddp_resume = resume
        self.counts.launched(ALL_REDUCE)
        try:
            future = dist.all_reduce(tensor, group=process_group, async_op=True).get_future()
        except BaseException:
            self._bucket_done(nbytes)
            raise

        def reduced(done: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
            try:
                return done.value()[0]
            finally:
                self._bucket_done(nbytes)

        chained: torch.futures.Future[torch.Tensor] = future.then(reduced)
        return chained

    def _bucket_done(self, nbytes: int) -> None:
        self.counts.completed(ALL_REDUCE, nbytes)
        with self._lock:
            self._ddp_in_flight -= 1
            resume = self._ddp_resume if self._ddp_in_flight == 0 else None
            if resume is not None:
                self._ddp_resume = None
        if resume is not None:
            self.job.phases.enter(resume)

    # --- direct collectives ---------------------------------------------------------------------
    @contextmanager
    def timed(self, kind: str, nbytes: int) -> Iterator[None]:
        """Time a blocking collective of `kind` (collectives.COLLECTIVES) moving `nbytes`, for
        calls without a wrapper here: the block counts as exposed communication."""
        with self.job.phase(COLLECTIVE):
            self.counts.launched(kind)
            try:
                yield
            finally:
                self.counts.completed(kind, nbytes)

    def _run(self, kind: str, nbytes: int, call: Callable[[], Any], async_op: bool) -> Any:
        if not async_op:
            with self.timed(kind, nbytes):
                return call()
        self.counts.launched(kind)
        try:
            work = call()
        except BaseException:
            self.counts.completed(kind, nbytes)
            raise
        return TimedWork(work, self, kind, nbytes)

    def all_reduce(
        self, tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM, group: Any = None, async_op: bool = False
    ) -> Any:
        """`dist.all_reduce`, timed (size: the tensor)."""
        return self._run(
            ALL_REDUCE, message_bytes(tensor),
            lambda: dist.all_reduce(tensor, op=op, group=group, async_op=async_op), async_op,
        )  # fmt: skip

    def broadcast(self, tensor: torch.Tensor, src: int, group: Any = None, async_op: bool = False) -> Any:
        """`dist.broadcast`, timed (size: the tensor)."""
        return self._run(
            BROADCAST, message_bytes(tensor), lambda: dist.broadcast(tensor, src, group=group, async_op=async_op),
            async_op,
        )  # fmt: skip

    def all_gather_into_tensor(
        self, output: torch.Tensor, input: torch.Tensor, group: Any = None, async_op: bool = False
    ) -> Any:
        """`dist.all_gather_into_tensor`, timed (size: the gathered output)."""
        return self._run(
            ALL_GATHER, message_bytes(output),
            lambda: dist.all_gather_into_tensor(output, input, group=group, async_op=async_op), async_op,
        )  # fmt: skip

    def reduce_scatter_tensor(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        op: Any = dist.ReduceOp.SUM,
        group: Any = None,
        async_op: bool = False,
    ) -> Any:
        """`dist.reduce_scatter_tensor`, timed (size: the input)."""
        return self._run(
            REDUCE_SCATTER, message_bytes(input),
            lambda: dist.reduce_scatter_tensor(output, input, op=op, group=group, async_op=async_op), async_op,
        )  # fmt: skip


class TimedWork:
    """An async collective's `Work`: counted as completed when it finishes, its `wait()` counted
    as exposed communication."""

    def __init__(self, work: Any, timer: CollectiveTimer, kind: str, nbytes: int) -> None:
        self._work = work
        self._timer = timer
        self._kind, self._nbytes = kind, nbytes
        self._lock = threading.Lock()
        self._done = False
        work.get_future().then(lambda _: self._finish())

    def _finish(self) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
        self._timer.counts.completed(self._kind, self._nbytes)

    def wait(self, timeout: Any = None) -> bool:
        with self._timer.job.phase(COLLECTIVE):
            result = self._work.wait() if timeout is None else self._work.wait(timeout)
        self._finish()
        return bool(result)

    def is_completed(self) -> bool:
        return bool(self._work.is_completed())

    def get_future(self) -> Any:
        return self._work.get_future()


def instrument_rank(
    job: JobMetrics,
    *,
    node: str | None = None,
    gpu_uuids: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> CollectiveTimer:
    """Publish where this rank runs (`collectives.track_rank`) and return its collective timer."""
    return CollectiveTimer(job, track_rank(job, node=node, gpu_uuids=gpu_uuids, environ=environ))
