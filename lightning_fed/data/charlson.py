"""Charlson comorbidity flags from ICD-9-CM / ICD-10 diagnosis codes (ABPS Sec. 6.1 and 6.3).

The ABPS descriptor ``v_i`` ends with the train-split prevalence of 12 chronic Charlson Comorbidity
Index categories (Charlson et al. 1987). Codes follow the coding algorithm of Quan et al. (2005),
"Coding Algorithms for Defining Comorbidities in ICD-9-CM and ICD-10 Administrative Data"
(Med Care 43(11):1130-1139), matched as **prefixes** of the code with dots removed and upper-cased
(``"I21.4"`` -> ``"I214"`` starts with ``"I21"``). The 12 columns have exactly the names of the
synthetic generator's schema; Quan's 17 categories are merged as follows:

* ``charlson_liver`` = mild + moderate/severe liver disease;
* ``charlson_diabetes`` = diabetes with + without chronic complications;
* ``charlson_malignancy`` = Quan's "any malignancy, including lymphoma and leukemia, except malignant
  neoplasm of skin" **plus** metastatic solid tumour (lymphoma/leukaemia are kept, as in Quan);
* hemiplegia/paraplegia and AIDS/HIV are not among the 12 and are not flagged.

ICD-10 prefixes (``A-B`` is an inclusive range of equal-length prefixes)

=====================  ========================================================================
charlson_mi            I21, I22, I252
charlson_chf           I099, I110, I130, I132, I255, I420, I425-I429, I43, I50, P290
charlson_pvd           I70, I71, I731, I738, I739, I771, I790, I792, K551, K558, K559, Z958, Z959
charlson_cvd           G45, G46, H340, I60-I69
charlson_dementia      F00-F03, F051, G30, G311
charlson_copd          I278, I279, J40-J47, J60-J67, J684, J701, J703
charlson_rheum         M05, M06, M315, M32-M34, M351, M353, M360
charlson_pud           K25-K28
charlson_liver         B18, K700-K703, K709, K713-K715, K717, K73, K74, K760, K762-K764, K768,
                       K769, Z944; I850, I859, I864, I982, K704, K711, K721, K729, K765-K767
charlson_diabetes      E10-E14
charlson_renal         I120, I131, N032-N037, N052-N057, N18, N19, N250, Z490-Z492, Z940, Z992
charlson_malignancy    C00-C26, C30-C34, C37-C41, C43, C45-C58, C60-C76, C81-C85, C88, C90-C97;
                       C77-C80 (metastatic)
=====================  ========================================================================

ICD-9-CM prefixes

=====================  ========================================================================
charlson_mi            410, 412
charlson_chf           39891, 40201, 40211, 40291, 40401, 40403, 40411, 40413, 40491, 40493,
                       4254-4259, 428
charlson_pvd           0930, 4373, 440, 441, 4431-4439, 4471, 5571, 5579, V434
charlson_cvd           36234, 430-438
charlson_dementia      290, 2941, 3312
charlson_copd          4168, 4169, 490-505, 5064, 5081, 5088
charlson_rheum         4465, 7100-7104, 7140-7142, 7148, 725
charlson_pud           531-534
charlson_liver         07022, 07023, 07032, 07033, 07044, 07054, 0706, 0709, 570, 571, 5733,
                       5734, 5738, 5739, V427; 4560-4562, 5722-5728
charlson_diabetes      250
charlson_renal         40301, 40311, 40391, 40402, 40403, 40412, 40413, 40492, 40493, 582,
                       5830-5837, 585, 586, 5880, V420, V451, V56
charlson_malignancy    140-172, 1740-1958, 200-208, 2386; 196-199 (metastatic)
=====================  ========================================================================

Use :func:`charlson_flags` on a long table of (id, code, version) rows, or
:func:`charlson_categories` for one code.
"""

from __future__ import annotations

import re

import polars as pl

