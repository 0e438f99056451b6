"""`torch.distributed`: collective timing for DistributedDataParallel and direct collectives.

    from foxhunt_trainer.integrations.torch_distributed import instrument_rank

    job = metrics.start_job("llm", job_id)          # rank, local rank, world size from torchrun
    server = metrics.serve_rank()                   # this rank's port: base port + LOCAL_RANK
    timer = instrument_rank(job)                    # placement (node, GPU) and collective counts
    ddp = DistributedDataParallel(model)
    timer.register_ddp(ddp)                         # the gradient all-reduce, timed per step
    timer.all_reduce(loss_sum)                      # a direct collective, timed

What lands where (`foxhunt_trainer.collectives` has the metrics):
- every collective: its operation, message bytes (NCCL's size: the bucket for DDP) and busy time;
- the exposed communication time, in the job's `collective` phase: for DDP, from the end of the
  backward pass's computation until DDP has every bucket reduced (the rank only waits); for a
  blocking collective, the call; for an async one, its `wait()`. The compute before it stays in
  the phase the trainer is in (`compute` around the step).

Two ways to time DDP (`register_ddp(ddp, per_bucket=...)`):
- per step (the default): DDP keeps its built-in all-reduce in C++. Per optimizer step the
  timing adds a forward hook on the DDP module, a gradient hook on its output and two autograd
  engine callbacks around DDP's own end-of-backward callback (the exposed wait, live, so a rank
  blocked in the all-reduce shows in `collective` while it waits), and reads DDP's own runtime
  statistics (`_get_ddp_logging_data`; `register_ddp` sets DDP's sample rate to `sample_every`,
  1 by default: every step) for the buckets reduced and the span from the first bucket's launch
  to the end of the reduction, the busy time. That span is at least the time a bucket was in
  flight: the bandwidth from it is a lower bound, exact when communication is the bottleneck
  (buckets queue back to back), which is when the bandwidth matters. The last step's figures are
  read when the job finishes. On a GPU, a step DDP times synchronizes the host with that step's
  communication-end event at the start of the next forward pass (free when the trainer reads its
  loss every step; it keeps a host that queues work far ahead within about one step):
  `sample_every=N` limits that to one step in N, each timed step standing for the untimed ones
  after it (buckets and bytes stay exact, the busy time is the timed step's).
- per bucket (`per_bucket=True`): a Python communication hook that does what DDP does (sum each
  bucket, divide by the group's size) and times every bucket: the exact busy time, at the cost of
  PyTorch's Python hook path (a Python call and a future callback per bucket; BENCHMARKS.md).

Gradient accumulation (`with ddp.no_sync():` around forward and backward) reduces nothing and is
not timed; the step that synchronizes is, with all its buckets. A forward pass without a backward
after it reduces nothing and counts nothing. Unused parameters
(`find_unused_parameters=True`): DDP still reduces every bucket, and so they are counted; its
extra all-reduce of the used-parameter map is not. A module whose parameters span several GPUs
gives DDP no timer: its steps get the exposed wait but no buckets, bytes or busy time. DDP's own
broadcasts (parameters at construction, buffers before forward with `broadcast_buffers=True`) are
not counted in either way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import GradBucket
from torch.utils.hooks import RemovableHandle

from foxhunt_trainer.collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    BROADCAST,
    REDUCE_SCATTER,
    CollectiveCounts,
    track_rank,
)
from foxhunt_trainer.phases import COLLECTIVE
from foxhunt_trainer.training import JobMetrics


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
    def register_ddp(
        self,
        model: torch.nn.parallel.DistributedDataParallel,
        group: Any = None,
        *,
        per_bucket: bool = False,
        sample_every: int = 1,
    ) -> DdpStepTiming | None:
        """Time `model`'s gradient all-reduce: per step, with DDP's built-in all-reduce (the
        default; returns the timing; DDP times one step in `sample_every`), or per bucket
        (`per_bucket=True`) with a communication hook that does what DDP does by default: sum
        each bucket over `group` and divide it by the group's size (see the module's docstring
        for what each costs). Register before the first forward pass."""
        if not per_bucket:
            if group is not None:
                raise ValueError(
                    "register_ddp: `group` is the process group of the per-bucket hook; DDP's built-in all-reduce "
                    "uses the group DDP was built with (pass per_bucket=True to reduce over another)"
                )
            return DdpStepTiming(self, model, sample_every)
        # DDP compares the hook's annotations with its own classes; this module's are strings
        # (postponed evaluation), so it gets an unannotated hook with DDP's parameter names.
        model.register_comm_hook(state=group, hook=lambda state, bucket: self.ddp_allreduce_hook(state, bucket))
        return None

    def ddp_allreduce_hook(self, group: Any, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
        """The per-bucket DDP communication hook `register_ddp(..., per_bucket=True)` registers."""
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


def _grad_tensors(output: Any) -> Iterator[torch.Tensor]:
    """The tensors of a module's output (a tensor, or sequences and mappings of them) that
    backward reaches."""
    if isinstance(output, torch.Tensor):
        if output.requires_grad:
            yield output
    elif isinstance(output, Mapping):
        for value in output.values():
            yield from _grad_tensors(value)
    elif isinstance(output, (list, tuple)):
        for value in output:
            yield from _grad_tensors(value)


def _logging_data(ddp: torch.nn.parallel.DistributedDataParallel) -> dict[str, Any]:
    """DDP's logging data: its construction parameters and the runtime statistics of the latest
    iteration it timed (nanoseconds)."""
    data: dict[str, Any] = ddp._get_ddp_logging_data()  # type: ignore[no-untyped-call]
    return data


def _sizes(text: Any) -> list[int]:
    """DDP's logged bucket sizes ("66564, 66048, ..." bytes) as numbers."""
    return [int(size) for size in str(text).split(",") if size.strip()]


