r"""TeacherICU: an ICU-shaped mortality federation driven by shared and per-care-unit random ReLU teachers.

:class:`TeacherICU` is a 60-feature in-hospital mortality task over a schema mirroring the ABPS
paper's MIMIC-IV cohort, in plausible raw units, whose label is dominated by random ReLU "teacher"
networks (one shared by all centers, one per care unit), tuned so that Centralized > FedAvg >
Local. :data:`SyntheticICU` is its historical name, the one existing configs use
(``class_path: lightning_fed.data.SyntheticICU``); both names build bit-identical data.

It is *inspired by* the Synthetic(alpha, beta) generator of Li et al. (2020), "Federated
Optimization in Heterogeneous Networks" (FedProx), and keeps its hierarchy of a per-device prior
mean for the model (alpha) and for the features (beta), with care units playing the devices, but
it is not that generator: the label is a Bernoulli draw of a single logit (not the argmax of a
10-class softmax), that logit adds a shared clinically signed weight vector, an interaction, a
hinge and the ReLU teachers to the per-unit weights, the intercept is calibrated to MIMIC-IV
mortality, the features are structured clinical variables (not ``x ~ N(v_k, Sigma)``) and the
unit parameters drift over the time windows. Li et al.'s generator itself is
:class:`~lightning_fed.data.fedprox_synthetic.FedProxSynthetic`.

Centers
    A center is a care unit ``u`` (CVICU, CCU, MICU, Medical/Surgical ICU, SICU, TSICU) times a
    2-year window ``t`` of the shifted admission years 2110-2191 (41 windows per unit). The
    ``num_centers`` centers are dealt near-equally to the units (largest units first) and each
    unit's centers are spread evenly over its 41 windows; beyond 246 centers a window holds
    several sub-centers (``"MICU 2130-2131 #03"``: same unit and window drift, own center draws;
    :mod:`~lightning_fed.data.synthetic_layout`). Sizes are heavy-tailed (FedProx uses a
    power law): with ``L_k ~ Lomax(size_tail)`` capped at :data:`SIZE_CAP`
    (:mod:`lightning_fed.data.synthetic_layout`, shared with
    :class:`~lightning_fed.data.fedprox_synthetic.FedProxSynthetic`),

    .. math:: n_k = n_{\min} + (N - C n_{\min}) \frac{s_u L_k}{\sum_j s_{u(j)} L_j}

    (``s_u`` the unit's share of stays), rounded by largest remainder so that ``sum n_k = N``.

Unit and center heterogeneity (after FedProx's alpha and beta, units playing FedProx's devices)
    .. math::

        u_u &\sim \mathcal N(0, \alpha), \quad W_u \sim \mathcal N(u_u \mathbf 1, I_F)
            &&\text{(model heterogeneity)}\\
        B_u &\sim \mathcal N(0, \beta), \quad v_u \sim \mathcal N(B_u \mathbf 1, I_D)
            &&\text{(feature heterogeneity)}

    and each unit drifts over its windows by a centred Gaussian random walk
    :math:`R_u(t) = \sum_{i \le t} \zeta_i / \sqrt{41}` (one walk each for the model, the features
    and the base rate), scaled by ``drift``. Center ``k`` (unit ``u``, window ``t``) gets

    .. math::

        w_k &= \sigma\, w^\star + \lambda_w \left(W_u + \text{drift}\, R^w_u(t)
                + \kappa\, \varepsilon_k\right), \quad \varepsilon_k \sim \mathcal N(0, I_F)\\
        m_k &= \lambda_x \left(v_u + \text{drift}\, R^x_u(t) + \kappa\, \epsilon_k\right),
                \quad \epsilon_k \sim \mathcal N(0, I_D)

    with ``sigma = signal``, :math:`\lambda_x` = ``feature_shift``, :math:`\lambda_w` = ``concept_shift``,
    :math:`\kappa = 0.5`, and a shared, clinically signed weight vector :math:`w^\star`
    (:data:`SHARED_WEIGHTS`) common to all centers: that shared part is what makes pooling data
    pay, while :math:`W_u` makes same-unit centers better partners than cross-unit ones.

Rows of center ``k``
    A latent severity :math:`s \sim \mathcal N(0, 1)` couples the vitals and comorbidities.
    ``age = clip(mu_age(u) + 16 (0.4 m_k[age] + z), 18, 95)``; each vital ``j`` has
    ``mean = mu_j + sd_j (m_k[j] + l_j s + sqrt(1 - l_j^2) z_j)`` (MAP pulled halfway to
    ``(SBP + 2 DBP) / 3``), ``min = mean - a_j e^{0.35 z' + 0.1 s}``, ``max = mean + b_j e^{0.35 z''
    + 0.1 s}``, all clipped to the vital's physiological range (so ``min <= mean <= max`` and
    ``SpO2 <= 100``). Categorical attributes (gender, race,
    admission type and location, insurance) are drawn from ``softmax(log prior + unit profile +
    m_k[group])`` (Medicare more likely from 65 on); the 12 Charlson flags are Bernoulli with
    ``logit = logit(prevalence) + unit profile + m_k[flag] + 0.35 (age - 65)/10 + 0.3 s``.
    (FedProx's ``x ~ N(v_k, Sigma)`` with ``Sigma_jj = j^{-1.2}`` is replaced by this clinically
    structured covariance.)

Label
    With :math:`f(x)` the features (continuous ones standardized by the pooled cohort's mean and
    standard deviation, so weights are per standard deviation; binary ones as 0/1),

    .. math::

        \eta_k(x) &= w_k^\top f(x) + \sigma \left(0.9\, f_{age} f_{hr,mean} + 1.2\,
            [-f_{mbp,min} - 0.5]_+\right) + \nu\, g(f(x)) + \nu_u\, g_u(f(x))\\
        y &\sim \text{Bernoulli}\left(\text{sigmoid}(b_k + \eta_k(x))\right)

    with :math:`\nu` = ``nonlinearity`` and :math:`g` a fixed random ReLU network
    (``sum_h a_h relu(u_h^T f + c_h)``, 32 units, scaled to unit variance) shared by all centers,
    and :math:`\nu_u` = ``unit_nonlinearity`` times a second such network :math:`g_u` per care unit
    (unit-specific risk: a pooled model can condition on the unit's case mix, an average of
    models blurs the six :math:`g_u`, and a small center cannot learn its own from a few rows).
    The nonlinearity (age x heart-rate interaction, hypotension hinge, ``g``) lets an MLP beat a
    linear model, and, being defined on population units, it is what a pooled model learns best:
    federated centers must standardize on their own rows, which moves the hinge and ``g`` per
    center (on the default federation this is the gap between Centralized and FedAvg).
    Much of the vitals' weight sits on ``max - min`` contrasts (instability) and on
    rare categories / comorbidities, which a small center cannot estimate from its own rows but a
    federation can. FedProx's random intercept is replaced by a calibrated one: ``b_k`` solves
    ``mean_i sigmoid(b_k + eta_k(x_i)) = r_k`` over the center's rows, where the center's base
    rate ``logit r_k = logit r_u + c_u + 0.3 drift R^b_u(t) + 0.2 eps_k`` and ``c_u`` makes the
    size-weighted mean of ``r_k`` over the unit equal the unit's MIMIC-IV mortality
    :data:`UNIT_BASE_RATES` (3.3 % CVICU ... 15.4 % MICU).

Orderings
    Centralized > FedAvg > Local in mean per-center test AUROC (README, Results: 0.868 / 0.805 /
    0.735 on the default 230 centers; ``tests/test_federation.py::test_collaboration_helps_on_synthetic_icu``
    on 60 centers). Why: (i) most of the logit is shared by every center, the weights
    :math:`\sigma w^\star` and the shared teacher :math:`\nu g`, so every pooled row informs every
    center and pooling pays; a Local model on a median center of about a hundred stays cannot learn
    a 32-unit ReLU network, nor the rare categories and comorbidities, from its own rows, hence
    FedAvg > Local. (ii) the per-unit teachers :math:`\nu_u g_u` (and the unit-level
    :math:`W_u`, :math:`v_u`) make same-unit centers better partners than cross-unit ones: a pooled
    model can condition on the unit's case mix, an average of models blurs the six :math:`g_u`, and
    partner selection restricted to a unit's peers has the most to gain. (iii) the hinge and
    :math:`g` are defined on the pooled cohort's standardization; each federated center
    standardizes on its own train rows, which moves the hinge and the teacher's inputs per center,
    while Centralized trains on the pooled standardization
    (:func:`~lightning_fed.data.center.pooled_standardization`), hence Centralized > FedAvg.

Mixed federation (``off_concept``, issue 30)
    A fraction ``off_concept`` of the centers (``round(off_concept * C)`` of them, drawn without
    replacement from ``numpy_rng(seed, "synthetic", 20)``, a stream no other draw uses, so the
    in-concept centers' rows, labels and every other draw are those of ``off_concept = 0`` bit for
    bit) label their rows by the opposite rule: their risk part is negated, :math:`\eta_k \to
    -\eta_k` (the same features, the same shared and per-unit teachers, reversed in sign), and
    their intercept :math:`b_k` is calibrated to the same base rate as before. Each center declares
    ``concept: "in"`` or ``"off"`` (``attributes``; a selector may not read it: ABPS's pair
    policies use only the attributes they are told to, ``care_unit`` by default). Orderings it
    produces, and why: (i) on the off-concept centers every model trained on the pooled in-concept
    majority ranks risk backwards, so FedAvg's AUROC there is below 0.5 and Local beats FedAvg;
    off-concept centers help each other (one shared reversed rule), so a selector that pairs them
    together beats Local there; (ii) on the in-concept centers FedAvg's average is pulled towards the
    reversed rule by the off-concept updates (15 % of the centers, their share of the rows), so a
    selector that keeps its in-concept centers away from off-concept peers can match or beat
    FedAvg there, and one that partners at random mixes one reversed update in about every
    seventh; (iii) the care unit says nothing about the concept (off-concept centers are drawn
    across units), so only what a center observes of a peer's credit can tell them apart.

Every draw comes from ``numpy_rng(seed, "synthetic", ...)``: the same seed gives identical data.
"""

