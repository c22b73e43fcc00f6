"""The ISIC2019 leakage audit (EdgeDRM App. D.3.1) on a hand-built two-center split."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from benchmarks.isic_table7 import audit_counts, table7_markdown
from lightning_fed.data import ISIC2019
from lightning_fed.data.isic_audit import EXCLUDED, TEST, TRAIN, VAL, audit_split, link_groups

# name: (center, label, fold, lesion id, colour); B1 and Bt0 are byte-identical files.
ROWS = {
    "A0": ("A", 0, "train", "L1", 1),
    "A1": ("A", 0, "train", "L1", 2),
    "A2": ("A", 1, "train", "L2", 3),
    "A3": ("A", 0, "train", "L3", 4),
    "A4": ("A", 1, "train", "L3", 5),
    "A5": ("A", 0, "train", "", 6),
    "A6": ("A", 0, "train", "", 7),
    "A7": ("A", 1, "train", "", 8),
    "A8": ("A", 1, "train", "", 9),
    "At0": ("A", 0, "test", "L1", 10),
    "B0": ("B", 0, "train", "L4", 11),
    "B1": ("B", 0, "train", "", 12),
    "B2": ("B", 0, "train", "", 13),
    "B3": ("B", 0, "train", "", 14),
    "Bt0": ("B", 0, "test", "", 12),
}


def _write(root: Path) -> tuple[Path, Path]:
    from PIL import Image

    for name, (*_, colour) in ROWS.items():
        Image.new("RGB", (10, 10), (colour * 10, 0, 0)).save(root / f"{name}.png")
    split, meta = root / "split.csv", root / "meta.csv"
    with open(split, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["image", "center", "label", "fold"])
        w.writerows([n, c, y, f] for n, (c, y, f, _, _) in ROWS.items())
    with open(meta, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["image", "age_approx", "lesion_id"])
        w.writerows([n, 50, lesion] for n, (_, _, _, lesion, _) in ROWS.items())
    return split, meta


def test_link_groups_is_transitive() -> None:
    """Rows 0-1 share key a, 1-2 share b, 3 shares nothing: groups {0, 1, 2} and {3}."""
    assert link_groups([("a", None), ("a", "b"), ("", "b"), ("c",)]).tolist() == [0, 0, 0, 3]


def test_audit_on_the_hand_built_split(tmp_path: Path) -> None:
    """Test overlap: A0 and A1 share lesion L1 with the test image At0; B1 is byte-identical to the test
    image Bt0 (3 rows). Label conflict: lesion L3 holds A3 (label 0) and A4 (label 1) (2 rows). The
    link A7-A8 makes one group. val_fraction 0.5: cell (A, 0) = {A5}, {A6}, target round(1) = 1, so one
    group each way; cell (A, 1) = {A2}, {A7, A8}, target round(1.5) = 2, and whichever group comes
    first goes to validation, leaving the other in train; cell (B, 0) = {B0}, {B2}, {B3}, target 2:
    two singletons to validation, one stays in train."""
    split, meta = _write(tmp_path)
    data = ISIC2019(
        root=str(tmp_path),
        split_csv=str(split),
        size=8,
        val_fraction=0.5,
        metadata_csv=str(meta),
        links=[["A7", "A8"]],
    )
    audit = data.audit
    role = dict(zip(ROWS, audit.role.tolist(), strict=True))
    assert audit.test_overlap == 3 and audit.label_conflict == 2
    assert {n for n, r in role.items() if r == EXCLUDED} == {"A0", "A1", "B1", "A3", "A4"}
    assert role["At0"] == role["Bt0"] == TEST
    assert sorted([role["A5"], role["A6"]]) == [TRAIN, VAL] and role["A7"] == role["A8"]
    assert sorted([role["A2"], role["A7"]]) == [TRAIN, VAL]
    assert sorted(role[n] for n in ("B0", "B2", "B3")) == [TRAIN, VAL, VAL]
    a_val = 1 + (2 if role["A7"] == VAL else 1)  # A5 or A6, then {A7, A8} or A2
    assert audit_counts(data) == [
        {"center": "A", "train": 5 - a_val, "val": a_val, "test": 1, "excluded": 4},
        {"center": "B", "train": 1, "val": 2, "test": 1, "excluded": 1},
    ]
    table = table7_markdown(audit_counts(data)).splitlines()
    assert table[0] == "| center | train | val | test | excluded |"
    assert table[-1] == f"| total | {6 - a_val} | {a_val + 2} | 2 | 5 |"
    built = data.build(0)
    a, b = built.centers
    assert a.n_train + len(a.y_val) == 5 and len(a.y_test) == 1
    assert b.n_train == 1 and len(b.y_val) == 2 and len(b.y_test) == 1
    # The audit's split has its own seed (audit_seed 42): another run seed builds the same roles.
    assert [len(c.y_val) for c in data.build(5).centers] == [len(a.y_val), len(b.y_val)]


def test_every_cell_keeps_a_training_group() -> None:
    """One center, one class, three singleton groups at val_fraction 0.9: target round(2.7) = 3, but the
    last group stays in train."""
    audit = audit_split(np.arange(3), np.zeros(3, int), np.array(["c"] * 3), np.zeros(3, bool), 0.9)
    assert sorted(audit.role.tolist()) == [TRAIN, VAL, VAL]


def test_audit_errors(tmp_path: Path) -> None:
    split, meta = _write(tmp_path)
    with pytest.raises(ValueError, match=r"data\.links needs data\.metadata_csv"):
        ISIC2019(root=str(tmp_path), split_csv=str(split), links=[["A7", "A8"]])
    with pytest.raises(ValueError, match=r"data\.metadata_csv=.* not found"):
        ISIC2019(root=str(tmp_path), split_csv=str(split), metadata_csv=str(tmp_path / "none.csv"))
    bad = tmp_path / "bad.csv"
    bad.write_text("image,age\nA0,50\n")
    with pytest.raises(ValueError, match=r"needs columns image, lesion_id"):
        ISIC2019(root=str(tmp_path), split_csv=str(split), metadata_csv=str(bad))
    with pytest.raises(ValueError, match=r"data\.links: \['A7', 'Z9'\]"):
        ISIC2019(root=str(tmp_path), split_csv=str(split), metadata_csv=str(meta), links=[["A7", "Z9"]])


def test_isic_carries_the_train_augmentation(tmp_path: Path) -> None:
    from lightning_fed.data import RandomResizedCrop

    split, _ = _write(tmp_path)
    crop = RandomResizedCrop(size=8, scale=(0.8, 1.0), flip=True)
    data = ISIC2019(root=str(tmp_path), split_csv=str(split), size=8, augment=crop).build(0)
    assert data.train_augment is crop
    with pytest.raises(ValueError, match=r"size must equal the images' size \(8, 8\)"):
        ISIC2019(root=str(tmp_path), split_csv=str(split), size=8, augment=RandomResizedCrop(size=6))