__all__ = [
    "CHARLSON_COLUMNS",
    "ICD9_PREFIXES",
    "ICD10_PREFIXES",
    "charlson_categories",
    "charlson_flags",
    "normalize_icd",
]

#: The 12 flag columns, in the synthetic generator's order.
CHARLSON_COLUMNS: tuple[str, ...] = (
    "charlson_mi",
    "charlson_chf",
    "charlson_pvd",
    "charlson_cvd",
    "charlson_dementia",
    "charlson_copd",
    "charlson_rheum",
    "charlson_pud",
    "charlson_liver",
    "charlson_diabetes",
    "charlson_renal",
    "charlson_malignancy",
)


def _expand(spec: str) -> tuple[str, ...]:
    """Expand ``"I425-I429, I43"`` into ``("I425", ..., "I429", "I43")``."""
    out: list[str] = []
    for item in (s.strip() for s in spec.split(",")):
        if "-" not in item:
            out.append(item)
            continue
        lo, hi = item.split("-")
        m_lo, m_hi = re.fullmatch(r"([A-Z]*)(\d+)", lo), re.fullmatch(r"([A-Z]*)(\d+)", hi)
        if m_lo is None or m_hi is None or m_lo[1] != m_hi[1] or len(m_lo[2]) != len(m_hi[2]):
            raise ValueError(f"bad ICD prefix range {item!r}")
        width = len(m_lo[2])
        out += [f"{m_lo[1]}{k:0{width}d}" for k in range(int(m_lo[2]), int(m_hi[2]) + 1)]
    return tuple(out)


_ICD10_SPEC: dict[str, str] = {
    "charlson_mi": "I21, I22, I252",
    "charlson_chf": "I099, I110, I130, I132, I255, I420, I425-I429, I43, I50, P290",
    "charlson_pvd": "I70, I71, I731, I738, I739, I771, I790, I792, K551, K558, K559, Z958, Z959",
    "charlson_cvd": "G45, G46, H340, I60-I69",
    "charlson_dementia": "F00-F03, F051, G30, G311",
    "charlson_copd": "I278, I279, J40-J47, J60-J67, J684, J701, J703",
    "charlson_rheum": "M05, M06, M315, M32-M34, M351, M353, M360",
    "charlson_pud": "K25-K28",
    "charlson_liver": "B18, K700-K703, K709, K713-K715, K717, K73, K74, K760, K762-K764, K768, K769, Z944, "
    "I850, I859, I864, I982, K704, K711, K721, K729, K765-K767",
    "charlson_diabetes": "E10-E14",
    "charlson_renal": "I120, I131, N032-N037, N052-N057, N18, N19, N250, Z490-Z492, Z940, Z992",
    "charlson_malignancy": "C00-C26, C30-C34, C37-C41, C43, C45-C58, C60-C76, C81-C85, C88, C90-C97, C77-C80",
}

_ICD9_SPEC: dict[str, str] = {
    "charlson_mi": "410, 412",
    "charlson_chf": "39891, 40201, 40211, 40291, 40401, 40403, 40411, 40413, 40491, 40493, 4254-4259, 428",
    "charlson_pvd": "0930, 4373, 440, 441, 4431-4439, 4471, 5571, 5579, V434",
    "charlson_cvd": "36234, 430-438",
    "charlson_dementia": "290, 2941, 3312",
    "charlson_copd": "4168, 4169, 490-505, 5064, 5081, 5088",
    "charlson_rheum": "4465, 7100-7104, 7140-7142, 7148, 725",
    "charlson_pud": "531-534",
    "charlson_liver": "07022, 07023, 07032, 07033, 07044, 07054, 0706, 0709, 570, 571, 5733, 5734, 5738, "
    "5739, V427, 4560-4562, 5722-5728",
    "charlson_diabetes": "250",
    "charlson_renal": "40301, 40311, 40391, 40402, 40403, 40412, 40413, 40492, 40493, 582, 5830-5837, 585, "
    "586, 5880, V420, V451, V56",
    "charlson_malignancy": "140-172, 1740-1958, 200-208, 2386, 196-199",
}