from __future__ import annotations

import re

import numpy as np

from lightning_fed.data.base import TableSource
from lightning_fed.data.center import PooledTable
from lightning_fed.data.partition import Partitioner
from lightning_fed.data.split import Split
from lightning_fed.data.synthetic_layout import (
    CARE_UNITS,
    SIZE_CAP,
    UNIT_SHARES,
    WINDOW_STARTS,
    center_layout,
    center_sizes,
    check_layout,
    row_years,
    site_attributes,
    site_labels,
)
from lightning_fed.seeding import numpy_rng
from lightning_fed.validation import check_number

__all__ = [
    "CARE_UNITS",
    "CHARLSON_COLUMNS",
    "FEATURE_NAMES",
    "SHARED_WEIGHTS",
    "SIZE_CAP",
    "UNIT_BASE_RATES",
    "UNIT_SHARES",
    "WINDOW_STARTS",
    "SyntheticICU",
    "TeacherICU",
]

#: In-hospital mortality per care unit (MIMIC-IV, ABPS cohort).
UNIT_BASE_RATES: dict[str, float] = {
    "CVICU": 0.033,
    "CCU": 0.130,
    "MICU": 0.154,
    "Medical/Surgical ICU": 0.141,
    "SICU": 0.106,
    "TSICU": 0.108,
}
#: Mean age per care unit (years).
UNIT_AGE: dict[str, float] = {
    "CVICU": 67.0,
    "CCU": 70.0,
    "MICU": 65.0,
    "Medical/Surgical ICU": 64.0,
    "SICU": 63.0,
    "TSICU": 57.0,
}
# CARE_UNITS, UNIT_SHARES, WINDOW_STARTS and SIZE_CAP live in synthetic_layout (shared with
# FedProxSynthetic); they stay importable from here, their historical path.

