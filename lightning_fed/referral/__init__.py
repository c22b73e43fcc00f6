"""Inference-time referral (EdgeDRM): routers, prediction rules, workload, refer.

EdgeDRM's training (the potentials, stage II, the experts) lives in
:mod:`lightning_fed.algorithms.edgedrm`; its names are re-exported here for one release as aliases
of their former home.
"""

from lightning_fed.algorithms.edgedrm.experts import Experts
from lightning_fed.algorithms.edgedrm.potentials import Potentials, endpoint_losses, kappa, neighbour_table
from lightning_fed.algorithms.edgedrm.stage2 import Stage2Optim, Stage2Result, fit_stage2, stage2_batches
from lightning_fed.referral.prediction import HardTerminal, PredictionRule, UniformHistory, WeightedHistory
from lightning_fed.referral.refer import default_routers, draw_entries, refer
from lightning_fed.referral.routers import (
    CountOnlyRouter,
    EdgeDRMRouter,
    FedDRMReference,
    NoReferral,
    OracleSourceRouter,
    RandomRouter,
    Router,
    Routes,
    RouteSetup,
)
from lightning_fed.referral.workload import client_calls, edge_traffic, workload

__all__ = [
    "CountOnlyRouter",
    "EdgeDRMRouter",
    "Experts",
    "FedDRMReference",
    "HardTerminal",
    "NoReferral",
    "OracleSourceRouter",
    "Potentials",
    "PredictionRule",
    "RandomRouter",
    "RouteSetup",
    "Router",
    "Routes",
    "Stage2Optim",
    "Stage2Result",
    "UniformHistory",
    "WeightedHistory",
    "client_calls",
    "default_routers",
    "draw_entries",
    "edge_traffic",
    "endpoint_losses",
    "fit_stage2",
    "kappa",
    "neighbour_table",
    "refer",
    "stage2_batches",
    "workload",
]
