"""ISIC2019 skin-lesion images split by their FLamby source centers (EdgeDRM Sec. 5.4, App. D.3).

The split CSV (FLamby's ``train_test_split``) has one row per image with columns ``image`` (file name,
with or without extension), ``center`` (source center id), ``label`` (class id 0..7; FLamby's ``target``
is accepted too) and ``fold`` (``train`` or ``test``). Each center is one client (natural partition).
A center's ``test`` fold is its test split; its ``train`` fold is split, stratified by class and seeded,
into ``1 - val_fraction`` training and ``val_fraction`` validation.

With ``metadata_csv`` (the ISIC2019 training metadata: columns ``image`` and ``lesion_id``) the split
follows App. D.3.1 instead (:mod:`lightning_fed.data.isic_audit`). Images are grouped by lesion id
and by byte-identical files, plus any ``links`` given. Training images whose group reaches the test
fold are removed, and so are training groups with conflicting labels. The rest is split by group
within center-class cells, with ``audit_seed`` (the paper: 42). ``benchmarks/isic_table7.py`` prints
the paper's Table 7 (train / validation / test / excluded per center) from :attr:`ISIC2019.audit`.

Images are read with Pillow, converted to RGB, resized with bilinear interpolation so the shorter
side is ``size`` and centre-cropped to ``size x size`` (the paper's deterministic evaluation view;
224 then 200 there, 64 by default here for CPU runs), and normalized with the ImageNet channel
statistics (App. D.3.1). The FLamby preprocessed images already carry the shades-of-grey colour
constancy, so none is applied here.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from lightning_fed.data.augment import Augment, check_image_size
from lightning_fed.data.base import DataSource
from lightning_fed.data.center import CenterData, FederatedData, federate, stratified_split, subsample
from lightning_fed.data.images import RGB, image_center, image_options
from lightning_fed.data.images_transforms import client_transforms
from lightning_fed.data.isic_audit import (
    EXCLUDED,
    TRAIN,
    VAL,
    Audit,
    audit_split,
    file_digests,
    link_groups,
)
from lightning_fed.seeding import numpy_rng
from lightning_fed.validation import check_int, check_number

__all__ = ["ISIC2019", "load_square_rgb"]

_EXTENSIONS = ("", ".jpg", ".jpeg", ".png")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def load_square_rgb(path: str | Path, size: int) -> np.ndarray:
    """One image as ``uint8 [3, size, size]``: RGB, shorter side resized to ``size`` (bilinear), crop."""
    from PIL import Image

    with Image.open(path) as img:
        img = img.convert("RGB")
        w, h = img.size
        scale = size / min(w, h)
        nw, nh = max(size, round(w * scale)), max(size, round(h * scale))
        img = img.resize((nw, nh), Image.BILINEAR)
        left, top = (nw - size) // 2, (nh - size) // 2
        img = img.crop((left, top, left + size, top + size))
        return np.asarray(img, dtype=np.uint8).transpose(2, 0, 1).copy()


def _center_key(name: str) -> tuple[int, int | str]:
    return (0, int(name)) if name.lstrip("-").isdigit() else (1, name)


class ISIC2019(DataSource):
    """ISIC2019 with FLamby's six source centers as clients.

    Args:
        root: Folder of the (preprocessed) images.
        split_csv: The split CSV (columns ``image, center, label, fold``).
        size: Side of the square images (paper: 200 crops of 224; default 64 for CPU).
        num_classes: ``K`` (8 for ISIC2019); labels must lie in ``0..K-1``.
        val_fraction: Share of each center's train fold used for validation.
        transforms: Also apply the App. D.1 colour transforms (off by default: the centers differ naturally).
        max_per_client: Keep at most this many images per center (seeded, before the split), or None.
        seed: Fixes the data while training seeds vary; None = run seed.
        metadata_csv: ISIC2019 training metadata (``image``, ``lesion_id``): run the App. D.3.1 audit
            and grouped split (module docstring); None: a stratified split of each train fold.
        links: Extra duplicate pairs ``[[image_a, image_b], ...]`` linked by the audit (the paper's
            visually confirmed near duplicate), by image name without extension; needs ``metadata_csv``.
        audit_seed: Seed of the audit's grouped split (the paper: 42); it does not vary with the run.
        augment: Train-time augmentation (:class:`~lightning_fed.data.augment.RandomResizedCrop` at
            ``size``; None: none), as the other image sources take it.
    """

    def __init__(
        self,
        root: str,
        split_csv: str,
        size: int = 64,
        num_classes: int = 8,
        val_fraction: float = 0.2,
        transforms: bool = False,
        max_per_client: int | None = None,
        seed: int | None = None,
        metadata_csv: str | None = None,
        links: list[list[str]] | None = None,
        audit_seed: int = 42,
        augment: Augment | None = None,
    ) -> None:
        self.size = check_int("data.size", size, 8)
        self.num_classes = check_int("data.num_classes", num_classes, 2)
        self.val_fraction = check_number("data.val_fraction", val_fraction, 0.0, strict=True)
        if self.val_fraction >= 1.0:
            raise ValueError(f"data.val_fraction must be < 1, got {val_fraction}")
        self.transforms, self.max_per_client, self.seed = image_options(transforms, max_per_client, seed)
        self.root, self.split_csv = str(root), str(split_csv)
        if augment is not None and not isinstance(augment, Augment):
            raise ValueError(
                f"data.augment must be an augmentation (lightning_fed.data.augment.RandomResizedCrop) or "
                f"null, got {augment!r}"
            )
        check_image_size(augment, (self.size, self.size))
        self.augment = augment
        if not Path(root).is_dir():
            raise ValueError(f"data.root={root!r} is not a folder: point it at the ISIC2019 images")
        if not Path(split_csv).is_file():
            raise ValueError(
                f"data.split_csv={split_csv!r} not found: point it at FLamby's ISIC2019 split CSV"
            )
        self._paths, self._centers, self._labels, self._test = self._read_split()
        self.audit_seed = check_int("data.audit_seed", audit_seed, 0)
        if links and metadata_csv is None:
            raise ValueError("data.links needs data.metadata_csv (the links extend the lesion audit)")
        self.metadata_csv = None if metadata_csv is None else str(metadata_csv)
        self._audit = None if metadata_csv is None else self._run_audit(links or [])

    def _run_audit(self, links: list[list[str]]) -> Audit:
        if not Path(self.metadata_csv).is_file():
            raise ValueError(
                f"data.metadata_csv={self.metadata_csv!r} not found: point it at the ISIC2019 metadata CSV"
            )
        with open(self.metadata_csv, newline="") as fh:
            meta = list(csv.DictReader(fh))
        if not meta or not {"image", "lesion_id"} <= set(meta[0]):
            raise ValueError(
                f"data.metadata_csv={self.metadata_csv!r} needs columns image, lesion_id "
                f"(has {sorted(meta[0]) if meta else 'no rows'})"
            )
        lesion = {Path(r["image"].strip()).stem: (r["lesion_id"] or "").strip() for r in meta}
        names = [p.stem for p in self._paths]
        known = set(names)
        for pair in links:
            if len(pair) != 2 or not set(pair) <= known:
                raise ValueError(f"data.links: {pair!r} must be two image names of data.split_csv")
        linked: dict[str, list[str]] = {}
        for k, (a, b) in enumerate(links):
            linked.setdefault(a, []).append(f"link:{k}")
            linked.setdefault(b, []).append(f"link:{k}")
        digests = file_digests(self._paths)
        keys = [
            (f"lesion:{lesion[n]}" if lesion.get(n) else None, f"file:{d}", *linked.get(n, []))
            for n, d in zip(names, digests, strict=True)
        ]
        return audit_split(
            link_groups(keys), self._labels, self._centers, self._test, self.val_fraction, self.audit_seed
        )

    @property
    def audit(self) -> Audit | None:
        """The App. D.3.1 audit (a role per row of ``split_csv``), or None without ``metadata_csv``."""
        return self._audit

    @property
    def row_centers(self) -> np.ndarray:
        """The source center of every row of ``split_csv``."""
        return self._centers

    @property
    def center_names(self) -> list[str]:
        """The source centers in center-id order (``center-<name>`` is center ``k``'s name)."""
        return sorted(set(self._centers.tolist()), key=_center_key)

    def _read_split(self) -> tuple[list[Path], np.ndarray, np.ndarray, np.ndarray]:
        with open(self.split_csv, newline="") as fh:
            rows = list(csv.DictReader(fh))
        columns = set(rows[0]) if rows else set()
        label_col = "label" if "label" in columns else "target"
        missing = {"image", "center", label_col, "fold"} - columns
        if missing or not rows:
            raise ValueError(
                f"data.split_csv={self.split_csv!r} needs columns image, center, label, fold (has "
                f"{sorted(columns)}; missing {sorted(missing) or 'rows'})"
            )
        folds = {r["fold"].strip().lower() for r in rows}
        if not folds <= {"train", "test"}:
            raise ValueError(f"data.split_csv: fold must be 'train' or 'test', found {sorted(folds)}")
        labels = np.array([int(float(r[label_col])) for r in rows], dtype=np.int64)
        if labels.min() < 0 or labels.max() >= self.num_classes:
            raise ValueError(
                f"data.split_csv has labels {labels.min()}..{labels.max()} outside "
                f"0..{self.num_classes - 1}: set data.num_classes"
            )
        paths, absent = [], []
        for r in rows:
            found = next(
                (p for e in _EXTENSIONS if (p := Path(self.root) / f"{r['image']}{e}").is_file()), None
            )
            if found is None:
                absent.append(r["image"])
            paths.append(found)
        if absent:
            raise ValueError(
                f"data.root={self.root!r} lacks {len(absent)} images of data.split_csv (e.g. {absent[:3]}): "
                "point data.root at the folder holding them"
            )
        centers = np.array([r["center"].strip() for r in rows])
        test = np.array([r["fold"].strip().lower() == "test" for r in rows])
        return paths, centers, labels, test

    def build(self, seed: int) -> FederatedData:
        """One client per center, in sorted center order; only the kept images are read.

        Args:
            seed: Run seed (overridden by ``data.seed``); the subsample and the val split draw from it.
        """
        seed = int(self.seed if self.seed is not None else seed)
        names = self.center_names
        colours = client_transforms(3, len(names)) if self.transforms else None

        def center(k: int, name: str, rows: np.ndarray) -> CenterData:
            rows = subsample(rows, self.max_per_client, seed, k)
            train_fold, test_fold = rows[~self._test[rows]], rows[self._test[rows]]
            if len(train_fold) < 2 or len(test_fold) < 1:
                raise ValueError(
                    f"center {name!r} keeps {len(train_fold)} train-fold and {len(test_fold)} test-fold "
                    "images: raise data.max_per_client"
                )
            if self._audit is None:
                fractions = (1.0 - self.val_fraction, self.val_fraction)
                tr, va = stratified_split(self._labels[train_fold], fractions, numpy_rng(seed, "split", k))
                train_rows, val_rows = train_fold[tr], train_fold[va]
            else:
                train_rows = train_fold[self._audit.role[train_fold] == TRAIN]
                val_rows = train_fold[self._audit.role[train_fold] == VAL]
            local = np.concatenate([train_rows, val_rows, test_fold])
            images = np.stack([load_square_rgb(self._paths[i], self.size) for i in local])
            bounds = np.cumsum([len(train_rows), len(val_rows)])
            parts = np.split(np.arange(len(local)), bounds)
            return image_center(
                f"center-{name}",
                images,
                self._labels[local],
                (parts[0], parts[1], parts[2]),
                self.num_classes,
                IMAGENET_MEAN,
                IMAGENET_STD,
                None if colours is None else colours[k],
                {"source": "ISIC2019", "center": name},
            )

        kept = [
            self._centers == name
            if self._audit is None
            else (self._centers == name) & (self._audit.role != EXCLUDED)
            for name in names
        ]
        return federate(
            [(k, name, np.flatnonzero(mask)) for k, (name, mask) in enumerate(zip(names, kept, strict=True))],
            center,
            feature_names=RGB,
            num_classes=self.num_classes,
            metadata_names=[f"share_class_{k}" for k in range(self.num_classes)],
            train_augment=self.augment,
        )