# (group, categories, prior probabilities)
_CATEGORICAL: tuple[tuple[str, tuple[str, ...], tuple[float, ...]], ...] = (
    ("gender", ("F", "M"), (0.44, 0.56)),
    (
        "race",
        ("WHITE", "BLACK", "HISPANIC", "ASIAN", "OTHER", "UNKNOWN"),
        (0.65, 0.10, 0.04, 0.03, 0.07, 0.11),
    ),
    (
        "admission_type",
        (
            "EW EMER.",
            "URGENT",
            "ELECTIVE",
            "OBSERVATION ADMIT",
            "SURGICAL SAME DAY ADMISSION",
            "DIRECT EMER.",
        ),
        (0.48, 0.14, 0.06, 0.08, 0.12, 0.12),
    ),
    (
        "admission_location",
        (
            "EMERGENCY ROOM",
            "TRANSFER FROM HOSPITAL",
            "PHYSICIAN REFERRAL",
            "CLINIC REFERRAL",
            "PACU",
            "WALK-IN/SELF REFERRAL",
            "OTHER",
        ),
        (0.45, 0.15, 0.18, 0.03, 0.05, 0.02, 0.12),
    ),
    ("insurance", ("Medicare", "Medicaid", "Private", "Other", "No charge"), (0.40, 0.10, 0.36, 0.12, 0.02)),
)

# (flag, prevalence)
_CHARLSON: tuple[tuple[str, float], ...] = (
    ("charlson_mi", 0.12),
    ("charlson_chf", 0.27),
    ("charlson_pvd", 0.10),
    ("charlson_cvd", 0.13),
    ("charlson_dementia", 0.04),
    ("charlson_copd", 0.23),
    ("charlson_rheum", 0.04),
    ("charlson_pud", 0.03),
    ("charlson_liver", 0.10),
    ("charlson_diabetes", 0.27),
    ("charlson_renal", 0.21),
    ("charlson_malignancy", 0.14),
)

# (vital, mean, between-patient sd, typical drop to min, typical rise to max, lower, upper bound,
#  severity loading)
_VITALS: tuple[tuple[str, float, float, float, float, float, float, float], ...] = (
    ("heart_rate", 86.0, 14.0, 18.0, 24.0, 20.0, 220.0, 0.25),
    ("sbp", 119.0, 14.0, 27.0, 30.0, 40.0, 250.0, -0.25),
    ("dbp", 62.0, 9.0, 18.0, 24.0, 15.0, 150.0, -0.15),
    ("mbp", 79.0, 9.0, 20.0, 27.0, 25.0, 180.0, -0.25),
    ("resp_rate", 19.5, 3.5, 7.0, 10.0, 4.0, 60.0, 0.25),
    ("spo2", 96.8, 1.6, 6.0, 2.5, 50.0, 100.0, -0.25),
    ("temperature", 36.9, 0.45, 0.7, 0.7, 32.0, 42.0, 0.10),
)

