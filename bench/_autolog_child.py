"""The processes of `bench.autolog_overhead`: the three variants of a PyTorch loop in one process
(`--in-process`), or the framework callbacks timed from inside (`--framework`).

    python -m bench._autolog_child --in-process --model real|tiny --steps N --rounds R
    python -m bench._autolog_child --bytecodes --model tiny --steps N
    python -m bench._autolog_child --framework [--repeats N]

`--in-process` and `--bytecodes` are started by the parent through `foxhunt-run`: the loop has no
instrumentation of its own.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any, cast

import torch
from torch.utils.data import DataLoader, TensorDataset

from infra import REPO_ROOT

WIDTH, BATCH, FEATURES = 512, 128, 256


def _model(kind: str) -> torch.nn.Module:
    if kind == "tiny":
        model = torch.nn.Module()
        model.register_parameter("p", torch.nn.Parameter(torch.ones(())))
        return model
    layers: list[torch.nn.Module] = [torch.nn.Linear(FEATURES, WIDTH), torch.nn.ReLU()]
    for _ in range(2):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 1))


def _loader(kind: str, steps: int) -> DataLoader[tuple[torch.Tensor, ...]]:
    generator = torch.Generator().manual_seed(0)
    features = 1 if kind == "tiny" else FEATURES
    x = torch.randn(steps * BATCH, features, generator=generator)
    y = x[:, :1] if kind == "tiny" else x[:, :8].sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=False)


# --- the three variants in one process ---------------------------------------------------------
class Patches:
    """The auto layer's torch patches, taken out and put back between blocks: what `foxhunt-run`
    installed when torch was imported (the patched `torch.autograd.backward` and DataLoader
    `__next__`, the two global optimizer step hooks) against PyTorch's own functions."""

    def __init__(self) -> None:
        from torch.optim import optimizer as optimizer_module
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        self._iterator, self._optimizer_module = _BaseDataLoaderIter, optimizer_module
        self.backward: Any = torch.autograd.backward
        self.next: Any = _BaseDataLoaderIter.__next__
        self.hooks: list[tuple[dict[int, Any], dict[int, Any]]] = [
            (cast(dict[int, Any], hooks), dict(hooks))
            for hooks in (optimizer_module._global_optimizer_pre_hooks, optimizer_module._global_optimizer_post_hooks)
        ]
        originals = getattr(self.backward, "__wrapped__", None), getattr(self.next, "__wrapped__", None)
        if None in originals or not all(mine for _, mine in self.hooks):
            raise SystemExit("--in-process runs under foxhunt-run, with the torch integration on")
        self.original_backward, self.original_next = originals

    def put(self, on: bool) -> None:
        setattr(torch.autograd, "backward", self.backward if on else self.original_backward)  # noqa: B010
        setattr(self._iterator, "__next__", self.next if on else self.original_next)  # noqa: B010
        for hooks, mine in self.hooks:
            hooks.clear()
            if on:
                hooks.update(mine)


