"""``lightning-fed fit`` with a robust aggregator from a config file: the run's saved config holds it,
and `test` re-evaluates the run under its fingerprint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lightning_fed.cli import main
from tests.cli.test_cli import TINY

pytestmark = pytest.mark.cli  # drives the CLI end to end

CONFIG = """\
algorithm:
  class_path: lightning_fed.algorithms.ABPS
  init_args:
    aggregator:
      class_path: lightning_fed.aggregation.TrimmedMean
      init_args: {beta: 0.25}
"""


def test_fit_takes_the_aggregator_from_a_config_file(tmp_path: Path) -> None:
    config = tmp_path / "abps_trimmed.yaml"
    config.write_text(CONFIG)
    args = ["--config", str(config), *TINY, f"--output.root={tmp_path}", "--output.name=run"]
    main(["fit", *args, "--logger.enabled=false", "--output.progress_bar=false"])
    run = tmp_path / "run"
    saved = yaml.safe_load((run / "config.yaml").read_text())["algorithm"]["init_args"]["aggregator"]
    assert saved == {"class_path": "lightning_fed.aggregation.TrimmedMean", "init_args": {"beta": 0.25}}
    assert json.loads((run / "summary.json").read_text())["rounds"] == 2
    main(["test", "--run-dir", str(run)])  # the saved config's fingerprint matches the checkpoint's
    assert (run / "test.json").is_file()


@pytest.mark.parametrize(
    "argv",
    [
        [
            "--algorithm=lightning_fed.algorithms.SCAFFOLD",
            "--algorithm.init_args.aggregator=CoordinateMedian",
        ],
        ["--config", "MOON"],
    ],
)
def test_an_aggregator_on_a_method_without_one_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str]
) -> None:
    """On main jsonargparse printed the usage block and a three-line "Option 'aggregator' is not
    accepted"; now one line names the method and the methods that take the key (FedDyn and
    BNNFedAvg take it only to refuse it, so they are not listed)."""
    if argv[0] == "--config":
        config = tmp_path / "moon.yaml"
        config.write_text(CONFIG.replace("ABPS", "MOON"))
        argv = ["--config", str(config)]
    with pytest.raises(SystemExit) as exit_:
        main(["fit", *argv, f"--output.root={tmp_path / 'runs'}", "--logger.enabled=false"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    method = "SCAFFOLD" if "SCAFFOLD" in argv[0] else "MOON"
    assert err == [
        f"lightning-fed: error: algorithm.init_args.aggregator: {method} takes no aggregator; drop the key, "
        "or use a method that does: ABPS, FedAvg, DeceFL, DFedAvgM, FedProx, Ditto, FedBN, FedRep"
    ]
    assert not (tmp_path / "runs").exists()
