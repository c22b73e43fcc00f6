"""Every figure of the package, in one place: drawing only, from tables or histories handed in.

The modules here read no run folder (the reporting layer, :mod:`lightning_fed.reporting`, reads and
aggregates; inference code such as :mod:`lightning_fed.referral.refer` draws its routing picture
from tensors). They depend on matplotlib, polars and :mod:`lightning_fed.io` only, so any layer may
import them without a cycle (docs/architecture.md, the layers). Submodules:

- :mod:`~lightning_fed.plots.canvas`: the Agg figure and the atomic PNG write;
- :mod:`~lightning_fed.plots.pareto`: accuracy against bandwidth (``pareto.png``), family colours;
- :mod:`~lightning_fed.plots.isolation`: the per-round isolation rate (``isolation.png``);
- :mod:`~lightning_fed.plots.partners`: ABPS posterior heat maps, partner graphs, isolation curve;
- :mod:`~lightning_fed.plots.lambda_sweep`: EdgeDRM's Table 5 figure (``lambda_table.png``);
- :mod:`~lightning_fed.plots.referral`: referral gain, tier shares, the routing picture.

Import the submodule you need (this package imports none of them, so importing it loads no matplotlib).
"""