# Hand-set unit profiles: log-odds offsets on categories / flags (column name -> offset).
_UNIT_PROFILE: dict[str, dict[str, float]] = {
    "CVICU": {
        "admission_type_SURGICAL_SAME_DAY_ADMISSION": 1.5,
        "admission_type_ELECTIVE": 1.0,
        "admission_location_PHYSICIAN_REFERRAL": 0.6,
        "charlson_mi": 0.6,
        "charlson_pvd": 0.5,
        "charlson_malignancy": -0.6,
        "charlson_liver": -0.6,
    },
    "CCU": {
        "admission_type_DIRECT_EMER": 0.4,
        "admission_location_TRANSFER_FROM_HOSPITAL": 0.5,
        "charlson_mi": 1.2,
        "charlson_chf": 0.8,
        "charlson_renal": 0.3,
    },
    "MICU": {
        "admission_location_EMERGENCY_ROOM": 0.4,
        "charlson_liver": 0.6,
        "charlson_copd": 0.4,
        "charlson_malignancy": 0.3,
        "charlson_renal": 0.3,
    },
    "Medical/Surgical ICU": {"charlson_malignancy": 0.3, "admission_location_TRANSFER_FROM_HOSPITAL": 0.3},
    "SICU": {
        "admission_type_SURGICAL_SAME_DAY_ADMISSION": 0.7,
        "admission_location_PACU": 0.8,
        "charlson_cvd": 0.6,
        "charlson_malignancy": 0.4,
    },
    "TSICU": {
        "admission_type_EW_EMER": 0.7,
        "admission_location_EMERGENCY_ROOM": 0.8,
        "charlson_cvd": 0.3,
        "charlson_dementia": -0.5,
    },
}

#: Shared logistic weights ``w*`` (per standardized continuous unit, per binary flag); columns
#: not listed have weight 0.
SHARED_WEIGHTS: dict[str, float] = {
    "age": 0.35,
    "gender_M": 0.05,
    "race_BLACK": -0.10,
    "race_ASIAN": 0.25,
    "race_HISPANIC": -0.15,
    "race_UNKNOWN": 0.45,
    "admission_type_EW_EMER": 0.15,
    "admission_type_URGENT": 0.30,
    "admission_type_ELECTIVE": -0.70,
    "admission_type_OBSERVATION_ADMIT": -0.40,
    "admission_type_SURGICAL_SAME_DAY_ADMISSION": -0.70,
    "admission_type_DIRECT_EMER": 0.35,
    "admission_location_EMERGENCY_ROOM": 0.10,
    "admission_location_TRANSFER_FROM_HOSPITAL": 0.45,
    "admission_location_PHYSICIAN_REFERRAL": -0.15,
    "admission_location_CLINIC_REFERRAL": -0.50,
    "admission_location_PACU": -0.60,
    "admission_location_WALK_IN_SELF_REFERRAL": -0.50,
    "insurance_Medicare": 0.10,
    "insurance_Medicaid": 0.25,
    "insurance_Private": -0.10,
    "insurance_No_charge": 0.60,
    "charlson_mi": 0.20,
    "charlson_chf": 0.30,
    "charlson_pvd": 0.20,
    "charlson_cvd": 0.40,
    "charlson_dementia": 0.80,
    "charlson_copd": 0.15,
    "charlson_rheum": 0.40,
    "charlson_pud": 0.50,
    "charlson_liver": 0.60,
    "charlson_diabetes": 0.05,
    "charlson_renal": 0.30,
    "charlson_malignancy": 0.55,
    "heart_rate_mean": 0.05,
    "heart_rate_min": -0.45,
    "heart_rate_max": 0.55,
    "sbp_mean": -0.05,
    "sbp_min": -0.45,
    "sbp_max": 0.40,
    "dbp_mean": -0.10,
    "dbp_min": -0.30,
    "dbp_max": 0.30,
    "mbp_mean": 0.20,
    "mbp_min": -0.35,
    "resp_rate_mean": 0.05,
    "resp_rate_min": -0.40,
    "resp_rate_max": 0.50,
    "spo2_mean": -0.10,
    "spo2_min": -0.40,
    "spo2_max": 0.35,
    "temperature_mean": -0.10,
    "temperature_min": -0.45,
    "temperature_max": 0.40,
}

# Internal scales (see the module docstring).
_KAPPA = 0.5  # center-level noise relative to the unit level
_RATE_WALK = 0.3  # base-rate drift scale (log-odds, times drift)
_RATE_JITTER = 0.2  # center base-rate jitter (log-odds)
_INTERACTION = 0.9  # age x mean heart rate (standardized) coefficient
_HINGE = 1.2  # hypotension hinge coefficient


def _sanitize(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z]+", "_", text).strip("_")


