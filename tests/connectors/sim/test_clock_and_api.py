"""Simulated time, the public names of ``connectors.sim``, and the ``fedsched connector sim`` command."""

from __future__ import annotations

import pytest

import connectors.sim
from connectors.sim import SimClock, SimConfig
from services.cli.main import build_parser, main

from .builders import FIXTURES

pytestmark = pytest.mark.timeout(30)


class Hands:
    """A wall clock and a monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.wall_ms = 1_000_000
        self.mono = 50.0

    def tick(self, seconds: float) -> None:
        self.wall_ms += round(seconds * 1000)
        self.mono += seconds


def test_simulated_time_runs_speed_times_faster_from_its_start() -> None:
    hands = Hands()
    clock = SimClock(100, wall_ms=lambda: hands.wall_ms, monotonic=lambda: hands.mono)
    assert clock.now_ms() == 1_000_000 and not clock.started
    clock.start()
    hands.tick(1.5)
    assert clock.now_ms() == 1_150_000
    assert clock.wall_seconds_until(1_160_000) == pytest.approx(0.1)
    assert clock.wall_seconds_until(0) == 0


def test_a_restarted_clock_never_runs_backwards() -> None:
    hands = Hands()
    clock = SimClock(100, wall_ms=lambda: hands.wall_ms, monotonic=lambda: hands.mono)
    clock.start(at_least_ms=9_000_000)
    assert clock.now_ms() == 9_000_000
    hands.tick(1)
    clock.start(at_least_ms=5_000_000)  # already past it: keeps its anchor
    assert clock.now_ms() == 9_100_000


@pytest.mark.parametrize(
    "changes",
    [{"speed": 0}, {"job_failure_rate": 1.5}, {"fault_min_s": 10, "fault_max_s": 5}, {"usage_interval_s": 0}],
    ids=str,
)
def test_impossible_settings_are_refused(changes: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SimConfig(**changes)  # type: ignore[arg-type]


def test_the_public_names_are_pinned() -> None:
    assert sorted(connectors.sim.__all__) == [
        "ClusterModel", "ClusterSpec", "Emit", "Fault", "FaultKind", "FaultPlan", "History", "JobSpec",
        "NodeList", "NodeListError", "NodeSpec", "Refusal", "SimClock", "SimCluster", "SimConfig", "SimFleet",
        "SimStats", "check_placement", "default_nodes_path", "load_nodes", "npu_pool", "parse_split",
    ]  # fmt: skip
    for name in connectors.sim.__all__:
        assert getattr(connectors.sim, name) is not None


def test_the_connector_command_has_a_sim_sub_command_with_its_flags() -> None:
    args = build_parser().parse_args(
        ["connector", "sim", "--cluster", "sim-a", "--split", "3:0", "--speed", "100", "--seed", "7",
         "--fault-rate", "0.01", "--log", "kafka://127.0.0.1:9092"]
    )  # fmt: skip
    assert (args.cluster, args.split, args.speed, args.seed, args.fault_rate) == ("sim-a", "3:0", 100.0, 7, 0.01)
    assert args.start_delay_s == 5.0 and args.usage_interval_s == 300.0


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--split", "3:3"], "--split 3:3"),
        (["--nodes", str(FIXTURES / "absent.csv")], "no such node list"),
        (["--nodes", str(FIXTURES / "sim_openb_nodes.csv"), "--speed", "0"], "speed must be positive"),
        (["--nodes", str(FIXTURES / "sim_openb_nodes.csv"), "--cluster", "Bad_Id"], "cluster 'Bad_Id'"),
    ],
    ids=["split", "nodes", "speed", "cluster id"],
)
def test_bad_flags_fail_before_touching_the_log(
    flags: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["connector", "sim", "--cluster", "sim-a", "--log", "kafka://127.0.0.1:1", *flags]
    assert main(argv) == 2
    assert words in capsys.readouterr().err
