"""The EdgeDRM paper's Table 7: the audited ISIC2019 split, train / validation / test / excluded per center.

Builds :class:`~lightning_fed.data.ISIC2019` with ``metadata_csv`` (the App. D.3.1 leakage audit and
grouped split, :mod:`lightning_fed.data.isic_audit`) and counts each center's images by role.

Run: ``python benchmarks/isic_table7.py --root DIR --split-csv FILE --metadata-csv FILE [--link A B ...]``
(the data of ``configs/edgedrm_bench/data/isic_gpu.yaml``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from lightning_fed.data import ISIC2019
from lightning_fed.data.isic_audit import EXCLUDED, TEST, TRAIN, VAL

ROLES = (("train", TRAIN), ("val", VAL), ("test", TEST), ("excluded", EXCLUDED))


def audit_counts(data: ISIC2019) -> list[dict[str, object]]:
    """Per center (in center-id order), the audited ``train`` / ``val`` / ``test`` / ``excluded``
    image counts (the paper's Table 7); ``[]`` when ``data`` was built without ``metadata_csv``."""
    if data.audit is None:
        return []
    centers, role = data.row_centers, data.audit.role
    return [
        {"center": name} | {k: int(((centers == name) & (role == r)).sum()) for k, r in ROLES}
        for name in data.center_names
    ]


def table7_markdown(rows: Sequence[dict[str, object]]) -> str:
    """The counts as a markdown table with a total row."""
    keys = [k for k, _ in ROLES]
    lines = ["| center | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    lines += [f"| {r['center']} | " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows]
    totals = [sum(int(r[k]) for r in rows) for k in keys]
    lines.append("| total | " + " | ".join(map(str, totals)) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the paths, run the audit and print Table 7."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="folder of the ISIC2019 images")
    parser.add_argument("--split-csv", required=True, help="FLamby's split CSV (image, center, label, fold)")
    parser.add_argument("--metadata-csv", required=True, help="ISIC2019 metadata CSV (image, lesion_id)")
    parser.add_argument(
        "--link",
        nargs=2,
        action="append",
        default=[],
        metavar=("A", "B"),
        help="an extra duplicate pair by image name (repeatable)",
    )
    parser.add_argument("--audit-seed", type=int, default=42, help="seed of the grouped split (paper: 42)")
    args = parser.parse_args(argv)
    data = ISIC2019(
        root=args.root,
        split_csv=args.split_csv,
        metadata_csv=args.metadata_csv,
        links=[list(pair) for pair in args.link],
        audit_seed=args.audit_seed,
    )
    print(table7_markdown(audit_counts(data)))


if __name__ == "__main__":
    main()
