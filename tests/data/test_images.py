"""Image federations: IDX/CIFAR/ISIC readers, label partitions, client splits, colour transforms, builds."""

from __future__ import annotations

import csv
import gzip
import itertools
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from lightning_fed.data import CIFAR, ISIC2019, Digits, DirichletLabels, FashionMNIST, Shards
from lightning_fed.data.center import client_split
from lightning_fed.data.images_io import missing_fashion_files, read_cifar, read_fashion_mnist, read_idx
from lightning_fed.data.images_transforms import (
    ColourTransform,
    client_transforms,
    grey_eight,
    rgb_eight,
    rgb_thirty_two,
    shift_hue,
)
from lightning_fed.data.partition import LabelPool, label_shards

FASHION_ROOT = "/usr/share/datasets/fashion-mnist"


def _deal(
    partition: object, y: np.ndarray, num_centers: int, num_classes: int, seed: int
) -> list[np.ndarray]:
    """The row groups a partitioner deals a labelled pool into (the names dropped)."""
    return [rows for _, rows in partition.assign(LabelPool(y, num_classes, num_centers), seed=seed)]


# ---------------------------------------------------------------- IDX


def _idx_bytes(code: int, shape: tuple[int, ...], payload: bytes) -> bytes:
    return bytes([0, 0, code, len(shape)]) + struct.pack(f">{len(shape)}I", *shape) + payload


def test_read_idx_parses_hand_written_files(tmp_path: Path) -> None:
    """uint8 [2, 2, 3] holding 0..11 (gzip) and big-endian int32 [2] holding 258, -1 (raw)."""
    (tmp_path / "a-idx3-ubyte.gz").write_bytes(gzip.compress(_idx_bytes(0x08, (2, 2, 3), bytes(range(12)))))
    x = read_idx(tmp_path / "a-idx3-ubyte.gz")
    assert x.dtype == np.uint8 and x.shape == (2, 2, 3)
    assert x[1, 0, 2] == 8  # C order: 1*6 + 0*3 + 2
    (tmp_path / "b-idx1").write_bytes(_idx_bytes(0x0C, (2,), bytes([0, 0, 1, 2, 255, 255, 255, 255])))
    assert read_idx(tmp_path / "b-idx1").tolist() == [258, -1]


def test_read_idx_rejects_bad_files(tmp_path: Path) -> None:
    (tmp_path / "bad").write_bytes(bytes([1, 0, 8, 1, 0, 0, 0, 1, 7]))
    with pytest.raises(ValueError, match="magic"):
        read_idx(tmp_path / "bad")
    (tmp_path / "short").write_bytes(_idx_bytes(0x08, (3,), bytes([1, 2])))
    with pytest.raises(ValueError, match="bytes follow"):
        read_idx(tmp_path / "short")


def test_fashion_mnist_missing_root_names_field_and_package(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"data\.root.*apt-get install dataset-fashion-mnist"):
        FashionMNIST(root=str(tmp_path))


@pytest.mark.skipif(bool(missing_fashion_files(FASHION_ROOT)), reason="dataset-fashion-mnist not installed")
def test_real_fashion_mnist_pooled_and_federation() -> None:
    """70,000 images, 7,000 per class; the first train and first test items are ankle boots (9)."""
    images, labels = read_fashion_mnist(FASHION_ROOT)
    assert images.shape == (70000, 1, 28, 28) and images.dtype == np.uint8
    assert labels[0] == 9 and labels[60000] == 9
    assert np.bincount(labels).tolist() == [7000] * 10
    data = FashionMNIST(num_clients=4, max_per_client=200).build(0)
    assert data.num_classes == 10 and data.feature_names == ("grey",)
    for c in data.centers:
        assert c.x_train.shape[1:] == (1, 28, 28) and c.n_train + len(c.y_val) + len(c.y_test) == 200
        assert c.attributes["classes"] <= 5


# ---------------------------------------------------------------- partitions


def test_label_shards_hand_case() -> None:
    """Classes of sizes 2, 5, 3 into 4 shards: quotas 0.8, 2.0, 1.2 -> floors 0, 2, 1, the spare shard to
    the largest remainder (class 0): class 0 = 1 shard, class 1 = 2 shards (3 + 2 images), class 2 = 1."""
    y = np.array([0, 0, 1, 1, 1, 1, 1, 2, 2, 2])
    shards = label_shards(y, 4)
    assert [s.tolist() for s in shards] == [[0, 1], [2, 3, 4], [5, 6], [7, 8, 9]]


