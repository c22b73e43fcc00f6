"""Image federations for EdgeDRM (Sec. 5.1, App. D.1): label-skewed clients with fixed colour transforms.

An :class:`ImageSource` pools a collection's official train and test images, deals them to
``num_clients`` centers (the EdgeDRM paper's clients) with a partitioner of
:mod:`lightning_fed.data.partition` (:class:`~lightning_fed.data.partition.Shards` by default,
:class:`~lightning_fed.data.partition.DirichletLabels`, any other), optionally subsamples each client
to ``max_per_client`` images, splits each client 70 / 30 and the held-out 30 % into
20 % validation / 80 % test (stratified), applies the client's deterministic colour transform once
(:mod:`lightning_fed.data.images_transforms`), and normalizes every channel with the collection's
fixed mean / std (constants, so no client reads another's pixels).

Each :class:`~lightning_fed.data.center.CenterData` then holds float32 images ``[n, C, H, W]``, float32
class ids ``0., ..., K-1`` as labels, ``metadata`` = the normalized class histogram ``[K]`` (float64) of
its train split, and ``attributes = {"transform": ..., "classes": ...}``. ``feature_names`` are the channel
names, so ``num_features`` is the number of channels, and ``num_classes = K``.

``augment`` (e.g. :class:`~lightning_fed.data.augment.RandomResizedCrop`, chosen by ``class_path``; off
by default) is a train-time augmentation: the stored images stay as built, and the federation carries
it as :attr:`FederatedData.train_augment <lightning_fed.data.center.FederatedData.train_augment>`, which
every engine applies to each training batch with draws from the run seed
(:mod:`lightning_fed.data.augment`). Validation and test images are never augmented.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lightning_fed.data.augment import Augment, check_image_size
from lightning_fed.data.base import DataSource, partitioner_key
from lightning_fed.data.center import CenterData, FederatedData, client_split, federate, subsample
from lightning_fed.data.images_io import missing_fashion_files, read_cifar, read_fashion_mnist
from lightning_fed.data.images_transforms import ColourTransform, client_transforms
from lightning_fed.data.partition import LabelPool, Partitioner, Shards
from lightning_fed.data.split import Split
from lightning_fed.extras import missing_extra
from lightning_fed.seeding import numpy_rng
from lightning_fed.validation import check_int

__all__ = ["CIFAR", "Digits", "FashionMNIST", "ImageSource", "image_center", "image_options"]

GREY = ("grey",)
RGB = ("red", "green", "blue")


def _unit_float(images: np.ndarray) -> Tensor:
    """``uint8`` images scaled to ``[0, 1]``, float images as they are, as float32."""
    x = torch.from_numpy(np.ascontiguousarray(images))
    return x.float().div_(255.0) if x.dtype == torch.uint8 else x.float()


def image_center(
    name: str,
    images: np.ndarray,
    labels: np.ndarray,
    rows: tuple[np.ndarray, np.ndarray, np.ndarray],
    num_classes: int,
    mean: Sequence[float],
    std: Sequence[float],
    transform: ColourTransform | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> CenterData:
    """One client: its train / val / test images transformed, normalized, with a class-histogram descriptor.

    ``x <- (T(x) - mean_c) / std_c`` per channel ``c`` with ``T`` the client's colour transform (identity
    when None); ``metadata_k = #{train images of class k} / n_train``.

    Args:
        name: Client name.
        images: Pooled images ``[N, C, H, W]`` (``uint8``, or float in ``[0, 1]``).
        labels: Pooled class ids ``[N]``.
        rows: The client's train, validation and test indices into the pooled arrays.
        num_classes: ``K``.
        mean, std: Per-channel normalization constants.
        transform: The client's colour transform.
        attributes: Extra attributes (``transform`` and ``classes`` are added).
    """
    m = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)

    def pixels(r: np.ndarray) -> Tensor:
        x = _unit_float(images[r])
        if transform is not None:
            x = transform(x)
        return ((x - m) / s).contiguous()

    def ys(r: np.ndarray) -> Tensor:
        return torch.from_numpy(labels[r].astype(np.float32))

    tr, va, te = rows
    hist = np.bincount(labels[tr], minlength=num_classes).astype(np.float64)
    attrs = dict(attributes or {})
    attrs["transform"] = transform.describe() if transform is not None else "identity"
    attrs["classes"] = int((hist > 0).sum())
    return CenterData(
        name=name,
        x_train=pixels(tr),
        y_train=ys(tr),
        x_val=pixels(va),
        y_val=ys(va),
        x_test=pixels(te),
        y_test=ys(te),
        metadata=torch.from_numpy(hist / max(hist.sum(), 1.0)),
        attributes=attrs,
        row_ids={"train": tr, "val": va, "test": te},
    )


def image_options(
    transforms: bool, max_per_client: int | None, seed: int | None
) -> tuple[bool, int | None, int | None]:
    """Validated ``(data.transforms, data.max_per_client, data.seed)``, shared by every image source."""
    if not isinstance(transforms, bool):
        raise ValueError(f"data.transforms must be true or false, got {transforms!r}")
    per_client = None if max_per_client is None else check_int("data.max_per_client", max_per_client, 3)
    return transforms, per_client, None if seed is None else check_int("data.seed", seed, 0)


class ImageSource(DataSource):
    """A pooled labelled image collection dealt to clients by a label partition (App. D.1).

    Subclasses set ``channel_names``, ``mean`` and ``std`` and implement :meth:`pooled`.

    Args:
        num_clients: Number of centers (the EdgeDRM paper's clients; paper: 8, 32 for the scaling study).
        partition: Partitioner (:mod:`lightning_fed.data.partition`); None = :class:`Shards` with its
            default shards per client.
        transforms: Apply the per-client colour transforms of App. D.1 (client ``i`` gets family entry
            ``i mod 8``, or ``i mod 32`` with more than eight clients).
        max_per_client: Keep at most this many images per client (seeded; for CPU runs), or None.
        seed: Fixes the data (partition, subsample, splits) while training seeds vary; None = run seed.
        augment: Train-time augmentation of every training batch (the GPU CIFAR configs: a
            :class:`~lightning_fed.data.augment.RandomResizedCrop` to 32x32, scale 0.9-1.0, App. D.1);
            None = off. Its output size must equal the images' size.
        split: Per-client train / validation / test split (:class:`~lightning_fed.data.split.Split`,
            stratified by label, with its ``min_per_class`` guarantee); None (default): the paper's
            70 % train, the rest 20 / 80 into validation and test (:func:`client_split`).
    """

    channel_names: tuple[str, ...] = GREY
    mean: tuple[float, ...] = (0.5,)
    std: tuple[float, ...] = (0.5,)

    def __init__(
        self,
        num_clients: int = 8,
        partition: Partitioner | None = None,
        transforms: bool = True,
        max_per_client: int | None = None,
        seed: int | None = None,
        augment: Augment | None = None,
        split: Split | None = None,
    ) -> None:
        if split is not None and not isinstance(split, Split):
            raise ValueError(
                f"data.split must be a Split (train, val, test, min_per_class) or null, got {split!r}"
            )
        self.split = split
        self.num_clients = check_int("data.num_clients", num_clients, 1)
        if partition is not None and not callable(getattr(partition, "assign", None)):
            raise ValueError(
                f"data.partition must be a partitioner (Shards, DirichletLabels, BalancedSizes), "
                f"got {partition!r}"
            )
        self._partition_given = partition is not None
        self.partition = partition if partition is not None else Shards()
        self.transforms, self.max_per_client, self.seed = image_options(transforms, max_per_client, seed)
        if augment is not None and not isinstance(augment, Augment):
            raise ValueError(
                f"data.augment must be an augmentation (lightning_fed.data.augment.RandomResizedCrop) or "
                f"null, got {augment!r}"
            )
        self.augment = augment

    @property
    def num_centers(self) -> int:
        """The number of centers (``num_clients``, the EdgeDRM paper's word and the config key)."""
        return self.num_clients

    def partition_key(self) -> str:
        """The partition's ``report_key()`` (``5-SPC``, ``Dir-0.3``, ``balanced``); ``default`` when
        ``data.partition`` was not given."""
        return partitioner_key(self.partition if self._partition_given else None)

    @abstractmethod
    def pooled(self) -> tuple[np.ndarray, np.ndarray, int]:
        """Pooled images ``[N, C, H, W]`` (uint8 or float in [0, 1]), class ids ``[N]`` and ``K``."""

    def build(self, seed: int) -> FederatedData:
        """Pool -> label partition -> per-client subsample, 70/30 then 20/80 split, transform, normalize.

        Args:
            seed: Run seed (overridden by ``data.seed`` when set).

        Returns:
            The federation (client ``k`` named ``client-k``), with ``num_classes = K``.
        """
        seed = int(self.seed if self.seed is not None else seed)
        images, labels, num_classes = self.pooled()
        check_image_size(self.augment, images.shape)
        groups = self.partition.assign(LabelPool(labels, num_classes, self.num_clients), seed)
        colours = client_transforms(len(self.channel_names), self.num_clients) if self.transforms else None

        def center(k: int, name: str, rows: np.ndarray) -> CenterData:
            rows = subsample(rows, self.max_per_client, seed, k)
            if len(rows) < 3:
                raise ValueError(
                    f"client {k} received {len(rows)} images, too few to split: lower data.num_clients"
                )
            if self.split is not None and self.split.folds is not None and len(rows) < self.split.folds:
                raise ValueError(
                    f"client {k} received {len(rows)} images, fewer than data.split.folds="
                    f"{self.split.folds}: lower data.split.folds or data.num_clients"
                )
            if self.split is None:
                parts = client_split(labels[rows], seed, k)
            else:
                parts = self.split.indices(labels[rows], numpy_rng(seed, "split", k))
            tr, va, te = (rows[p] for p in parts)
            return image_center(
                name,
                images,
                labels,
                (tr, va, te),
                num_classes,
                self.mean,
                self.std,
                None if colours is None else colours[k],
                {"source": type(self).__name__},
            )

        return federate(
            [(k, f"client-{k}", np.asarray(rows)) for k, (_, rows) in enumerate(groups)],
            center,
            feature_names=self.channel_names,
            num_classes=num_classes,
            metadata_names=[f"share_class_{k}" for k in range(num_classes)],
            train_augment=self.augment,
        )


class Digits(ImageSource):
    """scikit-learn's bundled 8x8 handwritten digits (1,797 grey images, 10 classes; no download).

    Pixel values 0..16 are scaled to [0, 1]; normalized with the collection's mean 0.3053 / std 0.3760.
    Arguments as :class:`ImageSource`. Needs scikit-learn, the ``digits`` extra (``pip install
    'lightning-fed[digits]'``); without it building the source is a one-line error saying so.
    """

    channel_names = GREY
    mean = (0.3053,)
    std = (0.3760,)

    def pooled(self) -> tuple[np.ndarray, np.ndarray, int]:
        try:
            from sklearn.datasets import load_digits
        except ImportError as err:
            raise missing_extra(err, "digits", "the Digits source") from None

        digits = load_digits()
        images = (np.asarray(digits.images, dtype=np.float32) / 16.0)[:, None]
        return images, np.asarray(digits.target, dtype=np.int64), 10


class FashionMNIST(ImageSource):
    """Fashion-MNIST (70,000 28x28 grey images, 10 classes) from the Debian package's gz IDX files.

    Normalized with mean 0.2860 / std 0.3530; the colour transforms are the grey family
    (:func:`~lightning_fed.data.images_transforms.grey_eight`).

    Args:
        root: Folder of ``train-/t10k-images-idx3-ubyte.gz`` and ``-labels-idx1-ubyte.gz``.
        num_clients, partition, transforms, max_per_client, seed, augment, split: As
            :class:`ImageSource`.
    """

    channel_names = GREY
    mean = (0.2860,)
    std = (0.3530,)

    def __init__(
        self,
        root: str = "/usr/share/datasets/fashion-mnist",
        num_clients: int = 8,
        partition: Partitioner | None = None,
        transforms: bool = True,
        max_per_client: int | None = None,
        seed: int | None = None,
        augment: Augment | None = None,
        split: Split | None = None,
    ) -> None:
        super().__init__(num_clients, partition, transforms, max_per_client, seed, augment, split)
        missing = missing_fashion_files(root)
        if missing:
            raise ValueError(
                f"data.root={root!r} lacks the Fashion-MNIST files {missing}: run 'apt-get install "
                "dataset-fashion-mnist' or point data.root at a folder holding the four gz IDX files"
            )
        self.root = str(root)

    def pooled(self) -> tuple[np.ndarray, np.ndarray, int]:
        images, labels = read_fashion_mnist(self.root)
        return images, labels, 10


class CIFAR(ImageSource):
    """CIFAR-10, CIFAR-20 (CIFAR-100 superclasses) or CIFAR-100 from a local torchvision-format root.

    Normalized with the usual CIFAR-10 (0.4914, 0.4822, 0.4465) / (0.2470, 0.2435, 0.2616) or CIFAR-100
    (0.5071, 0.4865, 0.4409) / (0.2673, 0.2564, 0.2762) channel statistics. Nothing is downloaded.

    Args:
        root: Folder holding ``cifar-10-batches-py/`` or ``cifar-100-python/``.
        variant: 10, 20 or 100.
        num_clients, partition, transforms, max_per_client, seed, augment, split: As
            :class:`ImageSource`.
    """

    channel_names = RGB

    def __init__(
        self,
        root: str,
        variant: int = 10,
        num_clients: int = 8,
        partition: Partitioner | None = None,
        transforms: bool = True,
        max_per_client: int | None = None,
        seed: int | None = None,
        augment: Augment | None = None,
        split: Split | None = None,
    ) -> None:
        super().__init__(num_clients, partition, transforms, max_per_client, seed, augment, split)
        if isinstance(variant, bool) or variant not in (10, 20, 100):
            raise ValueError(f"data.variant must be 10, 20 or 100, got {variant!r}")
        folder = "cifar-10-batches-py" if variant == 10 else "cifar-100-python"
        if not (Path(root) / folder).is_dir() and Path(root).name != folder:
            raise ValueError(
                f"data.root={root!r} has no {folder}/ folder: point data.root at the folder holding "
                f"torchvision's CIFAR-{100 if variant != 10 else 10} python batches (nothing is downloaded)"
            )
        self.root = str(root)
        self.variant = int(variant)
        cifar10 = self.variant == 10
        self.mean = (0.4914, 0.4822, 0.4465) if cifar10 else (0.5071, 0.4865, 0.4409)
        self.std = (0.2470, 0.2435, 0.2616) if cifar10 else (0.2673, 0.2564, 0.2762)

    def report_key(self) -> str:
        """``CIFAR-<variant>`` (``CIFAR-10``, ``CIFAR-20``, ``CIFAR-100``)."""
        return f"CIFAR-{self.variant}"

    def pooled(self) -> tuple[np.ndarray, np.ndarray, int]:
        images, labels = read_cifar(self.root, self.variant)
        return images, labels, self.variant
