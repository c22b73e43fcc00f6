"""``holdout.md``: the held-out centers' figures per method and fine-tuning budget, paired with the
reference by center and by seed, over hand-made run folders and one real fit."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest

from lightning_fed.holdout_keys import holdout_key
from lightning_fed.reporting import report
from lightning_fed.reporting.runs import read_runs
from lightning_fed.reporting.tables.holdout import holdout_markdown, holdout_rows

NAN = float("nan")
# Held-out centers h0, h1, h2 (the same for both methods of a seed), test AUROC at steps 0 and 5.
# Seed 0, steps 0: fedavg (0.60, 0.70, NaN), local (0.50, 0.55, 0.40): pairs h0, h1 only,
#   d = (-0.10, -0.15), per-seed mean -0.125.
# Seed 1, steps 0: fedavg (0.80, 0.60, 0.70), local (0.70, 0.50, 0.65): d = (-0.10, -0.10, -0.05),
#   per-seed mean -0.08333.
# Center-paired: d_bar = (-0.125 - 0.083333) / 2 = -0.104167 over 5 pairs; every d < 0, so every
# bootstrap mean is < 0 and the verdict is "worse".
# Seed-paired: per-run means over defined centers: fedavg 0.65 and 0.70, local 0.48333 and 0.61667:
#   d = (-0.16667, -0.08333), mean -0.125 over 2 seeds.
AUROC = {
    ("fedavg", 0): {0: [0.60, 0.70, NAN], 5: [0.62, 0.72, NAN]},
    ("fedavg", 1): {0: [0.80, 0.60, 0.70], 5: [0.81, 0.61, 0.71]},
    ("local", 0): {0: [0.50, 0.55, 0.40], 5: [0.60, 0.70, 0.50]},
    ("local", 1): {0: [0.70, 0.50, 0.65], 5: [0.80, 0.60, 0.70]},
}
# (The AUROCs are table inputs, not computed from this support.)
POSITIVES, NEGATIVES = [3, 1, 0], [9, 5, 6]


def _run(root: Path, label: str, seed: int) -> Path:
    run = root / f"{label}-seed{seed}"
    run.mkdir(parents=True)
    summary: dict[str, object] = {"label": label, "method": label, "seed": seed, "test_auroc_mean": 0.7}
    summary |= {"bytes_vs_fedavg": 1.0, "rounds": 2, "wall_seconds": 1.0, "num_centers": 5}
    frames = []
    for steps, aurocs in AUROC[(label, seed)].items():
        summary[holdout_key(steps, "test_auroc_pooled")] = 0.5 + 0.01 * steps + 0.1 * seed
        frames.append(
            pl.DataFrame(
                {
                    "center": [5, 6, 7],
                    "name": ["h0", "h1", "h2"],
                    "steps": [steps] * 3,
                    "n_train": [50, 20, 30],
                    "test_n": [12, 6, 6],
                    "test_positives": POSITIVES,
                    "test_negatives": NEGATIVES,
                    "test_auroc": aurocs,
                    "test_auroc_low": [a - 0.2 if k == 0 else NAN for k, a in enumerate(aurocs)],
                    "test_auroc_high": [min(1.0, a + 0.2) if k == 0 else NAN for k, a in enumerate(aurocs)],
                    "test_auroc_fragile": [False, True, False],
                    "test_robust": [True, False, False],
                }
            )
        )
    pl.concat(frames).write_parquet(run / "holdout.parquet")
    (run / "summary.json").write_text(json.dumps(summary))
    return run


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    for label in ("fedavg", "local"):
        for seed in (0, 1):
            _run(root, label, seed)
    return root


def _row(text: str, method: str, steps: int) -> list[str]:
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) > 2 and cells[0] == method and cells[1] == str(steps):
            return cells
    raise AssertionError(f"no row {method} / {steps} in\n{text}")


def test_hand_computed_holdout_table(root: Path) -> None:
    rows = holdout_rows(read_runs(root))
    assert rows.height == 4 * 2 * 3  # runs x budgets x held-out centers
    text = holdout_markdown(rows)
    local = _row(text, "local", 0)
    # seeds, held-out centers, test rows (events), mean AUROC over seeds of the per-run means
    assert local[2:5] == ["2", "3", "24 (4)"]
    mean = (0.48333333 + 0.61666667) / 2
    sd = math.sqrt(2 * (0.61666667 - mean) ** 2)
    assert local[5] == f"{mean:.3f} ± {sd:.3f}"
    assert local[6] == "0.600 ± 0.141 (1)"  # robust: h0 only, 0.50 and 0.70
    assert local[7] == "0.550 ± 0.071"  # pooled from the summaries: 0.50, 0.60
    assert local[8:10] == ["0", "1"]  # undefined, fragile (h1) per run
    assert local[10].startswith("-0.104 [") and local[10].endswith("(n=5) worse")
    assert local[11].startswith("-0.125 [") and local[11].endswith("(n=2) within noise")
    fedavg = _row(text, "fedavg", 0)
    assert fedavg[8:10] == ["0.5", "1"]  # h2 undefined at seed 0 only; h1 fragile
    assert fedavg[10:] == ["-", "-"]
    # the per-center part: seed 0, h2 is undefined for the reference (its support column)
    h2 = _row(text, "h2", 0)
    assert h2[2:7] == ["30", "6", "0", "6", "undefined"]
    assert h2[7:] == ["-", "0.400"]


def test_holdout_md_is_written_by_report_and_names_a_missing_reference(root: Path, tmp_path: Path) -> None:
    written = report(root, tmp_path / "out", reference="local")
    assert "holdout.md" in {Path(p).name for p in map(str, written.values())}
    text = (tmp_path / "out" / "holdout.md").read_text()
    assert "Δ vs local, by center" in text
    assert _row(text, "fedavg", 5)[10].endswith("better")
    assert pl.read_csv(tmp_path / "out" / "holdout.csv").height == 24
    without = holdout_markdown(holdout_rows([r for r in read_runs(root) if r.label == "local"]))
    assert "No paired columns" in without


@pytest.mark.cli
def test_a_fit_with_held_out_centers_reaches_holdout_md(tmp_path: Path) -> None:
    """End to end: ``fit --evaluation.holdout_centers=2`` then ``report`` writes ``holdout.md`` with one
    row per fine-tuning budget and the two held-out centers' support."""
    from lightning_fed.cli import main

    main(
        [
            "fit",
            "--data.class_path=lightning_fed.data.SyntheticICU",
            "--data.init_args.num_centers=6",
            "--data.init_args.num_stays=1200",
            "--model.init_args.hidden=[8]",
            "--trainer.rounds=2",
            "--evaluation.holdout_centers=2",
            "--evaluation.holdout_finetune_steps=[0,3]",
            f"--output.root={tmp_path / 'runs'}",
            "--output.name=run",
            "--output.progress_bar=false",
            "--logger.enabled=false",
        ]
    )
    report(tmp_path / "runs", tmp_path / "out")
    rows = pl.read_csv(tmp_path / "out" / "holdout.csv")
    assert sorted(set(rows["steps"].to_list())) == [0, 3]
    assert rows.height == 4
    text = (tmp_path / "out" / "holdout.md").read_text()
    assert "held-out centers" in text
