"""Train-time random-resized crop (EdgeDRM App. D.1): the box sampler's bounds and distribution, exact
identity and flip, agreement with ``F.interpolate`` of the crop, seeded draws, independence from
packing, the packed engine against the sequential reference with augmentation on (float64), the image
sources' option, the federation threading it to the engine, and the GPU configs parsed by the CLI."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from lightning_fed.algorithms import FedAvg
from lightning_fed.cli import fit_parser
from lightning_fed.data import CIFAR, Digits, RandomResizedCrop
from lightning_fed.data.augment import TRIES
from lightning_fed.distributed.engine import ShardedEngine
from lightning_fed.engine import PackedEngine, SequentialEngine
from lightning_fed.federation import Federation
from lightning_fed.models import SmallCNN
from lightning_fed.types import TrainerConfig
from tests.data.test_images import _write_cifar10

ROOT = Path(__file__).resolve().parents[2]
GPU_CONFIGS = ["cifar10_gpu", "cifar100_gpu", "cifar20_gpu", "cifar10_32_gpu"]
D = RandomResizedCrop.draws_per_image


def _draws(n: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# ---------------------------------------------------------------- the box sampler


@pytest.mark.parametrize(
    ("shape", "scale", "ratio"),
    [
        ((32, 32), (0.9, 1.0), (3 / 4, 4 / 3)),
        ((64, 48), (0.08, 1.0), (3 / 4, 4 / 3)),
        ((40, 40), (0.3, 0.5), (0.5, 2.0)),
    ],
)
def test_boxes_respect_the_scale_and_ratio_bounds(shape: tuple[int, int], scale: tuple, ratio: tuple) -> None:
    """Every box lies inside the image, and its area and aspect ratio are those of some unrounded
    ``sqrt(a H W rho) x sqrt(a H W / rho)`` (each within 0.5 of ``w``, ``h``) inside the bounds."""
    H, W = shape
    op = RandomResizedCrop(shape, scale=scale, ratio=ratio, flip=False)
    top, left, h, w, flip = op.boxes(_draws(20000), H, W)
    assert bool(((h >= 1) & (h <= H) & (w >= 1) & (w <= W)).all())
    assert bool(((top >= 0) & (top + h <= H) & (left >= 0) & (left + w <= W)).all())
    assert not bool(flip.any())
    hf, wf = h.double(), w.double()
    assert bool(((wf - 0.5) * (hf - 0.5) <= scale[1] * H * W + 1e-9).all())
    assert bool(((wf + 0.5) * (hf + 0.5) >= scale[0] * H * W - 1e-9).all())
    assert bool(((wf - 0.5) / (hf + 0.5) <= ratio[1] + 1e-9).all())
    assert bool(((wf + 0.5) / (hf - 0.5) >= ratio[0] - 1e-9).all())


def test_box_distribution_matches_the_sampler() -> None:
    """Where every first try fits (scale 0.2-0.6 of 64x64, ratio 3/4-4/3), area fraction is uniform on
    the scale range, log aspect ratio uniform on the log ratio range, corners uniform (fixed seed)."""
    H = W = 64
    op = RandomResizedCrop(64, scale=(0.2, 0.6), ratio=(3 / 4, 4 / 3))
    u = _draws(40000, seed=1)
    top, left, h, w, flip = op.boxes(u, H, W)
    area = (h * w).double() / (H * W)
    assert abs(float(area.mean()) - 0.4) < 0.005
    assert abs(float(area.quantile(0.25)) - 0.3) < 0.01 and abs(float(area.quantile(0.75)) - 0.5) < 0.01
    log_aspect = torch.log(w.double() / h.double())
    assert abs(float(log_aspect.mean())) < 0.01
    assert float(log_aspect.abs().max()) < math.log(4 / 3) + 0.05
    for corner, free in ((top, H - h + 1), (left, W - w + 1)):  # E[floor(u n) / n] = (n - 1) / (2 n)
        n = free.double()
        assert abs(float((corner.double() / n).mean() - (0.5 * (1 - 1 / n)).mean())) < 0.005
    assert abs(float(flip.double().mean()) - 0.5) < 0.01


def test_tries_then_the_centre_crop_fallback() -> None:
    """Draws whose ten tries all fail give torchvision's centre-crop fallback; the first fitting try wins."""
    op = RandomResizedCrop((20, 40), scale=(1.0, 1.0), ratio=(1.0, 1.0), flip=False)
    # 20x40 at full area and square aspect needs w = h = sqrt(800) = 28 > 20: no try fits.
    top, left, h, w, _ = op.boxes(_draws(5), 20, 40)
    # in_ratio = 2 > max ratio 1: h = 20, w = round(20 * 1) = 20, centred.
    assert h.tolist() == [20] * 5 and w.tolist() == [20] * 5 and left.tolist() == [10] * 5
    assert top.tolist() == [0] * 5
    op = RandomResizedCrop(32, scale=(0.25, 1.0), ratio=(1.0, 1.0))
    u = torch.zeros(1, D, dtype=torch.float64)
    u[0, :TRIES] = 1.0 - 1e-12  # area ~ 1024: 32x32 fits at the first try
    u[0, 0] = 0.0  # except that the first try is a quarter: 16x16
    _, _, h, w, _ = op.boxes(u, 32, 32)
    assert (int(h), int(w)) == (16, 16)


