"""The auto-instrumentation never changes what a program does: with its step hook forced to
raise, a training program's stdout, result file, checkpoints and exit code are byte-identical to
an uninstrumented run, and one line on stderr names the integration turned off. Patches apply
whichever comes first, the framework's import or the instrumentation (`autolog()` in code), and
the job ends by what ended the program."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from harness.ports import free_port
from infra import REPO_ROOT

pytestmark = pytest.mark.slow

PROGRAMS = REPO_ROOT / "tests" / "autolog" / "programs"
RUN = [sys.executable, "-m", "foxhunt_trainer.autolog", sys.executable]
# A sitecustomize the auto-instrumentation's chains to (the environment's own): it breaks the
# library's step counting, as a bug in it would.
FAULT = textwrap.dedent(
    """
    from foxhunt_trainer.training import JobMetrics

    def record_step(self, *args, **kwargs):
        raise RuntimeError("forced failure of the step hook")

    JobMetrics.record_step = record_step
    """
)


def _env(pythonpath: str = str(REPO_ROOT), **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FOXHUNT_", "PYTHON"))}
    return {
        **env,
        "PYTHONPATH": pythonpath,
        "OMP_NUM_THREADS": "1",
        "FOXHUNT_METRICS_BASE_PORT": str(free_port()),
        "FOXHUNT_PROGRESS_SECONDS": "off",
        **extra,
    }


def _run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, timeout=180)


def test_a_failing_hook_leaves_output_results_and_exit_code_byte_identical_and_says_so_once(tmp_path):
    plain, faulty = tmp_path / "plain", tmp_path / "faulty"
    (tmp_path / "fault").mkdir()
    (tmp_path / "fault" / "sitecustomize.py").write_text(FAULT)
    for out in (plain, faulty):
        out.mkdir()
    loop = [str(PROGRAMS / "plain_loop.py"), "--epochs", "2"]
    reference = _run([sys.executable, loop[0], str(plain), *loop[1:]], _env(FOXHUNT_AUTOLOG="off"))
    broken = _run([*RUN, loop[0], str(faulty), *loop[1:]], _env(f"{REPO_ROOT}{os.pathsep}{tmp_path / 'fault'}"))
    assert reference.returncode == broken.returncode == 0, broken.stderr.decode()
    assert broken.stdout == reference.stdout
    assert sorted(p.name for p in faulty.iterdir()) == sorted(p.name for p in plain.iterdir())
    for made in plain.iterdir():
        assert (faulty / made.name).read_bytes() == made.read_bytes(), made.name
    lines = [line for line in broken.stderr.decode().splitlines() if line.startswith("foxhunt-autolog")]
    assert lines == [
        "foxhunt-autolog: the torch integration failed and is off (RuntimeError: forced failure of the step hook)"
    ]


# What the Lightning callback does in its per-batch hooks only (they guard themselves, not a wrapper).
LIGHTNING_FAULT = textwrap.dedent(
    """
    import atexit, sys
    from foxhunt_trainer.integrations import lightning

    calls = []

    def batch_size(batch):  # what the batch-start hook calls until it knows the batch size
        calls.append(1)
        raise RuntimeError("forced failure of the batch hook")

    lightning._batch_size = batch_size
    atexit.register(lambda: sys.stderr.write(f"fault: raised {len(calls)} times\\n"))
    """
)


def test_a_failing_lightning_batch_hook_leaves_the_fit_and_its_results_as_they_were(tmp_path):
    plain, faulty = tmp_path / "plain", tmp_path / "faulty"
    (tmp_path / "fault").mkdir()
    (tmp_path / "fault" / "sitecustomize.py").write_text(LIGHTNING_FAULT)
    program = [str(PROGRAMS / "lightning_fit.py"), "--epochs", "2"]
    reference = _run([sys.executable, program[0], str(plain), *program[1:]], _env(FOXHUNT_AUTOLOG="off"))
    broken = _run([*RUN, program[0], str(faulty), *program[1:]], _env(f"{REPO_ROOT}{os.pathsep}{tmp_path / 'fault'}"))
    assert reference.returncode == broken.returncode == 0, broken.stderr.decode()
    assert broken.stdout == reference.stdout
    assert (faulty / "result.json").read_bytes() == (plain / "result.json").read_bytes()
    checkpoints = [sorted(p.relative_to(out).as_posix() for p in out.rglob("*.ckpt")) for out in (plain, faulty)]
    assert checkpoints[0] == checkpoints[1] != []  # (their contents name their own directories)
    lines = [line for line in broken.stderr.decode().splitlines() if line.startswith("foxhunt-autolog")]
    assert lines == [
        "foxhunt-autolog: the lightning integration failed and is off (RuntimeError: forced failure of the batch hook)"
    ]
    # Off, not only reported: no hook of the integration ran its code after the failure.
    assert "fault: raised 1 times" in broken.stderr.decode().splitlines()


BY_HAND_LIBRARY_FIRST = textwrap.dedent(
    """
    from foxhunt_trainer.integrations.{module} import {name}  # imports the framework from inside
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from foxhunt_trainer import TrainingMetrics
    from foxhunt_trainer.integrations.torch import watch

    job = TrainingMetrics().start_job("mlp", "by-hand", gpu_uuids=[])
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    watcher = watch(job, model, optimizer)
    for x, y in watcher.loader(DataLoader(TensorDataset(torch.randn(40, 4), torch.randn(40, 1)), batch_size=8)):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        watcher.record_loss(loss)
    print(job.steps_done)
    """
)


@pytest.mark.parametrize(
    ("module", "name"), [("torch", "watch"), ("lightning", "MetricsCallback"), ("sb3", "MetricsCallback")]
)
def test_a_program_importing_an_integration_before_its_framework_runs_with_every_integration_on(tmp_path, module, name):
    # Under foxhunt-run, the framework's patches fall due while the integration module that
    # imports it is still executing; they wait for it instead of failing on it half-made.
    program = tmp_path / "by_hand.py"
    program.write_text(BY_HAND_LIBRARY_FIRST.format(module=module, name=name))
    done = _run([*RUN, str(program)], _env())
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["5"]  # each step once: the program's own job
    assert [line for line in done.stderr.decode().splitlines() if line.startswith("foxhunt-autolog")] == []


ORDERS = {
    "framework first": "import torch\nfrom foxhunt_trainer.autolog import autolog\nautolog()\n",
    "instrumentation first": "from foxhunt_trainer.autolog import autolog\nautolog()\nimport torch\n",
}
TRAIN = textwrap.dedent(
    """
    from torch.utils.data import DataLoader, TensorDataset
    from foxhunt_trainer.autolog import job
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(TensorDataset(torch.randn(40, 4), torch.randn(40, 1)), batch_size=8):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    print(job.existing().job.steps_done)
    """
)


@pytest.mark.parametrize("order", ORDERS)
def test_autolog_in_code_instruments_torch_imported_before_or_after_it(order):
    done = _run([sys.executable, "-c", ORDERS[order] + TRAIN], _env())
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split()[0] == "5"


# Prints how the job ended (status, failure types counted) after the job's own exit hook: a probe
# program's first lines (registered before the job exists, so it runs after the job's hook).
END_REPORT = textwrap.dedent(
    """
    import atexit
    from foxhunt_trainer.autolog import job

    def report():
        auto = job.existing()
        failures = auto.metrics.failures.collect()[0].samples
        failed = sorted(s.labels["error_type"] for s in failures if s.name.endswith("_total") and s.value)
        print(auto.job.status, failed, flush=True)

    atexit.register(report)
    """
)
ENDINGS = {
    "an exception": ("raise KeyError('missing column')", 1, "failed", "config"),
    "a non-zero sys.exit": ("import sys; sys.exit(3)", 3, "failed", "exception"),
    "the builtin exit(4)": ("exit(4)", 4, "failed", "exception"),
    "the builtin quit(0)": ("quit(0)", 0, "completed", None),
    "a clean end": ("pass", 0, "completed", None),
}


@pytest.mark.parametrize("ending", ENDINGS)
def test_the_job_ends_by_what_ended_the_program(ending):
    code, expected_code, status, error_type = ENDINGS[ending]
    probe = textwrap.dedent(
        f"""
        import torch
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.ones(1, 2)).sum().backward()
        optimizer.step()
        {code}
        """
    )
    done = _run([*RUN, "-c", END_REPORT + probe], _env())
    assert done.returncode == expected_code, done.stderr.decode()
    assert done.stdout.decode().strip() == f"{status} {[error_type] if error_type else []}"


def test_metrics_made_by_the_program_after_the_auto_job_take_over_its_port():
    probe = textwrap.dedent(
        """
        import torch
        from foxhunt_trainer import TrainingMetrics
        from foxhunt_trainer.autolog import job
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.ones(1, 2)).sum().backward()
        optimizer.step()  # the auto job starts, its server on the base port
        auto = job.existing()
        metrics = TrainingMetrics()  # the program's own: the auto layer steps aside
        server = metrics.serve_rank(addr="127.0.0.1")  # the same port, free again
        optimizer.step()
        print(job.existing() is None, auto.job.steps_done, server.port == auto.server.port)
        server.close(0)
        """
    )
    done = _run([*RUN, "-c", probe], _env())
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["True", "1", "True"]


def test_under_amp_the_loss_recorded_is_the_one_grad_scaler_scaled():
    probe = textwrap.dedent(
        """
        import torch
        from foxhunt_trainer.autolog import job
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        for _ in range(3):
            loss = (model(torch.ones(4, 2)) - 5.0).square().mean()  # about 16 to 40; scaled, over 16,000
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
        auto = job.existing()
        torch_job = auto.extension("torch", None)
        torch_job.watcher.check()
        print(auto.metrics.step_loss.collect()[0].samples[0].value < 100, auto.job.steps_done)
        """
    )
    done = _run([*RUN, "-c", probe], _env())
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["True", "3"]


BACKWARD_CALLS = {
    "loss.backward()": "loss.backward()",
    "torch.autograd.backward(loss)": "torch.autograd.backward(loss)",
    "torch.autograd.backward([loss])": "torch.autograd.backward([loss])",
}


@pytest.mark.parametrize("call", BACKWARD_CALLS)
@pytest.mark.parametrize("checkpointed", [False, True], ids=["plain", "activation-checkpointed"])
def test_each_way_of_calling_backward_records_the_programs_loss_once(call, checkpointed):
    # Reentrant activation checkpointing runs `torch.autograd.backward` again inside the backward
    # pass, on the recomputed segment's output (here twice the loss): not a loss of the program's.
    probe = textwrap.dedent(
        f"""
        import torch
        from torch.utils.checkpoint import checkpoint
        from foxhunt_trainer.autolog import job
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        segment = lambda x: 2 * (model(x) - 3.0).square().mean()
        losses = []
        for step in range(4):
            x = torch.full((4, 2), float(step + 1), requires_grad=True)
            loss = checkpoint(segment, x, use_reentrant=True) / 2 if {checkpointed} else segment(x) / 2
            losses.append(float(loss))
            {BACKWARD_CALLS[call]}
            optimizer.step()
            optimizer.zero_grad()
        torch_job = job.existing().extension("torch", None)
        counted = torch_job.watcher._losses
        torch_job.watcher.check()
        recorded = job.existing().metrics.step_loss.collect()[0].samples[0].value
        print(counted, abs(recorded - sum(losses) / len(losses)) < 1e-4 * max(losses))
        """
    )
    done = _run([*RUN, "-c", probe], _env())
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["4", "True"]


@pytest.mark.parametrize("order", ["lightning imported first", "autolog() first"])
def test_both_lightning_packages_trainers_are_patched_in_either_import_order(order):
    imports = ["import lightning", "from foxhunt_trainer.autolog import autolog; autolog()"]
    if order == "autolog() first":
        imports.reverse()
    probe = "; ".join(
        [*imports, "import pytorch_lightning", "print(lightning.pytorch.Trainer is pytorch_lightning.Trainer,"
         " getattr(lightning.pytorch.Trainer, '__foxhunt_autolog__', False),"
         " getattr(pytorch_lightning.Trainer, '__foxhunt_autolog__', False))"]
    )  # fmt: skip
    done = _run([sys.executable, "-c", probe], _env())
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["False", "True", "True"]


def test_a_learn_call_that_raises_has_every_step_it_took_counted():
    probe = textwrap.dedent(
        """
        from stable_baselines3 import DQN
        from stable_baselines3.common.callbacks import BaseCallback
        from foxhunt_trainer.autolog import job
        from foxhunt_trainer.integrations import step_batches

        step_batches.RECORD_EVERY_SECONDS = 3600.0  # only the first step is handed over at once

        class Fails(BaseCallback):
            def _on_step(self):
                if self.model._n_updates >= 20:
                    raise RuntimeError("the environment failed")
                return True

        model = DQN("MlpPolicy", "CartPole-v1", learning_starts=16, train_freq=1, seed=0, device="cpu")
        try:
            model.learn(200, callback=Fails())
        except RuntimeError as error:
            print(error, job.existing().job.steps_done, model._n_updates, sep=",")
        """
    )
    done = _run([*RUN, "-c", probe], _env())
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().strip() == "the environment failed,20,20"
