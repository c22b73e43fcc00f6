"""Readers for the image collections, from local files only (nothing is ever downloaded).

Each reader returns the *pooled* collection (official train and test parts concatenated, train
first) as ``uint8`` images ``[N, C, H, W]`` and integer labels ``[N]``:

* :func:`read_idx` parses one IDX file (LeCun's MNIST format, optionally gzip-compressed): a 4-byte
  magic ``0x00 0x00 <dtype code> <ndim>``, ``ndim`` big-endian uint32 sizes, then the values in C order.
* :func:`read_fashion_mnist` reads the four gz IDX files of the Debian package ``dataset-fashion-mnist``.
* :func:`read_cifar` reads torchvision's CIFAR-10 / CIFAR-100 python pickle batches (with a
  restricted unpickler: numpy arrays and builtin containers only); variant 20 uses CIFAR-100's
  20 coarse (superclass) labels.
"""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

__all__ = ["missing_fashion_files", "read_cifar", "read_fashion_mnist", "read_idx"]

#: IDX type code -> big-endian numpy dtype.
_IDX_DTYPES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

_FASHION_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


def read_idx(path: str | Path) -> np.ndarray:
    """Parse an IDX file (gzip-compressed when the name ends in ``.gz``).

    Args:
        path: The file.

    Returns:
        The array, in native byte order, with the shape stored in the header.

    Raises:
        ValueError: On a bad magic number, an unknown type code, or a size that does not match the header.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        raw = fh.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path}: not an IDX file (bad magic number)")
    code, ndim = raw[2], raw[3]
    if code not in _IDX_DTYPES:
        raise ValueError(f"{path}: unknown IDX type code 0x{code:02x}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: IDX header truncated")
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_DTYPES[code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header != expected:
        raise ValueError(
            f"{path}: header says {shape} ({expected} bytes) but {len(raw) - header} bytes follow"
        )
    values = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return values.astype(dtype.newbyteorder("="))


def missing_fashion_files(root: str | Path) -> list[str]:
    """Names of the four Fashion-MNIST gz IDX files that ``root`` lacks."""
    return [n for pair in _FASHION_FILES.values() for n in pair if not (Path(root) / n).is_file()]


def read_fashion_mnist(root: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Pooled Fashion-MNIST (60,000 train then 10,000 test): ``uint8 [70000, 1, 28, 28]``, labels ``[70000]``.

    Raises:
        ValueError: Naming ``data.root`` and the Debian package when a file is missing.
    """
    root = Path(root)
    missing = missing_fashion_files(root)
    if missing:
        raise ValueError(
            f"data.root={str(root)!r} lacks the Fashion-MNIST files {missing}: run "
            "'apt-get install dataset-fashion-mnist' (files in /usr/share/datasets/fashion-mnist) or point "
            "data.root at a folder holding the four gz IDX files"
        )
    images, labels = [], []
    for image_file, label_file in _FASHION_FILES.values():
        x, y = read_idx(root / image_file), read_idx(root / label_file)
        if x.ndim != 3 or y.shape != (x.shape[0],):
            raise ValueError(f"{root}: {image_file} {x.shape} and {label_file} {y.shape} do not match")
        images.append(x[:, None].astype(np.uint8))
        labels.append(y.astype(np.int64))
    return np.concatenate(images), np.concatenate(labels)


#: The only globals a CIFAR batch may name: what numpy needs to rebuild arrays, dtypes and scalars
#: (``numpy.core`` is numpy 1's name, ``numpy._core`` numpy 2's; ``_frombuffer`` is protocol 5's
#: path), ``_codecs.encode`` (how a protocol-2 pickle written by Python 3 spells ``bytes``) and
#: builtin container and scalar types. Anything else (``os.system``, ``builtins.eval``, ...) is refused.
_NUMPY_GLOBALS = (
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
)
_BUILTIN_TYPES = ("dict", "list", "tuple", "set", "frozenset", "bytes", "bytearray", "str", "int", "float")
_CIFAR_GLOBALS = frozenset(
    {
        *_NUMPY_GLOBALS,
        ("_codecs", "encode"),
        *((module, name) for module in ("builtins", "__builtin__") for name in _BUILTIN_TYPES),
    }
)


class _CifarUnpickler(pickle.Unpickler):
    """An unpickler that rebuilds numpy arrays and builtin containers only (see :data:`_CIFAR_GLOBALS`)."""

    def __init__(self, fh: BinaryIO, path: Path) -> None:
        super().__init__(fh, encoding="bytes")
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _CIFAR_GLOBALS:
            raise ValueError(
                f"read_cifar refuses to load {module}.{name} from {self.path}: not a CIFAR batch"
            )
        return super().find_class(module, name)


def _unpickle(path: Path) -> dict[str, object]:
    """One CIFAR batch: a pickled dict of numpy arrays and lists, read without running any other code.

    Raises:
        ValueError: If the pickle names any global besides numpy's array machinery and builtin
            containers, is not a dict, or is truncated or corrupt.
    """
    with open(path, "rb") as fh:
        try:
            batch = _CifarUnpickler(fh, path).load()
        except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, IndexError, TypeError) as err:
            raise ValueError(f"{path}: not a readable CIFAR batch ({type(err).__name__}: {err})") from err
    if not isinstance(batch, dict):
        raise ValueError(f"{path}: not a CIFAR batch (a pickled {type(batch).__name__}, expected a dict)")
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in batch.items()}


def read_cifar(root: str | Path, variant: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Pooled CIFAR (50,000 train then 10,000 test) from a torchvision-format root.

    Args:
        root: Folder holding ``cifar-10-batches-py/`` (variant 10) or ``cifar-100-python/`` (20, 100);
            the folder itself may also be given.
        variant: 10, 20 (CIFAR-100 coarse labels) or 100 (fine labels).

    Returns:
        ``uint8 [N, 3, 32, 32]`` images and ``int64 [N]`` labels.

    Raises:
        ValueError: Naming ``data.root`` when the batches are absent (nothing is downloaded), or naming
            the file when a batch is not a plain pickle of arrays and lists (the batches are read by a
            restricted unpickler that refuses every other global, so a crafted file runs no code).
    """
    if variant not in (10, 20, 100):
        raise ValueError(f"data.variant must be 10, 20 or 100, got {variant!r}")
    root = Path(root)
    folder = "cifar-10-batches-py" if variant == 10 else "cifar-100-python"
    base = root if root.name == folder else root / folder
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"] if variant == 10 else ["train", "test"]
    missing = [n for n in names if not (base / n).is_file()]
    if missing:
        raise ValueError(
            f"data.root={str(root)!r}: CIFAR-{variant} batches {missing} not found in {str(base)!r}; put "
            f"torchvision's python version ({folder}) there (fetched elsewhere with "
            "torchvision.datasets.CIFAR10/CIFAR100(root, download=True)); nothing is downloaded here"
        )
    key = {10: "labels", 20: "coarse_labels", 100: "fine_labels"}[variant]
    images, labels = [], []
    for name in names:
        batch = _unpickle(base / name)
        data = np.asarray(batch["data"], dtype=np.uint8)
        y = np.asarray(batch[key], dtype=np.int64)
        if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or y.shape != (data.shape[0],):
            raise ValueError(
                f"{base / name}: expected data [n, 3072] and {key} [n], got {data.shape}, {y.shape}"
            )
        images.append(data.reshape(-1, 3, 32, 32))
        labels.append(y)
    return np.concatenate(images), np.concatenate(labels)
