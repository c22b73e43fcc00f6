"""Intra-op threads (lightning_fed.threads): a share of the cores per concurrent fit, one for tiny work.

Issue 33, item 4. The machine of the issue has 2 cores; here the cores are mocked (CPU affinity and
the machine's count disagree on purpose: a container sees the host's ``os.cpu_count()``).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from lightning_fed.algorithms import FedAvg
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.sweep import plan, run_sweep
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def two_cores(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """A process that may run on 2 cores of a 16-core host, no quota, no thread variables set."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    try:
        import lightning_fed.threads as threads
    except ModuleNotFoundError:  # the starting main, where these tests must fail on their asserts
        threads = None
    if threads is not None:
        monkeypatch.setattr(threads, "_CGROUP_CPU_MAX", tmp_path / "no-cpu.max")
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "LIGHTNING_FED_FITS_AT_ONCE"):
        monkeypatch.delenv(name, raising=False)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _threads_in_child(env: dict[str, str], step_flops: float) -> int:
    """The intra-op threads a run process started with ``env`` ends up with for a step of
    ``step_flops``: ``OMP_NUM_THREADS`` if the environment sets it (torch reads it at import and
    ``auto`` keeps it), else what ``trainer.threads: auto`` chooses there."""
    if "OMP_NUM_THREADS" in env:
        return int(env["OMP_NUM_THREADS"])
    from lightning_fed.threads import choose_threads

    return choose_threads("auto", step_flops, env=env).threads


class _FakeProcess:
    """What ``subprocess.Popen`` returns, for a run process that does nothing and succeeds."""

    pid = 0

    def wait(self) -> int:
        return 0

    def poll(self) -> int:
        return 0


