"""What got in a new user's way: ``data --help``, ``data describe`` per source, ``refer --baselines``."""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_fed.cli import main
from lightning_fed.commands.refer import _parser as refer_parser
from lightning_fed.commands.refer import split_listed
from lightning_fed.data import Digits
from lightning_fed.data.describe import describe, shown_columns

pytestmark = pytest.mark.cli  # drives the CLI end to end or spawns a process


def test_data_help_exits_cleanly_and_describe_help_says_what_it_does(capsys: pytest.CaptureFixture) -> None:
    main(["data", "--help"])  # main: exit 2 with an error
    assert "usage: lightning-fed data describe" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["data", "describe", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "Describe the federation" in out and "Train a federation" not in out


def test_describe_an_image_federation_with_its_own_columns() -> None:
    """Class balance, not a 'positive rate', and descriptor entries named for what they are (the
    train class shares), not 'mean year'."""
    data = Digits(num_clients=4, max_per_client=60).build(0)
    table = describe(data)
    assert "pos_rate_train" not in table.columns and {"classes", "majority_share"} <= set(table.columns)
    assert [f"share_class_{k}" for k in range(10)] == [c for c in table.columns if c.startswith("share_")]
    assert shown_columns(table, data)[:6] == [
        "center",
        "n_train",
        "n_val",
        "n_test",
        "classes",
        "majority_share",
    ]
    shares = table.select([f"share_class_{k}" for k in range(10)]).to_numpy()
    assert shares.sum(axis=1) == pytest.approx(1.0)
    assert table["majority_share"].to_numpy() == pytest.approx(shares.max(axis=1))


def test_describe_a_table_names_its_descriptors(capsys: pytest.CaptureFixture) -> None:
    main(["data", "describe", "--data.init_args.num_centers=6", "--data.init_args.num_stays=900"])
    out = capsys.readouterr().out
    assert "positive_rate" in out and "log_n_train" in out and "pos_rate_train" in out
    assert "TeacherICU: 6 centers" in out and "binary label" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["--baselines", "a", "b", "--eta=1"],
        ["--baselines", "a", "--eta=1", "--baselines", "b"],
        ["--baselines=[a,b]", "--eta=1"],
        ["--baselines=a", "--baselines=b", "--eta=1"],
    ],
)
def test_refer_baselines_take_one_or_more_paths_in_every_form(argv: list[str]) -> None:
    args = refer_parser().parse_args(["--run-dir=run", *argv])
    assert split_listed(args.baselines) == ["a", "b"] and args.eta == 1.0


def test_refer_with_two_baselines_names_the_missing_one(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The form the help shows (``--baselines A B``) parses; main failed with "Expected a list"."""
    good = tmp_path / "good"
    good.mkdir()
    (good / "config.yaml").write_text("seed: 0\n")
    (good / "checkpoint.pt").write_bytes(b"")
    with pytest.raises(SystemExit):
        main(["refer", "--run-dir", str(good), "--baselines", str(good), str(tmp_path / "missing")])
    assert f"--baselines {tmp_path / 'missing'}: no config.yaml" in capsys.readouterr().err