# ---------------------------------------------------------------- the crop


def test_full_box_is_exactly_the_identity_and_flip_mirrors() -> None:
    x = torch.randn(3, 5, 2, 9, 9, dtype=torch.float64)
    u = torch.rand(3, 5, D, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    assert torch.equal(RandomResizedCrop(9, scale=(1, 1), ratio=(1, 1), flip=False)(x, u), x)
    assert torch.equal(RandomResizedCrop(9, scale=(1, 1), ratio=(1, 1), flip=False)(x.float(), u), x.float())
    y = RandomResizedCrop(9, scale=(1, 1), ratio=(1, 1), flip=True)(x, u)
    flipped = u[..., -1] < 0.5
    assert 0 < int(flipped.sum()) < flipped.numel()
    assert torch.equal(y[flipped], x[flipped].flip(-1)) and torch.equal(y[~flipped], x[~flipped])


def test_crop_equals_interpolate_of_the_box() -> None:
    """Each image is ``F.interpolate(box, size, bilinear, align_corners=False)`` (then maybe mirrored)."""
    op = RandomResizedCrop(32, scale=(0.3, 1.0), flip=True)
    x = torch.randn(40, 3, 32, 32, dtype=torch.float64)
    u = _draws(40, seed=4)
    y = op(x, u)
    top, left, h, w, flip = op.boxes(u, 32, 32)
    for i in range(40):
        box = x[i : i + 1, :, top[i] : top[i] + h[i], left[i] : left[i] + w[i]]
        ref = F.interpolate(box, size=(32, 32), mode="bilinear", align_corners=False)[0]
        ref = ref.flip(-1) if flip[i] else ref
        assert torch.allclose(y[i], ref, atol=1e-12, rtol=0)


def test_each_image_is_independent_of_its_batch() -> None:
    """A batch's images equal the images augmented one at a time (bit for bit), so padding and packing
    cannot change a center's augmented inputs."""
    op = RandomResizedCrop(16, scale=(0.5, 1.0))
    x, u = torch.randn(6, 4, 1, 16, 16), torch.rand(6, 4, D, dtype=torch.float64)
    y = op(x, u)
    for i in range(6):
        for j in range(4):
            assert torch.equal(op(x[i, j], u[i, j]), y[i, j])


def test_round_draws_are_seeded_and_keyed_by_round_and_center() -> None:
    op = RandomResizedCrop(8)
    a = op.round_draws(5, 2, 3, steps=4, width=6)
    assert a.shape == (4, 6, D) and a.dtype == torch.float64
    assert torch.equal(a, op.round_draws(5, 2, 3, steps=4, width=6))
    for other in (
        op.round_draws(6, 2, 3, 4, 6),
        op.round_draws(5, 1, 3, 4, 6),
        op.round_draws(5, 2, 4, 4, 6),
    ):
        assert not torch.equal(a, other)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"size": 0}, "size"),
        ({"size": (8, 8, 8)}, "size"),
        ({"size": 8.5}, "size"),
        ({"scale": (0.9, 1.1)}, "scale"),
        ({"scale": (1.0, 0.9)}, "scale"),
        ({"scale": (0.0, 1.0)}, "scale"),
        ({"ratio": (2.0, 1.0)}, "ratio"),
        ({"ratio": (-1.0, 1.0)}, "ratio"),
        ({"flip": "yes"}, "flip"),
    ],
)
def test_bad_arguments_are_one_line_naming_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=rf"^data\.init_args\.augment\.init_args\.{field} [^\n]*$"):
        RandomResizedCrop(**kwargs)


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="draws"):
        RandomResizedCrop(8)(torch.zeros(2, 1, 8, 8), torch.zeros(3, D))


