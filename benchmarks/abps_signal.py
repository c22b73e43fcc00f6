"""How much utility signal does ABPS's selection have to learn from? Signal vs noise of the credits.

Reads finished ABPS runs that used the ``ScaledUCB`` policy (its checkpoint keeps, per pair
``(i, j)``, the sum, the sum of squares and the count of the clipped Shapley credits
``phi_bar_{j->i}`` of Eq. 5) and prints, per run:

* ``sigma_w``: the pooled within-pair standard deviation of ``phi_bar`` (one-way ANOVA residual),
  i.e. the noise of one peer's credit about its own mean;
* the mean ``phi_bar`` over same-care-unit pairs and over cross-unit pairs, and their difference
  ``delta`` (the signal a selector could exploit on the synthetic federations, where same-unit peers
  share the unit's risk terms);
* ``n_needed = (2 sigma_w / delta)^2``: observations of one pair before its mean is two standard
  errors from the other group's, against ``n_max`` and the mean number of observations per
  observed pair that the run actually made.

If ``n_needed`` is far above what a run can observe per peer (about ``rounds * kappa / (C - 1)``),
no selection policy can concentrate on the better peers within the budget, whatever its
exploration bonus: the mechanism is then limited by the sample budget, not by the policy.

Run: ``python benchmarks/abps_signal.py RUN_DIR [RUN_DIR ...]`` (TeacherICU / SyntheticICU /
FedProxSynthetic runs: the data are rebuilt from the run's ``config.yaml`` to read the care units).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
import yaml
from torch import Tensor

__all__ = ["signal_to_noise"]


def signal_to_noise(total: Tensor, sumsq: Tensor, count: Tensor, groups: Tensor) -> dict[str, float]:
    """Within-pair noise and same-group signal of per-pair credit sums.

    Args:
        total: ``[C, C]`` sum of ``phi_bar`` per pair.
        sumsq: ``[C, C]`` sum of ``phi_bar^2`` per pair.
        count: ``[C, C]`` observations per pair.
        groups: int ``[C]`` group (care unit) per center.

    Returns:
        ``sigma_w``, ``mean_same``, ``mean_cross``, ``delta``, ``n_needed``, ``n_max``,
        ``n_per_pair`` (mean over observed pairs), ``pairs``, ``observations``.
    """
    seen = count > 0
    dof = float(count.sum()) - int(seen.sum())
    ss = float(sumsq.sum()) - float((total[seen] ** 2 / count[seen]).sum())
    sigma = math.sqrt(max(ss, 0.0) / dof) if dof > 0 else float("nan")
    same = (groups[:, None] == groups[None, :]) & seen
    cross = (groups[:, None] != groups[None, :]) & seen
    m_same = float(total[same].sum() / count[same].sum()) if bool(same.any()) else float("nan")
    m_cross = float(total[cross].sum() / count[cross].sum()) if bool(cross.any()) else float("nan")
    delta = m_same - m_cross
    return {
        "sigma_w": sigma,
        "mean_same": m_same,
        "mean_cross": m_cross,
        "delta": delta,
        "n_needed": (2 * sigma / delta) ** 2 if delta > 0 else float("inf"),
        "n_max": float(count.max()),
        "n_per_pair": float(count[seen].mean()) if bool(seen.any()) else 0.0,
        "pairs": float(seen.sum()),
        "observations": float(count.sum()),
    }


def _policy_state(state: dict) -> dict:
    algo = state["federation"]["algorithm"] if "federation" in state else state["algorithm"]
    policy = algo["selector"].get("policy", {})
    if "count" not in policy:
        raise SystemExit("abps_signal: the run kept no credit sums: rerun it with the ScaledUCB policy")
    return policy


def _groups(run: Path) -> Tensor:
    from jsonargparse import ArgumentParser

    from lightning_fed.data.base import DataSource

    config = yaml.safe_load((run / "config.yaml").read_text())
    parser = ArgumentParser()
    parser.add_argument("--data", type=DataSource)
    data = parser.instantiate(parser.parse_object({"data": config["data"]})).data
    fed = data.build(int(config["seed"]))
    units = [str(c.attributes.get("care_unit")) for c in fed.centers]
    codes = {u: k for k, u in enumerate(sorted(set(units)))}
    return torch.tensor([codes[u] for u in units])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args()
    print("| run | sigma_w | mean same-unit | mean cross-unit | delta | n needed | n per pair (max) |")
    print("|---|---|---|---|---|---|---|")
    for run in args.runs:
        state = torch.load(run / "checkpoint.pt", weights_only=True)
        p = _policy_state(state)
        r = signal_to_noise(p["sum"], p["sumsq"], p["count"], _groups(run))
        print(
            f"| {run.name} | {r['sigma_w']:.3f} | {r['mean_same']:.4f} | {r['mean_cross']:.4f} | "
            f"{r['delta']:+.4f} | {r['n_needed']:.0f} | {r['n_per_pair']:.2f} ({r['n_max']:.0f}) |"
        )


if __name__ == "__main__":
    main()