def _schema() -> tuple[tuple[str, ...], np.ndarray, tuple[str, ...]]:
    names = ["age"]
    for group, cats, _ in _CATEGORICAL:
        names += [f"{group}_{_sanitize(c)}" for c in cats]
    charlson = tuple(name for name, _ in _CHARLSON)
    names += list(charlson)
    for vital, *_ in _VITALS:
        names += [f"{vital}_mean", f"{vital}_min", f"{vital}_max"]
    continuous = np.array([n == "age" or n.endswith(("_mean", "_min", "_max")) for n in names])
    return tuple(names), continuous, charlson


FEATURE_NAMES, _CONTINUOUS, CHARLSON_COLUMNS = _schema()
_COL = {name: j for j, name in enumerate(FEATURE_NAMES)}
# Feature-shift dimensions: age, 7 vital levels, then one log-odds per category and per flag.
_SHIFT_DIM = 1 + len(_VITALS) + sum(len(c) for _, c, _ in _CATEGORICAL) + len(_CHARLSON)


def _logit(p: np.ndarray | float) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    return np.log(p) - np.log1p(-p)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


_TEACHER_HIDDEN = 32  # units of the shared random ReLU teacher
_TEACHER_SHARPNESS = 2.0  # scale of its input weights and offsets


def _teacher(rng: np.random.Generator, f: np.ndarray, hidden: int = _TEACHER_HIDDEN) -> np.ndarray:
    """A fixed random ReLU network ``sum_h a_h relu(u_h^T f + c_h)``, scaled to unit variance.

    Shared by every center: a signal that needs many optimizer steps to learn, so pooling the data
    (many steps per round) pays over averaging models (a few local steps per round).
    """
    u = rng.standard_normal((f.shape[1], hidden)) / np.sqrt(f.shape[1]) * _TEACHER_SHARPNESS
    c = rng.standard_normal(hidden) * _TEACHER_SHARPNESS * 0.5
    a = rng.standard_normal(hidden)
    h = f @ u  # [N, hidden]; the bias and ReLU in place: one such array, not three (issue 33)
    h += c
    g = np.maximum(h, 0.0, out=h) @ a
    del h
    return (g - g.mean()) / max(g.std(), 1e-12)


_ROW_BLOCK = 65536  # rows per block of _row_dots


