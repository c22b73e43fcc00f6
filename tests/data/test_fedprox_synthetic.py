"""Li et al.'s Synthetic(alpha, beta) federation: moments against the formulas, labels, levels,
determinism, validation and the federation it builds."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lightning_fed.data import FedProxSynthetic, SyntheticICU, TeacherICU
from lightning_fed.data.center import stratified_split
from lightning_fed.data.fedprox_synthetic import feature_variances
from lightning_fed.data.partition import IID, Natural
from lightning_fed.data.synthetic import CHARLSON_COLUMNS, FEATURE_NAMES
from lightning_fed.data.synthetic_layout import CARE_UNITS, WINDOW_STARTS, center_layout
from lightning_fed.seeding import numpy_rng

SMALL = {"num_centers": 24, "num_stays": 4000}


@pytest.fixture(scope="module")
def default_generated():
    return FedProxSynthetic()._generate(0)


def _phi(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


# ----------------------------------------------------------------------------- moments


def test_prior_draws_match_their_laws() -> None:
    """u_g ~ N(0, alpha), B_g ~ N(0, beta) (variances), W, b ~ N(u_g, 1), v ~ N(B_g, 1), on 4000 groups."""
    alpha, beta, n = 2.0, 0.5, 4000
    u, B, W, b, v = FedProxSynthetic(alpha=alpha, beta=beta)._draw_groups(0, n)
    assert W.shape == (n, 2, 60) and b.shape == (n, 2) and v.shape == (n, 60)
    se = math.sqrt(2.0 / n)  # relative standard error of a sample variance
    assert abs(u.mean()) < 4 * math.sqrt(alpha / n) and abs(B.mean()) < 4 * math.sqrt(beta / n)
    assert u.var() == pytest.approx(alpha, rel=4 * se)
    assert B.var() == pytest.approx(beta, rel=4 * se)
    assert abs(np.corrcoef(u, B)[0, 1]) < 4 / math.sqrt(n)
    # entries around their group's prior mean with unit variance
    for noise in (W - u[:, None, None], b - u[:, None], v - B[:, None]):
        assert abs(noise.mean()) < 4 / math.sqrt(noise.size)
        assert noise.var() == pytest.approx(1.0, rel=4 * math.sqrt(2.0 / noise.size))
    # the mean of a group's 120 weights tracks u_g: slope 1, residual variance 1/120
    w_mean = W.reshape(n, -1).mean(axis=1)
    slope = np.cov(w_mean, u)[0, 1] / u.var(ddof=1)
    assert slope == pytest.approx(1.0, abs=0.02)
    assert (w_mean - u).var() == pytest.approx(1 / 120, rel=4 * se)


def test_features_around_the_center_mean_with_li_et_al_covariance() -> None:
    """x - v_k within one center: mean 0, variance j^{-1.2} per column, uncorrelated columns."""
    n = 20000
    table, draws = FedProxSynthetic(num_centers=1, num_stays=n)._generate(3)
    noise = table.x - draws.v[draws.group[0]]
    sigma = np.arange(1, 61) ** -1.2
    np.testing.assert_array_equal(feature_variances(), sigma)
    np.testing.assert_allclose(noise.var(axis=0) / sigma, 1.0, atol=5 * math.sqrt(2.0 / n))
    np.testing.assert_allclose(noise.mean(axis=0) / np.sqrt(sigma), 0.0, atol=5 / math.sqrt(n))
    corr = np.corrcoef(noise, rowvar=False)
    assert np.abs(corr[~np.eye(60, dtype=bool)]).max() < 6 / math.sqrt(n)


def test_labels_are_the_argmax_of_the_softmax_model(default_generated) -> None:
    table, draws = default_generated
    g = draws.group[draws.row_center]
    logits = np.einsum("ncd,nd->nc", draws.W[g], table.x) + draws.b[g]
    np.testing.assert_allclose(draws.logits, logits, rtol=1e-12, atol=1e-9)
    softmax = np.exp(logits - logits.max(axis=1, keepdims=True))
    softmax /= softmax.sum(axis=1, keepdims=True)
    np.testing.assert_array_equal(table.y, softmax.argmax(axis=1))
    assert 0.2 < table.y.mean() < 0.8


def test_base_rate_is_the_closed_form_and_matches_the_rows(default_generated) -> None:
    """r_k = Phi((delta^T v + c) / sqrt(delta^T Sigma delta)); each center's positive share is a
    binomial draw around it."""
    table, draws = default_generated
    labels = [table.site[draws.row_center == k][0] for k in range(len(draws.group))]
    n = np.bincount(draws.row_center)
    positives = np.bincount(draws.row_center, table.y)
    for k, site in enumerate(labels):
        g = draws.group[k]
        delta, c = draws.W[g, 1] - draws.W[g, 0], draws.b[g, 1] - draws.b[g, 0]
        r = _phi((delta @ draws.v[g] + c) / math.sqrt(delta**2 @ draws.variances))
        assert table.attributes[site]["base_rate"] == pytest.approx(r, abs=1e-12)
        assert abs(positives[k] / n[k] - r) <= 5 * math.sqrt(r * (1 - r) / n[k]) + 1e-9, site


def test_alpha_does_not_reach_the_data() -> None:
    """u_g shifts both logits by u_g (1^T x + 1): same x and y for every alpha, same base rates."""
    t0, d0 = FedProxSynthetic(**SMALL, alpha=0.0)._generate(5)
    t4, d4 = FedProxSynthetic(**SMALL, alpha=4.0)._generate(5)
    np.testing.assert_array_equal(t0.x, t4.x)
    np.testing.assert_array_equal(t0.y, t4.y)
    np.testing.assert_allclose(d4.W - d0.W, np.broadcast_to(d4.u[:, None, None], d4.W.shape), atol=1e-12)
    assert np.all(d0.u == 0.0) and d4.u.std() > 0.5
    shift = d4.u[d4.group[d4.row_center]] * (t4.x.sum(axis=1) + 1.0)
    np.testing.assert_allclose(d4.logits - d0.logits, np.stack([shift, shift], axis=1), atol=1e-9)
    rates0 = [t0.attributes[s]["base_rate"] for s in sorted(t0.attributes)]
    rates4 = [t4.attributes[s]["base_rate"] for s in sorted(t4.attributes)]
    np.testing.assert_allclose(rates0, rates4, atol=1e-9)


# ----------------------------------------------------------------------------- levels


def test_unit_level_shares_the_draws_within_a_unit() -> None:
    table, draws = FedProxSynthetic(**SMALL, level="unit")._generate(0)
    unit_c, _ = center_layout(SMALL["num_centers"])
    np.testing.assert_array_equal(draws.group, unit_c)
    assert draws.W.shape[0] == len(CARE_UNITS)
    assert len(np.unique(draws.W[:, 0, 0])) == len(CARE_UNITS)  # six different draws
    # same-unit centers: the same rule and feature means; so their descriptor means agree
    fed = FedProxSynthetic(**SMALL, level="unit").build(0)
    meta = fed.metadata().numpy()[:, 3:]
    units = np.array([c.attributes["care_unit"] for c in fed.centers])
    for u in CARE_UNITS:
        mine = meta[units == u]
        assert np.abs(mine - mine.mean(axis=0)).max() < 0.1, u  # train means of v_u, se <= 0.14/sqrt(n)
    assert np.abs(meta[units == "CCU"].mean(0) - meta[units == "MICU"].mean(0)).max() > 0.1
    # rows: each center's logits come from its unit's W, b
    for k in range(SMALL["num_centers"]):
        rows = draws.row_center == k
        g = unit_c[k]
        np.testing.assert_allclose(draws.logits[rows], table.x[rows] @ draws.W[g].T + draws.b[g], atol=1e-9)


def test_center_level_draws_one_device_per_center() -> None:
    _, draws = FedProxSynthetic(**SMALL)._generate(0)
    np.testing.assert_array_equal(draws.group, np.arange(SMALL["num_centers"]))
    assert draws.W.shape[0] == SMALL["num_centers"]
    assert len(np.unique(draws.v[:, 0])) == SMALL["num_centers"]


# ----------------------------------------------------------------------------- determinism


def _same_table(a, b) -> bool:
    return (
        np.array_equal(a.x, b.x)
        and np.array_equal(a.y, b.y)
        and np.array_equal(a.year, b.year)
        and np.array_equal(a.site, b.site)
    )


def test_same_seed_same_table_other_seed_different() -> None:
    a = FedProxSynthetic(**SMALL).table(7)
    assert _same_table(a, FedProxSynthetic(**SMALL).table(7))
    assert not _same_table(a, FedProxSynthetic(**SMALL).table(8))
    assert not _same_table(a, FedProxSynthetic(**SMALL, level="unit").table(7))
    fixed = FedProxSynthetic(**SMALL, seed=5)
    assert _same_table(fixed.table(0), FedProxSynthetic(**SMALL).table(5))
    a, b = fixed.build(0), fixed.build(123)
    assert all(torch.equal(ca.x_train, cb.x_train) for ca, cb in zip(a.centers, b.centers, strict=True))


# ----------------------------------------------------------------------------- layout and build


def test_layout_sites_years_and_attributes_match_teacher_icu() -> None:
    table = FedProxSynthetic(**SMALL).table(0)
    teacher = TeacherICU(**SMALL).table(0)
    assert set(table.attributes) == set(teacher.attributes)
    assert table.feature_names == FEATURE_NAMES and table.continuous.all()
    assert table.charlson_columns == CHARLSON_COLUMNS
    _, counts = np.unique(table.site, return_counts=True)
    assert counts.sum() == SMALL["num_stays"] and counts.min() >= 40
    for site, attrs in table.attributes.items():
        unit, start = attrs["care_unit"], attrs["window_start"]
        assert unit in CARE_UNITS and start in WINDOW_STARTS and site == f"{unit} {start}-{start + 1}"
        assert 0.0 <= attrs["base_rate"] <= 1.0
        years = table.year[table.site == site]
        assert years.min() >= start and years.max() <= start + 1


def test_build_gives_230_centers_with_15_dim_descriptors(default_generated) -> None:
    table, _ = default_generated
    fed = FedProxSynthetic().build(0)
    assert fed.num_centers == 230 and fed.num_features == 60
    assert fed.metadata().shape == (230, 15)
    assert fed.metadata_names[3:] == tuple(f"prevalence_{c}" for c in CHARLSON_COLUMNS)
    charlson_idx = [FEATURE_NAMES.index(c) for c in CHARLSON_COLUMNS]
    assert charlson_idx == list(range(27, 39))  # columns j = 28..39
    groups = Natural().assign(table, 0)
    for k, ((name, rows), center) in enumerate(zip(groups, fed.centers, strict=True)):
        assert center.name == name and center.attributes == dict(table.attributes[name])
        tr = rows[stratified_split(table.y[rows], (0.8, 0.1, 0.1), numpy_rng(0, "split", k))[0]]
        expected = np.concatenate(
            [
                [table.y[tr].mean(), math.log(len(tr)), table.year[tr].mean() / 2030.0],
                table.x[tr][:, charlson_idx].mean(axis=0),  # "prevalences" = train column means
            ]
        )
        np.testing.assert_allclose(center.metadata.numpy(), expected, rtol=0, atol=1e-12)
        x_tr = center.x_train.double()
        assert torch.allclose(x_tr.mean(0), torch.zeros(60, dtype=torch.float64), atol=1e-5)
        assert torch.allclose(x_tr.std(0, unbiased=False), torch.ones(60, dtype=torch.float64), atol=1e-4)


def test_partitioner_is_used() -> None:
    fed = FedProxSynthetic(**SMALL, partitioner=IID(5)).build(0)
    assert [c.name for c in fed.centers] == [f"iid-{k:03d}" for k in range(5)]


@pytest.mark.cli
def test_data_describe_lists_it(capsys: pytest.CaptureFixture) -> None:
    from lightning_fed.cli import main

    main(
        [
            "data",
            "describe",
            "--data=lightning_fed.data.FedProxSynthetic",
            "--data.init_args.num_centers=12",
            "--data.init_args.num_stays=2400",
        ]
    )
    out = capsys.readouterr().out
    assert "FedProxSynthetic: 12 centers, 2400 rows, 60 features, binary label" in out


def test_repr_and_teacher_icu_alias() -> None:
    assert "FedProxSynthetic(" in repr(FedProxSynthetic(**SMALL)) and "level='center'" in repr(
        FedProxSynthetic(**SMALL)
    )
    assert SyntheticICU is TeacherICU
    assert repr(SyntheticICU(**SMALL)).startswith("TeacherICU(")


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [
        ({"num_centers": 0}, "num_centers"),
        ({"num_centers": 247, "num_stays": 9000}, "num_stays"),  # beyond 246: sub-centers, enough stays
        ({"num_centers": 2.0}, "num_centers"),
        ({"num_stays": 100}, "num_stays"),
        ({"alpha": -0.1}, "alpha"),
        ({"alpha": "1"}, "alpha"),
        ({"beta": float("inf")}, "beta"),
        ({"beta": -1}, "beta"),
        ({"level": "device"}, "level"),
        ({"level": None}, "level"),
        ({"size_tail": 0}, "size_tail"),
        ({"min_stays": 5}, "min_stays"),
        ({"partitioner": "natural"}, "partitioner"),
        ({"seed": 1.5}, "seed"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(kwargs: dict, arg: str) -> None:
    with pytest.raises(ValueError, match=arg):
        FedProxSynthetic(**kwargs)
