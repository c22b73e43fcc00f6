"""The README's "Bring your model" example runs as printed: its module saved as ``mymodels.py`` in
the working directory, its ``fit`` command (cut to 2 rounds on a small federation) resolves
``mymodels.WeightedMLP`` without ``PYTHONPATH``, trains that module's ``training_step`` and records
its ``self.log`` value per center in ``rounds.parquet``."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The console script's view: the working directory is not on sys.path (``python -c`` would add it).
_ENTRY = "import sys; sys.path.remove(''); from lightning_fed.cli import main; main(sys.argv[1:])"


def _section() -> str:
    text = (ROOT / "README.md").read_text()
    return text[text.index("## Bring your model") : text.index("## Methods")]


@pytest.mark.cli
def test_readme_model_example_runs_from_its_folder(tmp_path: Path) -> None:
    section = _section()
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    command = re.search(r"```bash\n(lightning-fed fit .*?)\n```", section, re.S).group(1)
    (tmp_path / "mymodels.py").write_text(code)
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    argv = shlex.split(command)[1:]
    argv += ["--trainer.rounds=2", "--data.init_args.num_centers=12", f"--output.root={tmp_path / 'runs'}"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT)  # the package itself (an editable install would do the same)
    out = subprocess.run(
        [sys.executable, "-c", _ENTRY, *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "training path: packed vmap: WeightedMLP.training_step" in out.stdout
    (rounds,) = (tmp_path / "runs").rglob("rounds.parquet")
    frame = pl.read_parquet(rounds)
    assert frame["train/weighted_bce"].is_finite().all()
    assert frame.height == 2 * 12