def _row_dots(weights: np.ndarray, site: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``eta_i = w_{site_i}^T f_i`` for every row, ``weights[site]`` gathered a block of rows at a
    time: the same per-row sums as one ``einsum`` over all rows, without an ``[N, F]`` copy of the
    weights (issue 33: 0.5 GB at 3,680 centers)."""
    eta = np.empty(f.shape[0])
    for lo in range(0, f.shape[0], _ROW_BLOCK):
        hi = lo + _ROW_BLOCK
        eta[lo:hi] = np.einsum("ij,ij->i", weights[site[lo:hi]], f[lo:hi])
    return eta


def _draw_category(
    rng: np.random.Generator, logits: list[np.ndarray], rows: np.ndarray, x: np.ndarray, cols: np.ndarray
) -> None:
    """One categorical draw per row from ``softmax(logits)``, written one-hot into ``x[:, cols]``.

    ``logits`` holds one ``[N]`` column per category. The category is the number of cumulative
    weights ``cumsum(exp(logits - max))`` below ``u * total`` (``u ~ U(0, 1)``, one ``rng.random(N)``
    call), capped at the last category. Column by column, in the order a row-wise ``max`` /
    ``cumsum`` / comparison takes them, so the numbers are those of the ``[N, K]`` formulation bit
    for bit (a maximum is exact; a running sum adds in the same order); with ``K <= 7`` categories
    this is about twice as fast as reducing along the short axis.
    """
    top = logits[0].copy()
    for column in logits[1:]:
        np.maximum(top, column, out=top)
    cumulative = [np.exp(logits[0] - top)]
    for column in logits[1:]:
        cumulative.append(cumulative[-1] + np.exp(column - top))
    draw = rng.random(len(rows)) * cumulative[-1]
    count = np.zeros(len(rows), dtype=np.int64)
    for bound in cumulative:
        count += draw > bound
    x[:, cols] = 0.0
    x[rows, cols[np.minimum(count, len(cols) - 1)]] = 1.0


def _walk(rng: np.random.Generator, dim: int) -> np.ndarray:
    """Centred Gaussian random walk over the windows, ``[len(WINDOW_STARTS), dim]``, end sd ~1."""
    steps = rng.standard_normal((len(WINDOW_STARTS), dim)) / np.sqrt(len(WINDOW_STARTS))
    walk = np.cumsum(steps, axis=0)
    return walk - walk.mean(axis=0)


class TeacherICU(TableSource):
    """ICU-shaped federation whose mortality label is driven by shared and per-care-unit random ReLU teachers.

    Tuned so that Centralized > FedAvg > Local (see Orderings in the module docstring); adapted
    from, not equal to, Li et al.'s Synthetic(alpha, beta) (for that generator see
    :class:`~lightning_fed.data.fedprox_synthetic.FedProxSynthetic`). :data:`SyntheticICU` is the
    historical name of this class. See the module docstring for the generative model. Sites are
    care unit x 2-year window (``"MICU 2130-2131"``); ``build`` splits each center 80/10/10
    (stratified) and standardizes its continuous features on its own train split.

    Args:
        num_centers: Number of centers (>= 1): one per (care unit, window) up to ``6 * 41 = 246``;
            beyond, ``floor`` or ``ceil(m / 41)`` sub-centers per window for a unit of ``m``
            centers (:mod:`~lightning_fed.data.synthetic_layout`; 920 centers: 3-4 per window).
        num_stays: Total ICU stays (>= ``num_centers * min_stays``).
        alpha: Model heterogeneity across care units (FedProx alpha, >= 0).
        beta: Feature heterogeneity across care units (FedProx beta, >= 0).
        drift: Scale of the within-unit random walk of features, weights and base rate over
            windows (>= 0).
        size_tail: Lomax (Pareto II) shape of the center sizes (> 0); smaller = heavier tail.
        signal: Multiplier of the shared weights and nonlinearity (> 0); larger = more
            predictable mortality.
        nonlinearity: Weight of a shared random ReLU-network term in the logit (>= 0): a signal
            that needs many optimizer steps, so pooled training pays over model averaging.
        feature_shift: Scale of the per-unit and per-center shifts of the feature means, in
            standard deviations (>= 0); FedProx's beta sets their spread, this their size.
        concept_shift: Scale of the per-unit and per-center deviations of the logistic weights
            from the shared ones (>= 0); FedProx's alpha sets their spread, this their size.
        unit_nonlinearity: Weight of a per-care-unit random ReLU term ``g_u`` (>= 0): unit-specific
            risk that a pooled model can condition on, an average model blurs, and a small center
            cannot learn alone.
        min_stays: Fewest stays per center (>= 10).
        partitioner: How rows become centers in :meth:`build`; ``None`` = :class:`Natural`
            (one center per site).
        seed: If given, fixes the data regardless of the run seed passed to :meth:`table` /
            :meth:`build` (so training seeds can vary over the same data).
        split: Per-center train / validation / test split, stratified by label, with an optional
            ``min_per_class`` guarantee (:class:`~lightning_fed.data.split.Split`); None: 80/10/10.
        off_concept: Fraction of centers in ``[0, 1)`` whose labels follow the reversed rule (the
            mixed federation, module docstring); 0 (default): none, and no ``concept`` attribute.

    Raises:
        ValueError: On an argument out of range (the message names it).
    """

    def __init__(
        self,
        num_centers: int = 230,
        num_stays: int = 71000,
        alpha: float = 0.5,
        beta: float = 0.5,
        drift: float = 0.3,
        size_tail: float = 1.0,
        signal: float = 0.25,
        nonlinearity: float = 2.5,
        feature_shift: float = 1.0,
        concept_shift: float = 0.1,
        unit_nonlinearity: float = 1.5,
        min_stays: int = 40,
        partitioner: Partitioner | None = None,
        seed: int | None = None,
        split: Split | None = None,
        off_concept: float = 0.0,
    ) -> None:
        self.off_concept = check_number("off_concept", off_concept, 0.0, strict=False)
        if self.off_concept >= 1.0:
            raise ValueError(
                f"off_concept is the fraction of off-concept centers and must be < 1, got {off_concept}"
            )
        self.num_centers, self.num_stays, self.min_stays, self.size_tail = check_layout(
            num_centers, num_stays, min_stays, size_tail
        )
        self.alpha = check_number("alpha", alpha, 0.0, strict=False)
        self.beta = check_number("beta", beta, 0.0, strict=False)
        self.drift = check_number("drift", drift, 0.0, strict=False)
        self.signal = check_number("signal", signal, 0.0, strict=True)
        self.nonlinearity = check_number("nonlinearity", nonlinearity, 0.0, strict=False)
        self.feature_shift = check_number("feature_shift", feature_shift, 0.0, strict=False)
        self.concept_shift = check_number("concept_shift", concept_shift, 0.0, strict=False)
        self.unit_nonlinearity = check_number("unit_nonlinearity", unit_nonlinearity, 0.0, strict=False)
        self._set_common(partitioner, seed, 0, split)

    def __repr__(self) -> str:
        return (
            f"TeacherICU(num_centers={self.num_centers}, num_stays={self.num_stays}, alpha={self.alpha}, "
            f"beta={self.beta}, drift={self.drift}, size_tail={self.size_tail}, signal={self.signal}, "
            f"nonlinearity={self.nonlinearity}, feature_shift={self.feature_shift}, "
            f"concept_shift={self.concept_shift}, unit_nonlinearity={self.unit_nonlinearity}, "
            f"min_stays={self.min_stays}, partitioner={self.partitioner!r}, seed={self.seed}"
            + (f", off_concept={self.off_concept})" if self.off_concept else ")")
        )

    def off_concept_centers(self, seed: int) -> np.ndarray:
        """Bool ``[C]``: the centers whose labels follow the reversed rule (module docstring)."""
        n_centers = len(self._layout()[0])
        off = np.zeros(n_centers, dtype=bool)
        count = round(self.off_concept * n_centers)
        if count:
            off[numpy_rng(seed, "synthetic", 20).choice(n_centers, size=count, replace=False)] = True
        return off

    def report_key(self) -> str:
        """``SyntheticICU``: the historical name every shipped config and earlier run uses (the same
        class, so both names share report rows)."""
        return "SyntheticICU"

    # ------------------------------------------------------------------ layout
    def _layout(self) -> tuple[np.ndarray, np.ndarray]:
        """Unit index and window index of each center (deterministic, seed-free; see
        :func:`~lightning_fed.data.synthetic_layout.center_layout`)."""
        return center_layout(self.num_centers)

    # ------------------------------------------------------------------ generation
    def table(self, seed: int) -> PooledTable:
        """Generate the pooled cohort in raw units.

        Args:
            seed: Run seed (ignored when ``self.seed`` is set).

        Returns:
            The pooled table; ``site`` is ``"<care unit> <start>-<end>"`` and ``attributes`` gives
            each site's ``care_unit``, ``window_start`` and ``base_rate``.
        """
        return self._generate(self.effective_seed(seed))[0]

    def _generate(self, seed: int) -> tuple[PooledTable, np.ndarray]:
        """The pooled table and each row's true log-odds of death (for diagnostics)."""
        n_units, n_feat = len(CARE_UNITS), len(FEATURE_NAMES)
        unit_c, window_c = self._layout()
        n_centers = len(unit_c)

        # --- unit level (FedProx alpha / beta) and drift walks
        rng = numpy_rng(seed, "synthetic", 0)
        u_model = rng.normal(0.0, np.sqrt(self.alpha), n_units)
        W_unit = u_model[:, None] + rng.standard_normal((n_units, n_feat))
        B_feat = rng.normal(0.0, np.sqrt(self.beta), n_units)
        v_unit = B_feat[:, None] + rng.standard_normal((n_units, _SHIFT_DIM))
        walk_w = np.stack([_walk(rng, n_feat) for _ in range(n_units)])
        walk_x = np.stack([_walk(rng, _SHIFT_DIM) for _ in range(n_units)])
        walk_b = np.stack([_walk(rng, 1)[:, 0] for _ in range(n_units)])

        # --- center level
        rng = numpy_rng(seed, "synthetic", 1)
        w_star = np.array([SHARED_WEIGHTS.get(n, 0.0) for n in FEATURE_NAMES])
        W = self.signal * w_star + self.concept_shift * (
            W_unit[unit_c]
            + self.drift * walk_w[unit_c, window_c]
            + _KAPPA * rng.standard_normal((n_centers, n_feat))
        )
        M = self.feature_shift * (
            v_unit[unit_c]
            + self.drift * walk_x[unit_c, window_c]
            + _KAPPA * rng.standard_normal((n_centers, _SHIFT_DIM))
        )
        jitter = rng.standard_normal(n_centers)
        rate_logit = _RATE_WALK * self.drift * walk_b[unit_c, window_c] + _RATE_JITTER * jitter
        sizes = center_sizes(rng, unit_c, self.size_tail, self.min_stays, self.num_stays)

        # unit-level calibration of center base rates to the unit targets (size-weighted)
        for u in range(n_units):
            sel = unit_c == u
            if not sel.any():
                continue
            target = UNIT_BASE_RATES[CARE_UNITS[u]]
            lo, hi = -10.0, 10.0
            for _ in range(60):
                mid = 0.5 * (lo + hi)
                rate = np.average(_sigmoid(_logit(target) + mid + rate_logit[sel]), weights=sizes[sel])
                lo, hi = (mid, hi) if rate < target else (lo, mid)
            rate_logit[sel] += _logit(target) + 0.5 * (lo + hi)
        base_rate = _sigmoid(rate_logit)

        # --- rows
        rng = numpy_rng(seed, "synthetic", 2)
        n = int(sizes.sum())
        site_c = np.repeat(np.arange(n_centers), sizes)
        unit_r = unit_c[site_c]
        Mr = M[site_c]
        x = np.empty((n, n_feat))
        severity = rng.standard_normal(n)

        age_mu = np.array([UNIT_AGE[u] for u in CARE_UNITS])[unit_r]
        # Age shifts between centers are damped (x0.4): care units differ by years, not decades.
        age = np.clip(age_mu + 16.0 * (0.4 * Mr[:, 0] + rng.standard_normal(n)), 18.0, 95.0)
        x[:, _COL["age"]] = age

        # categorical groups: logit = log prior + unit profile + center shift (per category column;
        # the unit part is gathered from the 6-row table, the same numbers as from a per-row copy)
        offset = 1 + len(_VITALS)
        profile = np.array([[_UNIT_PROFILE[u].get(name, 0.0) for name in FEATURE_NAMES] for u in CARE_UNITS])
        rows = np.arange(n)
        for group, cats, prior in _CATEGORICAL:
            cols = np.array([_COL[f"{group}_{_sanitize(c)}"] for c in cats])
            unit_logits = np.log(np.asarray(prior))[None, :] + profile[:, cols]  # [units, K]
            logits = [unit_logits[unit_r, j] + Mr[:, offset + j] for j in range(len(cats))]
            if group == "insurance":
                logits[0] += np.where(age >= 65.0, 2.5, -1.0)
            offset += len(cats)
            _draw_category(rng, logits, rows, x, cols)

        # Charlson flags
        charlson_cols = [_COL[c] for c in CHARLSON_COLUMNS]
        prev = np.array([p for _, p in _CHARLSON])
        logit_flags = (
            _logit(prev)[None, :]
            + profile[:, charlson_cols][unit_r]
            + Mr[:, offset : offset + len(_CHARLSON)]
            + 0.35 * ((age - 65.0) / 10.0)[:, None]
            + 0.3 * severity[:, None]
        )
        x[:, charlson_cols] = (rng.random((n, len(_CHARLSON))) < _sigmoid(logit_flags)).astype(np.float64)

        # vitals: mean / min / max
        for j, (vital, mu, sd, drop, rise, low, high, load) in enumerate(_VITALS):
            z = load * severity + np.sqrt(1.0 - load**2) * rng.standard_normal(n)
            mean = mu + sd * (Mr[:, 1 + j] + z)
            if vital == "mbp":  # MAP ~ (SBP + 2 DBP) / 3
                mean = 0.5 * mean + 0.5 * (x[:, _COL["sbp_mean"]] + 2.0 * x[:, _COL["dbp_mean"]]) / 3.0
            spread = rng.standard_normal((2, n))
            vmin = mean - drop * np.exp(0.35 * spread[0] + 0.1 * severity)
            vmax = mean + rise * np.exp(0.35 * spread[1] + 0.1 * severity)
            x[:, _COL[f"{vital}_mean"]] = np.clip(mean, low, high)
            x[:, _COL[f"{vital}_min"]] = np.clip(vmin, low, high)
            x[:, _COL[f"{vital}_max"]] = np.clip(vmax, low, high)

        del Mr  # the per-row center shifts [N, shift dims] are read only above (issue 33, peak)

        # --- label
        f = x.copy()
        x_cont = x[:, _CONTINUOUS]
        ref_sd = x_cont.std(axis=0)
        f[:, _CONTINUOUS] = (x_cont - x_cont.mean(axis=0)) / np.where(ref_sd > 0, ref_sd, 1.0)
        eta = _row_dots(W, site_c, f)
        eta += self.signal * (
            _INTERACTION * f[:, _COL["age"]] * f[:, _COL["heart_rate_mean"]]
            + _HINGE * np.maximum(-f[:, _COL["mbp_min"]] - 0.5, 0.0)
        )
        if self.nonlinearity > 0:
            eta += self.nonlinearity * _teacher(numpy_rng(seed, "synthetic", 3), f)
        if self.unit_nonlinearity > 0:  # each care unit's own nonlinear risk term g_u
            for u in range(len(CARE_UNITS)):
                rows = unit_r == u
                if rows.any():
                    g_u = _teacher(numpy_rng(seed, "synthetic", 4 + u), f)
                    eta[rows] += self.unit_nonlinearity * g_u[rows]
        off = self.off_concept_centers(seed)
        if off.any():  # the mixed federation: the off-concept centers' risk, reversed
            eta = np.where(off[site_c], -eta, eta)
        # per-center intercept so that the center's expected mortality equals its base rate
        lo, hi = np.full(n_centers, -30.0), np.full(n_centers, 30.0)
        for _ in range(50):
            mid = 0.5 * (lo + hi)
            rate = np.bincount(site_c, _sigmoid(mid[site_c] + eta), minlength=n_centers) / sizes
            low_side = rate < base_rate
            lo, hi = np.where(low_side, mid, lo), np.where(low_side, hi, mid)
        intercept = 0.5 * (lo + hi)
        true_logit = intercept[site_c] + eta
        y = (rng.random(n) < _sigmoid(true_logit)).astype(np.int64)

        labels, starts = site_labels(unit_c, window_c)
        attributes = site_attributes(labels, unit_c, starts, base_rate)
        if self.off_concept:
            for k, label in enumerate(labels):
                attributes[str(label)] = {**attributes[str(label)], "concept": "off" if off[k] else "in"}
        table = PooledTable(
            x=x,
            y=y,
            feature_names=FEATURE_NAMES,
            continuous=_CONTINUOUS.copy(),
            year=row_years(rng, starts, site_c),
            site=labels[site_c],
            charlson_columns=CHARLSON_COLUMNS,
            attributes=attributes,
        )
        return table, true_logit


#: Historical name of :class:`TeacherICU`, kept because existing configs use it
#: (``class_path: lightning_fed.data.SyntheticICU``): the same class, so the same data, bit for bit.
SyntheticICU = TeacherICU