class Loop:
    """The loop of the three variants in this process (`foxhunt-run` made the auto layer's patches):
    plain takes the patches out; watch() takes them out and watches the loop by hand, into the auto
    job's `JobMetrics`, with a watcher made before and closed after its block (so its hooks never run
    in another variant's block)."""

    def __init__(self, args: argparse.Namespace) -> None:
        torch.set_num_threads(1)
        torch.manual_seed(0)
        self.patches = Patches()
        self.model = _model(args.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.loss_fn = torch.nn.MSELoss()
        self.loader = _loader(args.model, args.steps)
        self.parameter = next(self.model.parameters()) if args.model == "tiny" else None
        self.steps: int = args.steps

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        parameter = self.parameter
        loss: torch.Tensor = parameter * 2.0 if parameter is not None else self.loss_fn(self.model(x), y)
        loss.backward()  # type: ignore[no-untyped-call]
        self.optimizer.step()
        self.optimizer.zero_grad()
        return loss

    def block(self, variant: str, around: Callable[[Callable[[], None]], float]) -> float:
        """One block of `variant`: its loop run by `around` (which measures it), per step."""
        from foxhunt_trainer.autolog import job as auto_job
        from foxhunt_trainer.integrations.torch import watch

        self.patches.put(variant == "auto")
        if variant != "watch":

            def loop() -> None:
                for x, y in self.loader:
                    self.step(x, y)

            return around(loop) / self.steps
        made = auto_job.existing()
        if made is None:
            raise SystemExit("the auto job was not made by the first auto block")
        watcher = watch(made.job, self.model, self.optimizer)

        def watched() -> None:
            for x, y in watcher.loader(self.loader):
                watcher.record_loss(self.step(x, y))

        spent = around(watched)
        watcher.close()
        return spent / self.steps


VARIANTS = ("auto", "plain", "watch")  # auto first: its job is made in the first block


def _thread_time(loop: Callable[[], None]) -> float:
    started = time.thread_time()
    loop()
    return time.thread_time() - started


def in_process(args: argparse.Namespace) -> None:
    """Plain, auto and watch() blocks of the same loop in one process, the order rotating every
    round: each block's cost is the training thread's CPU time per step (the metrics server's
    thread, scraped by the parent, runs through every block alike and is not in it). Prints one
    JSON object: the variants' seconds per step, block by block."""
    loop = Loop(args)
    for variant in VARIANTS * 2:  # warm-up
        loop.block(variant, _thread_time)
    blocks: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for round_ in range(args.rounds):
        order = VARIANTS[round_ % 3 :] + VARIANTS[: round_ % 3]
        for variant in order if round_ % 6 < 3 else tuple(reversed(order)):
            blocks[variant].append(loop.block(variant, _thread_time))
    loop.patches.put(True)
    print(json.dumps(blocks), flush=True)


def bytecodes(args: argparse.Namespace) -> None:
    """The bytecodes each variant's block executes per step, by function (`sys.settrace`'s opcode
    events): what the interpreter does, counted, where timing a few microseconds is noisy. The work
    done every N steps or switches (checks, the phase queue's flush) is in it, amortized: each block
    starts with the phase queue empty. Prints one JSON object: variant -> {"file:function":
    bytecodes per step}."""
    from foxhunt_trainer.autolog import job as auto_job

    loop = Loop(args)
    for variant in VARIANTS * 2:  # warm-up: the watcher made, the FLOPs measured, caches filled
        loop.block(variant, _thread_time)
    counts: dict[str, int] = {}

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            code = frame.f_code
            name = code.co_filename.rpartition("site-packages/")[2].rpartition(f"{REPO_ROOT}/")[2]
            key = f"{name}:{code.co_name}"
            counts[key] = counts.get(key, 0) + 1
        return tracer

    def traced(run: Callable[[], None]) -> float:
        made = auto_job.existing()
        if made is not None:  # each block starts with no phase switch queued (reading the totals applies them)
            made.job.phases.totals()
        sys.settrace(tracer)
        try:
            run()
        finally:
            sys.settrace(None)
        return 0.0

    out: dict[str, dict[str, float]] = {}
    for variant in VARIANTS:
        counts.clear()
        loop.block(variant, traced)
        out[variant] = {key: n / loop.steps for key, n in counts.items()}
    loop.patches.put(True)
    print(json.dumps(out), flush=True)


# --- the framework callbacks, timed from inside ---------------------------------------------------
def _timer(original: Any, spent: list[float]) -> Any:
    """`original`, the CPU time of this thread inside it added to spent[0], its calls to spent[1]."""

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            spent[0] += time.thread_time() - started
            spent[1] += 1

    return timed


def _timed_methods(cls: type, names: tuple[str, ...], spent: list[float]) -> None:
    for name in names:
        setattr(cls, name, _timer(getattr(cls, name), spent))


def _calibrated(calibration: list[float]) -> Any:
    """A timed no-op (its time and calls into `calibration`): called by the framework at the same
    kind of point as the callback's hooks, it measures the timer's own cost there, which is several
    times that of the same no-op timed in a tight loop (a thread-clock reading is a system call,
    and in the middle of a framework's step it runs with cold caches)."""
    return _timer(lambda *args, **kwargs: True, calibration)


def frameworks(args: argparse.Namespace) -> None:
    """Each framework trained under the auto-instrumentation, the time inside its callback summed."""
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    import pytorch_lightning as pl
    from pytorch_lightning.trainer import call as lightning_call
    from stable_baselines3 import DQN, PPO
    from stable_baselines3.common.callbacks import BaseCallback

    from bench.framework_overhead import Regression
    from foxhunt_trainer.autolog import autolog, lightning_patches, sb3_patches
    from foxhunt_trainer.integrations.lightning import skip_unused_batch_hooks

    autolog()
    spent, calibration, dispatch = [0.0, 0], [0.0, 0], [0.0, 0]
    _timed_methods(
        sb3_patches.AutoMetricsCallback,
        ("_on_training_start", "_on_rollout_start", "_on_step", "_on_rollout_end", "_on_training_end",
         "_before_optimizer_step", "_optimizer_stepped"),
        spent,
    )  # fmt: skip
    _timed_methods(lightning_patches.AutoMetricsCallback, ("setup", *lightning_patches.HOOKS), spent)

    class StepCalibration(BaseCallback):  # beside the callback: SB3 calls both at every environment step
        _on_step = _calibrated(calibration)

    class BatchCalibration(pl.Callback):  # Lightning calls it once an optimizer step
        on_before_zero_grad = _calibrated(calibration)

    results = []

    def measured(name: str, unit: str, train: Callable[[], tuple[int, int]]) -> None:
        for repeat in range(args.repeats):
            spent[0], spent[1], calibration[0], calibration[1] = 0.0, 0, 0.0, 0
            started = time.process_time()
            units, optimizer_steps = train()
            total = time.process_time() - started
            timer = calibration[0] / max(calibration[1], 1)
            callback = max(spent[0] - spent[1] * timer, 0.0)
            results.append(
                {"case": name, "repeat": repeat, "unit": unit, "units": units, "optimizer_steps": optimizer_steps,
                 "total": total, "callback": callback, "calls": spent[1], "timer_overhead": timer,
                 # the run's time outside every timer (the timers' own cost is neither's)
                 "rest": total - spent[0] - calibration[0]}
            )  # fmt: skip

    def ppo() -> tuple[int, int]:
        model = PPO("MlpPolicy", "CartPole-v1", n_steps=1024, batch_size=64, n_epochs=4, seed=0, device="cpu")
        model.learn(4096, callback=StepCalibration())
        return model.num_timesteps, model._n_updates * (1024 // 64)

    def dqn() -> tuple[int, int]:
        model = DQN("MlpPolicy", "CartPole-v1", learning_starts=500, seed=0, device="cpu")
        model.learn(4000, callback=StepCalibration())
        return model.num_timesteps, model._n_updates

    def fit(extra_callbacks: list[pl.Callback] | None = None) -> tuple[int, int]:
        x = torch.randn(4096, 16, generator=torch.Generator().manual_seed(0))
        callbacks = [BatchCalibration(), *(extra_callbacks or [])]
        trainer = pl.Trainer(
            max_epochs=5, logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, accelerator="cpu", callbacks=callbacks,
        )  # fmt: skip
        trainer.fit(Regression(), DataLoader(TensorDataset(x, x.sum(dim=1)), batch_size=32))
        return trainer.global_step, trainer.global_step

    class AutoHooks(pl.Callback):
        """The auto callback's hooks with no-op bodies, the per-batch ones it leaves out skipped as it
        skips them: what Lightning's dispatch of that callback costs."""

        def __init__(self) -> None:
            skip_unused_batch_hooks(self)

    for hook in ("setup", *lightning_patches.HOOKS):
        setattr(AutoHooks, hook, lambda self, *args, **kwargs: None)

    def dispatch_per_callback(extra: int = 10) -> dict[str, float]:
        """Lightning's own price of one more callback (its hooks dispatched, each a no-op), per
        optimizer step: the dispatch time of a fit with `extra` callbacks more, minus that of the
        same fit without, over `extra` (the least of the repeats of each): a callback that leaves
        every hook to `pl.Callback`, and one with the auto callback's hooks."""
        # Lightning's dispatch of its callbacks' hooks, every callback's together (timed only here)
        lightning_call._call_callback_hooks = _timer(lightning_call._call_callback_hooks, dispatch)
        least: dict[str, float] = {}
        for name, factory in (("none", None), ("noop", pl.Callback), ("auto_hooks", AutoHooks)):
            times = []
            for _ in range(args.repeats):
                dispatch[0], dispatch[1] = 0.0, 0
                steps, _ = fit([factory() for _ in range(extra)] if factory is not None else [])
                times.append(dispatch[0] / steps)
            least[name] = min(times)
        return {name: max(least[name] - least["none"], 0.0) / extra for name in ("noop", "auto_hooks")}

    measured("Stable-Baselines3 PPO, CartPole", "environment step", ppo)
    measured("Stable-Baselines3 DQN, CartPole", "environment step", dqn)
    measured("Lightning fit, MLP regression", "optimizer step", fit)
    print(json.dumps({"cases": results, "lightning_dispatch_per_callback": dispatch_per_callback()}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["real", "tiny"], default="real")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--framework", action="store_true")
    parser.add_argument("--in-process", action="store_true")
    parser.add_argument("--bytecodes", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    if args.framework:
        frameworks(args)
    elif args.in_process:
        in_process(args)
    elif args.bytecodes:
        bytecodes(args)
    else:
        parser.error("choose --in-process, --bytecodes or --framework")


if __name__ == "__main__":
    main()