#: Category -> code prefixes (dots removed), ICD-10 (Quan et al. 2005).
ICD10_PREFIXES: dict[str, tuple[str, ...]] = {k: _expand(v) for k, v in _ICD10_SPEC.items()}
#: Category -> code prefixes (dots removed), ICD-9-CM (Quan et al. 2005, enhanced ICD-9-CM).
ICD9_PREFIXES: dict[str, tuple[str, ...]] = {k: _expand(v) for k, v in _ICD9_SPEC.items()}


def normalize_icd(code: str) -> str:
    """Upper-case ``code`` and drop dots and blanks (``" i21.4 "`` -> ``"I214"``)."""
    return re.sub(r"[.\s]", "", str(code)).upper()


def charlson_categories(code: str, version: int) -> set[str]:
    """The Charlson columns one ICD code falls into.

    Args:
        code: An ICD code, with or without the dot.
        version: 9 (ICD-9-CM) or 10 (ICD-10 / ICD-10-CM).

    Returns:
        The set of flag names (usually 0 or 1 of them).

    Raises:
        ValueError: If ``version`` is not 9 or 10.
    """
    prefixes = _table(version)
    norm = normalize_icd(code)
    return {cat for cat, pre in prefixes.items() if norm.startswith(pre)}


def _table(version: int) -> dict[str, tuple[str, ...]]:
    if version == 9:
        return ICD9_PREFIXES
    if version == 10:
        return ICD10_PREFIXES
    raise ValueError(f"icd_version must be 9 or 10, got {version!r}")


def _regex(prefixes: tuple[str, ...]) -> str:
    return "^(?:" + "|".join(sorted(prefixes, key=len, reverse=True)) + ")"


def charlson_flags(
    codes: pl.DataFrame | pl.LazyFrame,
    id_column: str = "hadm_id",
    code_column: str = "icd_code",
    version_column: str = "icd_version",
) -> pl.DataFrame:
    """Per-id Charlson flags from a long table of diagnosis codes.

    Args:
        codes: One row per (id, code); codes with or without dots, ``version`` 9 or 10 (rows with
            another version or a null code are ignored).
        id_column: The id column (stay or admission id).
        code_column: The ICD code column.
        version_column: The ICD version column (integers 9 / 10).

    Returns:
        One row per distinct id present in ``codes`` (sorted by id): ``id_column`` then the 12
        :data:`CHARLSON_COLUMNS` as ``Int8`` 0/1. Ids without any diagnosis row are absent: join
        on the left and fill 0.

    Raises:
        ValueError: If a named column is missing.
    """
    lazy = codes.lazy() if isinstance(codes, pl.DataFrame) else codes
    have = lazy.collect_schema().names()
    for name, col in (
        ("id_column", id_column),
        ("code_column", code_column),
        ("version_column", version_column),
    ):
        if col not in have:
            raise ValueError(f"charlson_flags: {name}={col!r} is not a column of codes (columns: {have})")
    code = pl.col(code_column).cast(pl.Utf8).str.replace_all(r"[.\s]", "").str.to_uppercase()
    version = pl.col(version_column).cast(pl.Int64, strict=False)
    flags = [
        (
            ((version == 9) & code.str.contains(_regex(ICD9_PREFIXES[cat])))
            | ((version == 10) & code.str.contains(_regex(ICD10_PREFIXES[cat])))
        )
        .fill_null(False)
        .alias(cat)
        for cat in CHARLSON_COLUMNS
    ]
    return (
        lazy.select(pl.col(id_column), *flags)
        .group_by(id_column)
        .agg([pl.col(cat).any().cast(pl.Int8) for cat in CHARLSON_COLUMNS])
        .sort(id_column)
        .collect()
    )