def test_shards_give_each_client_exactly_per_client_shards() -> None:
    y = np.repeat(np.arange(10), 40)[np.random.default_rng(0).permutation(400)]
    groups = _deal(Shards(per_client=5), y, 4, 10, 3)
    shards = label_shards(y, 20)
    assert all(len(np.unique(y[s])) == 1 and len(s) == 20 for s in shards)
    owner = {int(i): k for k, s in enumerate(shards) for i in s}
    for g in groups:
        assert len(g) == 100 and len(np.unique(y[g])) <= 5
        assert len({owner[int(i)] for i in g}) == 5  # a union of exactly five whole shards
    assert sorted(np.concatenate(groups).tolist()) == list(range(400))
    again = _deal(Shards(per_client=5), y, 4, 10, 3)
    assert all(np.array_equal(a, b) for a, b in zip(groups, again, strict=True))
    other = _deal(Shards(per_client=5), y, 4, 10, 4)
    assert not all(np.array_equal(a, b) for a, b in zip(groups, other, strict=True))


def test_shards_defaults_and_errors() -> None:
    assert Shards().shards_per_client(10) == 5
    assert Shards().shards_per_client(20) == 25 and Shards().shards_per_client(100) == 25
    with pytest.raises(ValueError, match="per_client"):
        _deal(Shards(), np.zeros(30, dtype=np.int64), 8, 10, 0)
    with pytest.raises(ValueError, match=r"data\.partition\.per_client"):
        Shards(per_client=0)


def test_dirichlet_labels_seeded_disjoint_and_skewed() -> None:
    y = np.repeat(np.arange(10), 100)
    parts = _deal(DirichletLabels(alpha=0.3), y, 8, 10, 1)
    assert sorted(np.concatenate(parts).tolist()) == list(range(1000))
    assert min(len(p) for p in parts) >= 10
    again = _deal(DirichletLabels(alpha=0.3), y, 8, 10, 1)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    other = _deal(DirichletLabels(alpha=0.3), y, 8, 10, 2)
    assert not all(np.array_equal(a, b) for a, b in zip(parts, other, strict=True))

    def top_share(alpha: float) -> float:
        groups = _deal(DirichletLabels(alpha=alpha), y, 8, 10, 0)
        return float(np.mean([np.bincount(y[g]).max() / len(g) for g in groups]))

    assert top_share(0.05) > 0.6 > 0.2 > top_share(1000.0)
    with pytest.raises(ValueError, match=r"data\.partition\.alpha"):
        DirichletLabels(alpha=0.0)


def test_client_split_70_30_then_20_80() -> None:
    """One class of 100: 70 train, 30 held out -> 6 val, 24 test. Two classes of 50 and 30:
    class 0 -> 35 / round(0.2*15)=3 / 12, class 1 -> 21 / round(0.2*9)=2 / 7, so 56 / 5 / 19."""
    tr, va, te = client_split(np.zeros(100, dtype=np.int64), seed=0, center=0)
    assert (len(tr), len(va), len(te)) == (70, 6, 24)
    y = np.array([0] * 50 + [1] * 30)
    tr, va, te = client_split(y, seed=0, center=1)
    assert (len(tr), len(va), len(te)) == (56, 5, 19)
    assert np.bincount(y[va]).tolist() == [3, 2]
    assert sorted(np.concatenate([tr, va, te]).tolist()) == list(range(80))
    assert all(np.array_equal(a, b) for a, b in zip((tr, va, te), client_split(y, 0, 1), strict=True))


# ---------------------------------------------------------------- colour transforms