# ---------------------------------------------------------------- the engines

SIZES = [5, 23, 12]  # batch 8, 2 epochs: 2, 6 and 4 steps, short last batches padded
BATCH = 8


def _images(dtype: torch.dtype = torch.float64) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return [
        (
            torch.randn(n, 1, 8, 8, generator=gen, dtype=dtype),
            torch.randint(0, 3, (n,), generator=gen).to(dtype),
        )
        for n in SIZES
    ]


def _module() -> SmallCNN:
    torch.manual_seed(1)
    module = SmallCNN(num_classes=3, embed_dim=8, width=4, groups=2, in_channels=1, lr=0.05)
    module.set_num_features(1)
    return module.to(torch.float64)


def _run(engine, augment, train=None, center_ids=None, rounds: int = 2) -> dict[str, torch.Tensor]:
    engine.setup(
        _module(),
        train if train is not None else _images(),
        batch_size=BATCH,
        epochs=2,
        seed=5,
        dtype=torch.float64,
        center_ids=center_ids,
        augment=augment,
    )
    for r in range(rounds):
        engine.train_round(r)
    return engine.get_params()


AUGMENT = RandomResizedCrop(8, scale=(0.5, 1.0), flip=True)


def test_packed_matches_sequential_float64_with_augmentation() -> None:
    packed = _run(PackedEngine(), AUGMENT)
    sequential = _run(SequentialEngine(), AUGMENT)
    assert max(float((packed[k] - sequential[k]).abs().max()) for k in packed) < 1e-10
    plain = _run(PackedEngine(), None)
    assert max(float((packed[k] - plain[k]).abs().max()) for k in packed) > 1e-6  # the crop did act


def test_a_center_trains_identically_alone_or_packed_with_others() -> None:
    """Center 1 trained alone (``center_ids=[1]``) gets the same augmented batches, hence bit-identical
    parameters, as inside the three-center engine (packed, and sequential)."""
    for cls in (PackedEngine, SequentialEngine):
        together = _run(cls(), AUGMENT)
        alone = _run(cls(), AUGMENT, train=[_images()[1]], center_ids=[1])
        assert all(torch.equal(together[k][1], alone[k][0]) for k in together)


def test_sharded_engine_passes_the_augment_to_its_shard() -> None:
    """``ShardedEngine`` (one process here) threads the augment into its inner packed engine."""
    sharded = ShardedEngine(PackedEngine(), SimpleNamespace(world_size=1, global_rank=0))  # type: ignore[arg-type]
    params = _run(sharded, AUGMENT)
    assert sharded.inner.augment is AUGMENT
    plain = _run(PackedEngine(), AUGMENT)
    assert all(torch.equal(params[k], plain[k]) for k in params)


