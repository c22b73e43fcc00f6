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