def test_transform_hand_values() -> None:
    """Pure red (h=0, s=v=1) shifted by 0.1 turn: h*6 = 0.6 in sector 0 -> (v, v(1 - s(1 - 0.6)), 0)."""
    red = torch.tensor([1.0, 0.0, 0.0]).view(1, 3, 1, 1)
    assert torch.allclose(ColourTransform(hue=0.1)(red).flatten(), torch.tensor([1.0, 0.6, 0.0]), atol=1e-6)
    grey_px = torch.full((1, 3, 2, 2), 0.3)
    assert torch.allclose(ColourTransform(saturation=1.5)(grey_px), grey_px, atol=1e-4)  # no chroma
    assert torch.allclose(ColourTransform(gamma=0.5)(torch.full((1, 1, 1, 1), 0.25)), torch.tensor(0.5))
    ramp = torch.tensor([0.0, 1.0]).view(1, 1, 1, 2)  # mean 0.5: 0.5 x + 0.25
    assert torch.allclose(ColourTransform(contrast=0.5)(ramp).flatten(), torch.tensor([0.25, 0.75]))
    assert torch.allclose(ColourTransform(brightness=0.1)(ramp).flatten(), torch.tensor([0.1, 1.0]))
    poster = ColourTransform(posterize_bits=2)(torch.full((1, 1, 1, 1), 200 / 255))
    assert torch.allclose(poster, torch.tensor(192 / 255))  # 200 = 0b11001000 -> 0b11000000


def test_shift_hue_and_gamma_match_torchvision() -> None:
    """The closed-form HSV hue rotation equals torchvision's adjust_hue (the reference), including grey
    pixels and ties between the largest channels; gamma equals adjust_gamma with gain 1."""
    import torchvision.transforms.functional as TF

    x = torch.rand(4, 3, 8, 8, generator=torch.Generator().manual_seed(2))
    x[0, :, :2] = 0.5  # grey
    x[1, 1] = x[1, 0]  # red == green
    for shift in (-0.5, -0.15, -0.1, 0.1, 0.37):
        assert torch.allclose(shift_hue(x, shift), TF.adjust_hue(x, shift), atol=1e-5)
    assert torch.allclose(ColourTransform(gamma=1.4)(x), TF.adjust_gamma(x, 1.4), atol=1e-6)


def test_eight_client_transforms_distinct_and_deterministic() -> None:
    x = torch.rand(3, 3, 6, 6, generator=torch.Generator().manual_seed(0))
    family = rgb_eight()
    assert len(set(family)) == 8
    assert {(t.gamma, t.hue, t.saturation) for t in family} == set(
        itertools.product((0.6, 1.4), (-0.1, 0.1), (0.5, 1.5))
    )
    outs = [t(x) for t in family]
    assert all(torch.equal(o, t(x)) for o, t in zip(outs, family, strict=True))
    for a, b in itertools.combinations(outs, 2):
        assert (a - b).abs().max() > 1e-2
    g = torch.rand(3, 1, 6, 6, generator=torch.Generator().manual_seed(1))
    for a, b in itertools.combinations([t(g) for t in grey_eight()], 2):
        assert (a - b).abs().max() > 1e-2
    assert client_transforms(3, 10) == tuple(rgb_thirty_two()[:10])
    assert client_transforms(3, 8)[5] == family[5] and client_transforms(1, 3) == grey_eight()[:3]
    assert len(set(rgb_thirty_two())) == 32 and sum(t.posterize_bits == 2 for t in rgb_thirty_two()) == 5


# ---------------------------------------------------------------- CIFAR


def _write_cifar10(root: Path, per_batch: int = 12) -> None:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for b, name in enumerate([f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]):
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        data[0, 0], data[0, 1024 + 33], data[0, 2048] = 255, 7, b  # R(0,0), G(1,1), B(0,0)
        labels = [(i + b) % 10 for i in range(per_batch)]
        with open(folder / name, "wb") as fh:
            pickle.dump({b"data": data, b"labels": labels}, fh)


def test_cifar_absent_root_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"data\.root.*cifar-10-batches-py"):
        CIFAR(root=str(tmp_path))
    with pytest.raises(ValueError, match=r"data\.variant"):
        CIFAR(root=str(tmp_path), variant=50)


def test_tiny_cifar10_root_loads_and_builds(tmp_path: Path) -> None:
    _write_cifar10(tmp_path)
    images, labels = read_cifar(tmp_path, 10)
    assert images.shape == (72, 3, 32, 32) and labels.tolist()[:3] == [0, 1, 2]
    assert (images[0, 0, 0, 0], images[0, 1, 1, 1], images[0, 2, 0, 0]) == (255, 7, 0)
    assert images[60, 2, 0, 0] == 5  # the test batch (b = 5) comes last
    with pytest.raises(ValueError, match="per_client"):  # 4 shards cannot hold 10 classes
        CIFAR(root=str(tmp_path), num_clients=2, partition=Shards(per_client=2)).build(0)
    data = CIFAR(root=str(tmp_path), num_clients=2, partition=Shards(per_client=5), transforms=False).build(0)
    assert data.num_classes == 10 and data.feature_names == ("red", "green", "blue")
    assert sum(c.n_train + len(c.y_val) + len(c.y_test) for c in data.centers) == 72
    c = data.centers[0]
    mean, std = torch.tensor((0.4914, 0.4822, 0.4465)), torch.tensor((0.2470, 0.2435, 0.2616))
    raw = c.x_train * std.view(1, 3, 1, 1) + mean.view(1, 3, 1, 1)
    assert torch.allclose(raw * 255, (raw * 255).round(), atol=1e-3)  # exactly the 8-bit pixels / 255
    assert c.x_train.dtype == torch.float32 and set(c.y_train.tolist()) <= set(range(10))