def test_an_identity_augment_changes_nothing() -> None:
    """A full-box, flip-free crop at the stored size trains to the same bits as no augmentation."""
    identity = RandomResizedCrop(8, scale=(1.0, 1.0), ratio=(1.0, 1.0), flip=False)
    for cls in (PackedEngine, SequentialEngine):
        a, b = _run(cls(), identity, rounds=1), _run(cls(), None, rounds=1)
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_augmentation_needs_image_rows() -> None:
    train = [(torch.randn(6, 7), torch.zeros(6))]
    with pytest.raises(ValueError, match=r"^data: train-time augmentation needs image rows"):
        PackedEngine().setup(_module(), train, batch_size=4, epochs=1, seed=0, augment=AUGMENT)


# ---------------------------------------------------------------- the image sources and the federation


def test_image_sources_carry_the_option_and_leave_the_splits_alone() -> None:
    plain = Digits(num_clients=4, transforms=False).build(7)
    assert plain.train_augment is None
    op = RandomResizedCrop(8, flip=False)
    data = Digits(num_clients=4, transforms=False, augment=op).build(7)
    assert data.train_augment is op
    for a, b in zip(plain.centers, data.centers, strict=True):
        for split in ("x_train", "x_val", "x_test", "y_train"):
            assert torch.equal(getattr(a, split), getattr(b, split))
    with pytest.raises(ValueError, match=r"^data\.init_args\.augment\.init_args\.size must equal"):
        Digits(num_clients=4, augment=RandomResizedCrop(32)).build(0)
    with pytest.raises(ValueError, match=r"^data\.augment must be"):
        Digits(augment="crop")  # type: ignore[arg-type]


def test_the_federation_threads_the_augment_to_the_engine() -> None:
    op = RandomResizedCrop(8, flip=False)
    data = Digits(num_clients=3, transforms=False, max_per_client=30, augment=op).build(0)
    trainer = TrainerConfig(rounds=1, batch_size=8, local_steps=2)
    module = SmallCNN(num_classes=10, embed_dim=8, width=4, groups=2)
    fed = Federation(data, module, FedAvg(), trainer, seed=0)
    assert fed.engine.augment is op


# ---------------------------------------------------------------- the GPU configs


@pytest.mark.parametrize("name", GPU_CONFIGS)
def test_gpu_configs_turn_the_crop_on(name: str) -> None:
    cfg = fit_parser().parse_args(
        ["--config", str(ROOT / "configs" / "edgedrm_bench" / "data" / f"{name}.yaml")]
    )
    augment = cfg.data.init_args.augment
    assert augment.class_path == "lightning_fed.data.RandomResizedCrop"
    assert augment.init_args.size == 32 and tuple(augment.init_args.scale) == (0.9, 1.0)
    assert augment.init_args.flip is False


def test_cpu_configs_leave_it_off() -> None:
    for name in ("cifar10_cpu", "fmnist_cpu", "fmnist32_cpu"):
        text = (ROOT / "configs" / "edgedrm_bench" / "data" / f"{name}.yaml").read_text()
        assert "augment" not in text


def test_the_cifar10_gpu_config_instantiates_the_crop(tmp_path: Path) -> None:
    _write_cifar10(tmp_path)
    parser = fit_parser()
    config = ROOT / "configs" / "edgedrm_bench" / "data" / "cifar10_gpu.yaml"
    cfg = parser.parse_args(["--config", str(config), f"--data.init_args.root={tmp_path}"])
    instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes
    data = instantiate(cfg).data
    assert isinstance(data, CIFAR) and isinstance(data.augment, RandomResizedCrop)
    assert data.augment.size == (32, 32) and data.augment.scale == (0.9, 1.0) and data.augment.flip is False
    assert data.augment.ratio == pytest.approx((3 / 4, 4 / 3))