class DdpStepTiming:
    """One DDP module's gradient reduction timed per step, DDP's built-in all-reduce kept (made
    by `CollectiveTimer.register_ddp`).

    Per forward pass that will synchronize: a gradient hook on the output, which queues an
    autograd engine callback at the start of backward. Engine callbacks run in the order they were
    queued once the backward computation is done, and DDP queues its own (the wait for every
    bucket) when its last bucket is ready, later in backward: so this callback runs first, at the
    end of the computation, enters `collective` and queues another, which runs after DDP's and
    resumes the phase. A step is counted at the next synchronizing forward pass (and the last one
    at the job's finish) if its backward ran, with the buckets and busy time of the latest step DDP
    timed: DDP logs a step's runtime statistics at the forward pass after it."""

    def __init__(
        self, timer: CollectiveTimer, ddp: torch.nn.parallel.DistributedDataParallel, sample_every: int = 1
    ) -> None:
        if isinstance(sample_every, bool) or not isinstance(sample_every, int) or sample_every < 1:
            raise ValueError(f"sample_every={sample_every!r}: expected a whole number of steps, at least 1")
        self._timer = timer
        self._ddp = ddp
        self._engine = torch.autograd.Variable._execution_engine
        # DDP times its first 10 iterations, then one in `sample_every`
        ddp._set_ddp_runtime_logging_sample_rate(sample_every)  # type: ignore[no-untyped-call]
        # The gradient bytes reduced per step: every bucket's, before and after DDP rebuilds them.
        self.bytes_per_step = sum(_sizes(_logging_data(ddp).get("bucket_sizes", "")))
        self._lock = threading.Lock()
        # buckets and busy seconds of the latest step DDP timed: they stand for the steps it did not
        self._per_step: tuple[int, float] | None = None
        self._backward_ran = False  # the latest synchronizing forward pass's backward began
        self._resume: str | None = None  # the phase to go back to once DDP's wait is over
        self._handle: RemovableHandle | None = ddp.register_forward_hook(self._forward_done)
        timer.job.at_finish(self.close)

    # --- per forward pass -----------------------------------------------------------------------
    def _forward_done(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not (torch.is_grad_enabled() and self._ddp.require_backward_grad_sync):
            return  # evaluation, or gradient accumulation under no_sync(): DDP reduces nothing
        self._resume_phase()  # a backward that raised inside DDP's wait left the phase switched
        self._count_previous_step()
        for tensor in _grad_tensors(output):
            tensor.register_hook(self._backward_began)  # type: ignore[no-untyped-call]

    def _backward_began(self, grad: torch.Tensor) -> None:
        if not self._backward_ran:
            self._backward_ran = True
            self._engine.queue_callback(self._computed)

    def _computed(self) -> None:
        """The backward pass's computation is done: what is left is DDP's wait for its buckets."""
        resume = self._timer.job.phases.enter(COLLECTIVE)
        with self._lock:
            self._resume = resume
        self._engine.queue_callback(self._resume_phase)

    def _resume_phase(self) -> None:
        with self._lock:
            resume, self._resume = self._resume, None
        if resume is not None:
            self._timer.job.phases.enter(resume)

    # --- DDP's statistics -----------------------------------------------------------------------
    def _count_previous_step(self) -> None:
        """Count the previous synchronizing forward pass's step if its backward ran (DDP reduced
        its buckets), with the latest statistics DDP logged: that step's when DDP timed it."""
        with self._lock:
            ran, self._backward_ran = self._backward_ran, False
            if not ran:
                return
            data = _logging_data(self._ddp)
            # the statistics of a step whose forward ran without a backward after it hold an earlier
            # step's communication timestamps: the latest figures stand
            if "backward_comm_time" in data and data["backward_comm_time_start"] >= data["forward_compute_time_start"]:
                buckets = data.get("num_buckets_reduced")
                if buckets is None:  # a PyTorch that does not log it: the buckets DDP holds now
                    buckets = len(_sizes(data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes", "")))
                self._per_step = (int(buckets), int(data["backward_comm_time"]) / 1e9)
            per_step = self._per_step
        if per_step is not None:
            buckets, busy = per_step
            self._timer.counts.add(ALL_REDUCE, buckets, self.bytes_per_step if buckets else 0, busy)

    def close(self) -> None:
        """Count the last step (DDP logs its statistics now, as it would at the next forward pass)
        and stop timing; called when the job finishes. Idempotent."""
        if self._handle is None:
            return
        self._handle.remove()
        self._handle = None
        self._resume_phase()
        if self._ddp.logger is not None and self._backward_ran:
            self._ddp.logger.set_runtime_stats_and_log()
        self._count_previous_step()


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
