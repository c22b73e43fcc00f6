"""EdgeDRM (Ma, Wang & Zhang): the method and its training, in one package.

* :mod:`~lightning_fed.algorithms.edgedrm.method`: :class:`EdgeDRM`, DFedAvgM stage I then stage II
  in :meth:`EdgeDRM.finish`;
* :mod:`~lightning_fed.algorithms.edgedrm.stage2`: stage II's balanced endpoint objective and its
  optimizers (:func:`fit_stage2`);
* :mod:`~lightning_fed.algorithms.edgedrm.potentials`: the routing potentials ``(b_u, theta_u)``
  stage II learns and the endpoint losses;
* :mod:`~lightning_fed.algorithms.edgedrm.experts`: the clients' trained models as experts (one
  frozen-encoder pass gives the representation and the logits).

Inference on a trained run (routers, prediction rules, ``lightning-fed refer``) is
:mod:`lightning_fed.referral`, which reads the potentials and experts from here; nothing here
imports it.
"""

from lightning_fed.algorithms.edgedrm.experts import Experts
from lightning_fed.algorithms.edgedrm.method import EdgeDRM
from lightning_fed.algorithms.edgedrm.potentials import Potentials, endpoint_losses, kappa, neighbour_table
from lightning_fed.algorithms.edgedrm.stage2 import Stage2Optim, Stage2Result, fit_stage2, stage2_batches

__all__ = [
    "EdgeDRM",
    "Experts",
    "Potentials",
    "Stage2Optim",
    "Stage2Result",
    "endpoint_losses",
    "fit_stage2",
    "kappa",
    "neighbour_table",
    "stage2_batches",
]
