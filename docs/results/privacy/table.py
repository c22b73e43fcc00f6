"""The privacy-utility table (docs/results/privacy/README.md) from the run folders' summary.json.

python docs/results/privacy/table.py RUNS_ROOT > docs/results/privacy/table.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROWS = [
    ("client", "client_inf", "inf"),
    ("client", "client_clip_only", "inf (clip, unweighted, no noise)"),
    ("client", "client_eps8", "8"),
    ("client", "client_eps3", "3"),
    ("client", "client_eps1", "1"),
    ("sample", "sample_inf", "inf"),
    ("sample", "sample_eps8", "8"),
    ("sample", "sample_eps3", "3"),
    ("sample", "sample_eps1", "1"),
]


def _f(value: object, digits: int = 3) -> str:
    if value is None:
        return "-"
    v = float(value)
    return f"{v:.{digits}f}" if v == 0 or abs(v) >= 10**-digits else f"{v:.0e}"


def _epsilon(summary: dict) -> str:
    """The logged epsilon; a DP run's null is an infinite epsilon (JSON has no infinity)."""
    if "privacy/level" not in summary:
        return "-"
    value = summary.get("privacy/epsilon")
    return "inf" if value is None else _f(value, 2)


def main() -> None:
    root = Path(sys.argv[1])
    print(
        "| level | target epsilon | sigma | clip | logged epsilon (max) | median center epsilon | "
        "test AUROC mean | pooled | robust (centers) | undefined / fragile | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for level, name, target in ROWS:
        path = root / name / "summary.json"
        if not path.is_file():
            print(f"| {level} | {target} | (not run) | | | | | | | | |")
            continue
        s = json.loads(path.read_text())
        print(
            f"| {level} | {target} | {_f(s.get('privacy/noise_multiplier'))} | "
            f"{_f(s.get('privacy/max_grad_norm'), 2)} | {_epsilon(s)} | "
            f"{_f(s.get('privacy/epsilon_median'), 2)} | {_f(s['test_auroc_mean'])} | "
            f"{_f(s['test_auroc_pooled'])} | "
            f"{_f(s['test_auroc_robust'])} ({s['test_auroc_robust_centers']}) | "
            f"{s['test_auroc_undefined']} / {s['test_auroc_fragile']} | "
            f"{s['wall_seconds']:.0f} |"
        )


if __name__ == "__main__":
    main()
