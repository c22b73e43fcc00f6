"""TeacherICU(off_concept): the mixed federation of issue 30.

The off-concept centers are drawn from their own stream, so every other draw is unchanged: the
features of every row and the labels of the in-concept rows equal those of ``off_concept = 0``; an
off-concept center's rows are labelled by the negated risk (its true log-odds minus the intercept
is the in-concept one's negated), and every center declares its concept.
"""

from __future__ import annotations

import numpy as np
import pytest

from lightning_fed.data import TeacherICU


@pytest.fixture(scope="module")
def pair():
    base = TeacherICU(num_centers=40, num_stays=8000)
    mixed = TeacherICU(num_centers=40, num_stays=8000, off_concept=0.15)
    return base, mixed, base._generate(3), mixed._generate(3)


def test_only_the_off_concept_labels_change(pair) -> None:
    _, mixed, (tb, logit_b), (tm, logit_m) = pair
    off = mixed.off_concept_centers(3)
    assert off.sum() == 6  # round(0.15 * 40)
    sites = sorted({str(s) for s in tb.site})
    off_sites = {k for k, v in tm.attributes.items() if v["concept"] == "off"}
    assert len(off_sites) == 6 and {v["concept"] for v in tm.attributes.values()} == {"in", "off"}
    rows_off = np.isin(tm.site, list(off_sites))
    np.testing.assert_array_equal(tb.x, tm.x)
    np.testing.assert_array_equal(tb.y[~rows_off], tm.y[~rows_off])
    np.testing.assert_array_equal(logit_b[~rows_off], logit_m[~rows_off])
    # per off-concept center: logit - its intercept is negated (the intercepts differ, so centre each)
    for site in off_sites:
        rows = tm.site == site
        a, b = logit_b[rows], logit_m[rows]
        np.testing.assert_allclose(b - b.mean(), -(a - a.mean()), atol=1e-9)
    assert "concept" not in next(iter(tb.attributes.values()))  # off_concept = 0: no attribute
    assert len(sites) == 40


def test_the_draw_is_seeded() -> None:
    src = TeacherICU(num_centers=40, num_stays=8000, off_concept=0.15)
    np.testing.assert_array_equal(src.off_concept_centers(3), src.off_concept_centers(3))
    assert (src.off_concept_centers(3) != src.off_concept_centers(4)).any()


@pytest.mark.parametrize("value", [1.0, -0.1])
def test_bad_fraction_names_the_field(value) -> None:
    with pytest.raises(ValueError, match="off_concept"):
        TeacherICU(num_centers=40, num_stays=8000, off_concept=value)


def test_the_summary_splits_the_auroc_by_concept() -> None:
    """``Federation._concept_summary``: the mean over each concept's defined centers, by hand."""
    from types import SimpleNamespace

    import torch

    from lightning_fed.federation import Federation

    centers = [SimpleNamespace(attributes={"concept": c}) for c in ("in", "off", "in", "in", "off")]
    fed = SimpleNamespace(data=SimpleNamespace(centers=centers))
    test = SimpleNamespace(auroc=torch.tensor([0.8, 0.3, float("nan"), 0.6, 0.5]))
    out = Federation._concept_summary(fed, test)
    assert out["test_auroc_in_concept"] == pytest.approx(0.7) and out["test_auroc_in_concept_centers"] == 2
    assert out["test_auroc_off_concept"] == pytest.approx(0.4) and out["test_auroc_off_concept_centers"] == 2
    plain = SimpleNamespace(data=SimpleNamespace(centers=[SimpleNamespace(attributes={})]))
    assert Federation._concept_summary(plain, test) == {}