def test_a_sweep_of_two_processes_gives_each_fit_one_thread_on_two_cores(
    two_cores: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``processes: 2`` on 2 cores: each run process gets 2 // 2 = 1 thread, however much work its
    step has (here 1e12 FLOP, which alone would take every core). The cores are the affinity's 2,
    not the host's 16 (whose half, 8, is what a count by ``os.cpu_count()`` gives)."""
    envs: list[dict[str, str]] = []

    def popen(args: list[str], **kwargs: object) -> _FakeProcess:
        envs.append(dict(kwargs["env"]))  # type: ignore[arg-type]
        return _FakeProcess()

    monkeypatch.setattr(subprocess, "Popen", popen)
    runs = plan([ROOT / "configs" / "fedavg.yaml", ROOT / "configs" / "local.yaml"], [1], tmp_path / "runs")
    run_sweep(runs, [], processes=2)
    assert len(envs) == 2
    assert [_threads_in_child(env, 1e12) for env in envs] == [1, 1]
    assert _threads_in_child(envs[0], 1e12) == 1
    # One process at a time takes both cores for the same work.
    envs.clear()
    run_sweep(plan([ROOT / "configs" / "fedavg.yaml"], [1], tmp_path / "one"), [], processes=1)
    assert [_threads_in_child(env, 1e12) for env in envs] == [2]


def test_a_users_omp_num_threads_passes_through_the_sweep_and_wins(
    two_cores: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning_fed.threads import choose_threads

    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    envs: list[dict[str, str]] = []
    monkeypatch.setattr(
        subprocess, "Popen", lambda args, **kw: envs.append(dict(kw["env"])) or _FakeProcess()
    )
    run_sweep(plan([ROOT / "configs" / "fedavg.yaml"], [1], tmp_path / "runs"), [], processes=2)
    assert envs[0]["OMP_NUM_THREADS"] == "3"
    choice = choose_threads("auto", 1e12, env=envs[0])
    assert not choice.set_by_us and "OMP_NUM_THREADS=3 in the environment" in choice.describe()


def test_a_tiny_federation_gets_one_thread(two_cores: None) -> None:
    """4 hospitals of a few dozen stays: a step is 6 * 15,936 * 128 * 4 = 4.9e7 FLOP (every center
    active), below the grain, so ``auto`` sets one thread even with 2 cores free (torch starts at 2)."""
    torch.set_num_threads(2)
    fed = Federation(
        make_federation([40, 30, 60, 20], num_features=60), MortalityMLP(), FedAvg(), TrainerConfig()
    )
    assert torch.get_num_threads() == 1
    assert fed.threads.threads == 1 and fed.threads.set_by_us
    assert "auto: 2 cores -> 2 each" in fed.threads.describe()


def test_large_work_gets_the_share_and_an_explicit_setting_is_used_as_given(two_cores: None) -> None:
    from lightning_fed.threads import GRAIN_FLOP, choose_threads

    assert choose_threads("auto", 10 * GRAIN_FLOP, env={}).threads == 2
    assert choose_threads("auto", 10 * GRAIN_FLOP, env={"LIGHTNING_FED_FITS_AT_ONCE": "2"}).threads == 1
    assert choose_threads("auto", 10 * GRAIN_FLOP, env={}, processes=2).threads == 1  # 2 DDP ranks
    assert choose_threads("auto", 0.5 * GRAIN_FLOP, env={}).threads == 1
    explicit = choose_threads(3, 1.0, env={"OMP_NUM_THREADS": "1"})
    assert (explicit.threads, explicit.reason) == (3, "trainer.threads")
    fed = Federation(
        make_federation([40, 30], num_features=60), MortalityMLP(), FedAvg(), TrainerConfig(threads=2)
    )
    assert torch.get_num_threads() == 2 and fed.threads.describe() == "threads: 2 (trainer.threads)"


def test_cores_are_the_affinity_capped_by_a_cgroup_quota(two_cores: None, tmp_path: Path) -> None:
    from lightning_fed.threads import available_cores

    quota = tmp_path / "cpu.max"
    assert available_cores(quota) == 2  # no file: the affinity's 2, not os.cpu_count()'s 16
    quota.write_text("max 100000\n")
    assert available_cores(quota) == 2
    quota.write_text("150000 100000\n")  # 1.5 CPUs -> 2
    assert available_cores(quota) == 2
    quota.write_text("50000 100000\n")  # half a CPU -> 1
    assert available_cores(quota) == 1


@pytest.mark.parametrize("bad", [0, -1, "many", 1.5, True])
def test_a_bad_thread_setting_is_one_line_naming_the_key(bad: object) -> None:
    with pytest.raises(ValueError, match=r"^trainer.threads must be 'auto' .* or an integer >= 1, got"):
        TrainerConfig(threads=bad)  # type: ignore[arg-type]


def test_step_flops_is_6_p_b_m_and_changes_nothing(two_cores: None) -> None:
    """MortalityMLP 60-128-64-1: ``P = 60*128 + 128*64 + 64 = 15,936`` weights in matmuls; the packed
    engine steps ``m`` = its mean active centers; batch ``B = 128``. Counting runs one forward in
    eval mode under a forked generator: the module stays in train mode and the global stream is
    where it was."""
    fed = Federation(
        make_federation([300, 130, 40], num_features=60), MortalityMLP(), FedAvg(), TrainerConfig()
    )
    engine = fed.engine
    m = sum(engine.active) / len(engine.active)
    engine.module.train()
    state = torch.random.get_rng_state()
    assert engine.step_flops() == pytest.approx(6 * 15_936 * 128 * m, rel=1e-12)
    assert engine.module.training and torch.equal(torch.random.get_rng_state(), state)


class _BuiltError(Exception):
    """Raised by :class:`_RecordingSource` once it has recorded the thread count of its build."""


class _RecordingSource:
    """A data source that records torch's thread count when built, then stops the build."""

    def __init__(self) -> None:
        self.threads: list[int] = []

    def build(self, seed: int) -> None:
        self.threads.append(torch.get_num_threads())
        raise _BuiltError


def test_a_run_built_after_a_fit_set_its_threads_builds_its_data_at_the_processs_count(
    two_cores: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``refer`` builds its ``--baselines`` after the referral run's federation set torch to its
    share (1 thread under a 2-process sweep); the baselines' fits built their data at torch's count
    of the time (2 here), and Fashion-MNIST's colour transforms differ in the last bit between
    the two, so the data fingerprint refused every baseline. A build in a process whose fit changed
    the count runs at the count the process had before."""
    import lightning_fed.threads as threads
    from lightning_fed.commands.common import build_federation, instantiate
    from lightning_fed.fit_parser import fit_parser

    monkeypatch.setattr(threads, "_PROCESS_THREADS", None, raising=False)
    torch.set_num_threads(2)  # torch's own count in this process
    federation = make_federation([40, 30])
    fit = Federation(federation, MortalityMLP(), FedAvg(), TrainerConfig(rounds=1, threads=1))
    assert fit.threads.threads == 1 and torch.get_num_threads() == 1
    parser = fit_parser()
    cfg = parser.parse_args(["--config", str(ROOT / "configs" / "quickstart.yaml")])
    cfg.pop("config", None)
    init = instantiate(parser, cfg)
    source = _RecordingSource()
    init.data = source
    with pytest.raises(_BuiltError):
        build_federation(init, None)
    assert source.threads == [2]
    assert torch.get_num_threads() == 1  # the fit's count is back after the build


def test_the_mlp_trains_to_the_same_bits_at_one_and_two_threads() -> None:
    """``trainer.threads``' docstring: the MLPs' batched matmuls give the same bits at any thread
    count (a convolution's do not, which is why ``summary.json`` records the count)."""
    before = torch.get_num_threads()
    from lightning_fed.data import SyntheticICU

    data = SyntheticICU(num_centers=40, num_stays=20000).build(0)  # batches of 128 rows at 40 centers
    params = []
    try:
        for threads in (1, 2):
            fed = Federation(data, MortalityMLP(), FedAvg(), TrainerConfig(rounds=1, threads=threads))
            fed.fit()
            params.append(fed.engine.get_params())
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(params[0][n], params[1][n]) for n in params[0])