def test_cifar100_fine_and_coarse_labels(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    for name, n in (("train", 5), ("test", 3)):
        with open(folder / name, "wb") as fh:
            data = np.zeros((n, 3072), dtype=np.uint8)
            pickle.dump({b"data": data, b"fine_labels": list(range(n)), b"coarse_labels": [19] * n}, fh)
    assert read_cifar(tmp_path, 100)[1].tolist() == [0, 1, 2, 3, 4, 0, 1, 2]
    assert read_cifar(tmp_path, 20)[1].tolist() == [19] * 8


def _python2_batch(data: np.ndarray, labels: list[int]) -> bytes:
    """A batch byte for byte as the real files are (cPickle protocol 2 from Python 2: ``str`` keys,
    ``numpy.core.multiarray._reconstruct`` and the pixels as one binary string)."""

    def text(b: bytes) -> bytes:  # a Python 2 str
        return b"U" + bytes([len(b)]) + b if len(b) < 256 else b"T" + struct.pack("<I", len(b)) + b

    n = struct.pack("<H", data.shape[0])
    dtype = b"cnumpy\ndtype\n" + text(b"u1") + b"K\x00K\x01\x87R(K\x03" + text(b"|")
    dtype += b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb"
    array = b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85" + text(b"b") + b"\x87R"
    array += b"(K\x01M" + n + b"M\x00\x0c\x86" + dtype + b"\x89" + text(data.tobytes()) + b"tb"
    listed = b"](" + b"".join(b"K" + bytes([v]) for v in labels) + b"e"
    return b"\x80\x02}(" + text(b"data") + array + text(b"labels") + listed + b"u."


def test_cifar_batches_pickled_like_the_real_files_load(tmp_path: Path) -> None:
    """The real batches are Python 2 pickles read with ``encoding="bytes"``; a protocol-2 pickle written
    by Python 3 spells bytes with ``_codecs.encode``: both pass the restricted unpickler."""
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for b, name in enumerate(names):
        data = np.full((3, 3072), b, dtype=np.uint8)
        data[:, 1] = [7, 8, 9]
        labels = [b, (b + 1) % 10, (b + 2) % 10]
        if b % 2 == 0:
            (folder / name).write_bytes(_python2_batch(data, labels))
        else:
            batch = {b"batch_label": b"batch", b"labels": labels, b"data": data, b"filenames": [b"a.png"] * 3}
            (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    images, labels = read_cifar(tmp_path, 10)
    assert images.shape == (18, 3, 32, 32) and images.dtype == np.uint8
    assert images[:, 0, 0, 0].tolist() == [b for b in range(6) for _ in range(3)]
    assert images[:3, 0, 0, 1].tolist() == [7, 8, 9] and labels.tolist()[:6] == [0, 1, 2, 1, 2, 3]


class _Exploit:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_cifar_batch_that_runs_code_is_refused_without_running(tmp_path: Path) -> None:
    _write_cifar10(tmp_path)
    marker = tmp_path / "pwned"
    target = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    target.write_bytes(pickle.dumps({b"data": _Exploit(marker), b"labels": [0]}, protocol=2))
    with pytest.raises(
        ValueError, match=r"refuses to load (posix|nt|os)\.system from .*data_batch_3: not a CIFAR batch"
    ):
        read_cifar(tmp_path, 10)
    assert not marker.exists()


# ---------------------------------------------------------------- ISIC2019


def _write_isic(root: Path) -> Path:
    from PIL import Image

    rows = []
    spec = {"0": (6, 2), "1": (5, 2)}  # center: (train fold, test fold)
    for center, (n_train, n_test) in spec.items():
        for i in range(n_train + n_test):
            name = f"ISIC_{center}_{i}"
            colour = (10 * i, 100, 200) if center == "0" else (50, 50, 50)
            Image.new("RGB", (20, 12), colour).save(root / f"{name}.png")
            rows.append(
                {"image": name, "center": center, "label": i % 3, "fold": "train" if i < n_train else "test"}
            )
    csv_path = root / "split.csv"
    with open(csv_path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["image", "center", "label", "fold"])
        writer.writeheader()
        writer.writerows(rows)
    return csv_path


def test_isic_tiny_images_natural_partition(tmp_path: Path) -> None:
    csv_path = _write_isic(tmp_path)
    data = ISIC2019(root=str(tmp_path), split_csv=str(csv_path), size=8).build(0)
    assert [c.name for c in data.centers] == ["center-0", "center-1"] and data.num_classes == 8
    c0, c1 = data.centers
    assert len(c0.y_test) == 2 and c0.n_train + len(c0.y_val) == 6
    assert len(c1.y_test) == 2 and c1.n_train + len(c1.y_val) == 5
    assert c0.x_train.shape[1:] == (3, 8, 8) and c0.metadata.shape == (8,)
    # a uniform (50, 50, 50) image normalizes to (50/255 - mean_c) / std_c everywhere
    expect = (50 / 255 - torch.tensor((0.485, 0.456, 0.406))) / torch.tensor((0.229, 0.224, 0.225))
    assert torch.allclose(c1.x_test[0, :, 3, 3], expect, atol=1e-5)
    assert torch.allclose(c0.metadata.sum(), torch.tensor(1.0, dtype=torch.float64))


def test_isic_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"data\.root"):
        ISIC2019(root=str(tmp_path / "nope"), split_csv=str(tmp_path / "s.csv"))
    csv_path = _write_isic(tmp_path)
    with pytest.raises(ValueError, match=r"data\.split_csv"):
        ISIC2019(root=str(tmp_path), split_csv=str(tmp_path / "missing.csv"))
    with pytest.raises(ValueError, match=r"data\.num_classes"):
        ISIC2019(root=str(tmp_path), split_csv=str(csv_path), num_classes=2)
    (tmp_path / "ISIC_0_0.png").unlink()
    with pytest.raises(ValueError, match=r"lacks 1 images"):
        ISIC2019(root=str(tmp_path), split_csv=str(csv_path))


# ---------------------------------------------------------------- Digits (full pipeline)


def test_digits_federation_contract() -> None:
    from sklearn.datasets import load_digits

    data = Digits(num_clients=4, transforms=False).build(7)
    assert data.num_classes == 10 and data.num_features == 1 and data.num_centers == 4
    digits = load_digits()
    lookup = {
        (img / 16.0).astype(np.float32).tobytes(): int(t)
        for img, t in zip(digits.images, digits.target, strict=True)
    }
    seen = set()
    for c in data.centers:
        assert c.feature_mean is None and c.attributes["transform"] == "identity"
        hist = torch.bincount(c.y_train.long(), minlength=10).double()
        assert torch.allclose(c.metadata, hist / hist.sum())
        assert c.attributes["classes"] <= 5
        for x, y in ((c.x_train, c.y_train), (c.x_val, c.y_val), (c.x_test, c.y_test)):
            raw = (x[:, 0] * 0.3760 + 0.3053).numpy()
            raw = (np.round(raw * 16) / 16).astype(np.float32)  # undo normalization up to float error
            assert [lookup[r.tobytes()] for r in raw] == y.long().tolist()  # pixels travel with their label
            seen.update(r.tobytes() for r in raw)
    again = Digits(num_clients=4, transforms=False).build(7)
    assert all(torch.equal(a.x_test, b.x_test) for a, b in zip(data.centers, again.centers, strict=True))


def test_digits_transforms_subsample_and_config_errors() -> None:
    data = Digits(num_clients=8, max_per_client=40).build(0)
    assert all(c.n_train + len(c.y_val) + len(c.y_test) == 40 for c in data.centers)
    assert len({c.attributes["transform"] for c in data.centers}) == 8
    with pytest.raises(ValueError, match=r"data\.num_clients"):
        Digits(num_clients=0)
    with pytest.raises(ValueError, match=r"data\.partition"):
        Digits(partition="shards")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"data\.transforms"):
        Digits(transforms="yes")  # type: ignore[arg-type]
