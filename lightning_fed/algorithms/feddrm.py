"""FedDRM (Wang et al. 2026b): the centralized reference of the EdgeDRM paper's Tables 1 and 2.

FedDRM is the server-coordinated method EdgeDRM starts from: "It learns a globally indexed
source-classification head and asks a server to compare all clients for every query" (EdgeDRM
App. A). "In centralized FL, a server can coordinate the scores of all m clients required to evaluate
the source probabilities s_i(z)" (Sec. 3.1), which is exactly what the decentralized method cannot
do, hence its place as a reference: "we include centralized FedDRM (Wang et al., 2026b) only as an
illustrative reference because its client-selection head scores all clients globally" (Sec. 5.1).

Model (EdgeDRM Sec. 2, Eqs. 1-2, one shared encoder ``g_theta``, ``z = g_theta(x)``):

    P_i(y = k | x) = softmax_k(alpha_ik + beta_ik^T z)                   private task head of client i
    s_i(z)         = softmax_i(log rho_i + b_i + vartheta_i^T z)          global source-selection head

with ``rho_i = n_i / N``. Training (the conditional-label plus source-classification objective, EdgeDRM
Eq. 3 / App. B.2, weighted by ``rho_i`` as in the centralized setting, Sec. 3.1) runs as the released
FedDRM code does, FedAvg through a server: each round every client takes its local steps on

    L_i = lambda * mean_r CE(P_i(. | x_ir), y_ir) + (1 - lambda) * mean_r CE(s(z_ir), i)

(its own rows carry its own id as the source label), then the server averages the encoder and the
source head with weights ``n_i / N`` and sends them back; the task heads ``(alpha_i, beta_i)`` stay
private (``personal_layers = 1``). The released code weighs the two losses ``0.9 / 0.1``
(``feddrm_ratio``), the default ``lam``. The engines add a local term to the model's task loss, whose
weight is 1, so the term here is ``(1 - lambda) / lambda`` times the source loss: the same objective
divided by ``lambda`` (the same gradient direction; ``lambda = 0.9`` scales the step by 1.11).

The source head is the model's ``source_head`` (``nn.Linear(d, m)``, zero-initialized, added to the
model template in :meth:`FedDRM.setup`), so it is trained by the model's optimizer, averaged and
checkpointed like every other shared parameter.

Evaluation (:meth:`FedDRM.finish`, after the last round, on every client's test rows pooled: the same
queries as EdgeDRM's referral table). The server encodes the query with the shared encoder, scores
every client with its selection head and routes the query to the argmax; that client's private head
answers ("FedDRM uses its global client-selection head", EdgeDRM App. D.1). The entry client plays no
part, so the number depends on the setting (data, partition, seed) and never on a graph. With
``prior=False`` (default, the released code's ``density_logits = machine_logits - log rho``) the
score is the density-ratio term ``b_j + vartheta_j^T z``; ``prior=True`` adds ``log rho_j`` (the
posterior ``s_j(z)``, EdgeDRM's prior-weighted potential ``h_j``). ``prediction="mixture"`` instead
mixes every client's class probabilities with weights ``softmax_j(score)``. The summary carries
``feddrm_accuracy`` (the EdgeDRM tables' FedDRM row), ``feddrm_balanced_accuracy`` and
``feddrm_source_accuracy`` (share of queries routed to their own source client).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_fed.aggregation.mixing import sample_weights, weighted_average
from lightning_fed.algorithms.edgedrm.experts import Experts
from lightning_fed.algorithms.fedavg import FedAvg
from lightning_fed.data.center import FederatedData
from lightning_fed.engine.objective import LocalTerm, TermBatch
from lightning_fed.metrics.balanced_accuracy import balanced_accuracy
from lightning_fed.models.base import CenterModule
from lightning_fed.types import FinishContext
from lightning_fed.validation import check_int, check_number

__all__ = ["SOURCE_HEAD", "FedDRM", "Routed", "SourceTerm"]

#: Name of the global source-selection head FedDRM adds to the model (``source_head.weight [m, d]``).
SOURCE_HEAD = "source_head"


def _select(score: Tensor, best: Tensor, p: Tensor) -> Tensor:
    """``prediction="select"``: the class probabilities of the selected client's head ``[q, K]``."""
    return p[torch.arange(p.shape[0], device=p.device), best]


def _mixture(score: Tensor, best: Tensor, p: Tensor) -> Tensor:
    """``prediction="mixture"``: every client's head weighted by ``softmax(score)`` ``[q, K]``."""
    return (torch.softmax(score, dim=1).unsqueeze(2) * p).sum(1)


#: Prediction rule of each ``algorithm.prediction`` name: ``(score [q, m], best [q], p [q, m, K]) -> [q, K]``.
_PREDICTIONS = {"select": _select, "mixture": _mixture}


@dataclass(frozen=True, eq=False)
class Routed:
    """FedDRM's answer to ``Q`` queries.

    Attributes:
        selected: The client the selection head routes each query to ``[Q]`` (int64).
        scores: Selection scores of every client ``[Q, m]`` (float64).
        probabilities: Class probabilities ``[Q, K]`` (float64) of the prediction rule.
    """

    selected: Tensor
    scores: Tensor
    probabilities: Tensor

    @property
    def prediction(self) -> Tensor:
        """Predicted class per query ``[Q]``."""
        return self.probabilities.argmax(1)


class SourceTerm(LocalTerm):
    """``(1 - lambda) / lambda * mean_r CE(log rho + b + vartheta^T z_r, c)`` for the rows of client ``c``."""

    needs_features = True

    def __init__(self, algorithm: FedDRM) -> None:
        self.algorithm = algorithm

    def loss(self, batch: TermBatch) -> Tensor:
        if batch.features is None:
            raise ValueError("FedDRM's source term needs the model's representation (features)")
        w = batch.params[f"{SOURCE_HEAD}.weight"]  # [k, m, d]
        b = batch.params[f"{SOURCE_HEAD}.bias"]  # [k, m]
        z = batch.features.to(w.dtype)  # [k, B, d]
        logits = torch.einsum("kbd,kmd->kbm", z, w) + b.unsqueeze(1)
        logits = logits + self.algorithm.log_rho.to(logits.device, logits.dtype)
        target = batch.centers.to(logits.device).view(-1, 1).expand(logits.shape[0], logits.shape[1])
        rows = F.cross_entropy(logits.flatten(0, 1), target.flatten(), reduction="none").view(target.shape)
        mask = batch.mask.to(rows.dtype)
        return self.algorithm.source_weight * (rows * mask).sum(1) / mask.sum(1).clamp_min(1.0)


class FedDRM(FedAvg):
    """FedAvg of a shared encoder and a global source-selection head, private task heads (module docstring).

    Args:
        lam: Task weight ``lambda`` in ``(0, 1]`` of ``lambda * task + (1 - lambda) * source`` (the
            released code's ``feddrm_ratio``: 0.9). ``1`` trains no selection head.
        prediction: ``"select"`` (the selected client's head answers, the released code) or
            ``"mixture"`` (``sum_j softmax_j(score) P_j(y | x)``).
        prior: Add ``log rho_j`` to the selection score (the posterior ``s_j(z)``); default False, the
            released code's density-ratio argmax.
        encode_batch_size: Rows per encoder call in the final evaluation.

    Raises:
        ValueError: One line naming ``algorithm.<field>`` for a value out of range.
    """

    def __init__(
        self,
        lam: float = 0.9,
        prediction: str = "select",
        prior: bool = False,
        encode_batch_size: int = 1024,
    ) -> None:
        super().__init__(personal_layers=1)
        self.lam = check_number("algorithm.lam", lam, 0.0, strict=True)
        if self.lam > 1.0:
            raise ValueError(f"algorithm.lam must lie in (0, 1] (task weight lambda), got {lam}")
        if prediction not in _PREDICTIONS:
            raise ValueError(f"algorithm.prediction must be one of {list(_PREDICTIONS)}, got {prediction!r}")
        if not isinstance(prior, bool):
            raise ValueError(f"algorithm.prior must be true or false, got {prior!r}")
        self.prediction, self.prior = prediction, prior
        self.encode_batch_size = check_int("algorithm.encode_batch_size", encode_batch_size, 1)
        #: Weight of the source loss next to the engine's task loss (weight 1): ``(1 - lambda) / lambda``.
        self.source_weight = (1.0 - self.lam) / self.lam
        self.log_rho = torch.zeros(0, dtype=torch.float64)
        #: The final evaluation (``feddrm_*`` summary entries); empty until :meth:`finish` ran.
        self.results: dict[str, float] = {}

    def setup(self, data: FederatedData, module: CenterModule, seed: int = 0) -> None:
        """Add the zero-initialized source head ``source_head = Linear(d, m)`` to ``module``, then FedAvg's
        setup (the head is shared: it is not among the model's head layers); ``log rho`` from the counts."""
        head = getattr(module, "head", None)
        if not isinstance(head, nn.Linear) or not callable(getattr(module, "encode", None)):
            raise ValueError(
                "model: FedDRM needs encode(x) -> z and a linear head named head (e.g. SmallCNN, "
                f"ResNet18GN); {type(module).__name__} has not"
            )
        if data.num_centers < 2:
            raise ValueError(
                "data: FedDRM needs at least 2 clients (its selection head classifies the source)"
            )
        n = data.n_train.to(torch.float64)
        if bool((n <= 0).any()):
            raise ValueError("data: FedDRM needs training rows at every client (log rho_i = log n_i / N)")
        source = nn.Linear(head.in_features, data.num_centers).to(head.weight.device, head.weight.dtype)
        nn.init.zeros_(source.weight)
        nn.init.zeros_(source.bias)
        module.add_module(SOURCE_HEAD, source)  # a second setup on the same template replaces it
        super().setup(data, module, seed)
        if any(name.startswith(f"{SOURCE_HEAD}.") for name in module.head_parameter_names(1)):
            raise ValueError("model: its head layers include FedDRM's source_head, which must be shared")
        self.log_rho = torch.log(n / n.sum())
        self.results = {}

    def local_term(self) -> LocalTerm | None:
        return SourceTerm(self) if self.source_weight > 0 else None

    def server_params(self, params: dict[str, Tensor]) -> dict[str, Tensor]:
        """Every client with the server's model: the ``n``-weighted average of the shared tensors
        (encoder and source head; what the last download gave every client) and its own task head."""
        avg = weighted_average(self.shared(params), sample_weights(self.n_train))
        return {n: avg[n].expand_as(t).clone() if n in avg else t for n, t in params.items()}

    @torch.no_grad()
    def route(
        self, module: CenterModule, params: dict[str, Tensor], x: Tensor, device: torch.device | None = None
    ) -> Routed:
        """Route queries ``x`` with the selection head and answer with the prediction rule.

        Args:
            module: The model template (with the source head of :meth:`setup`).
            params: Stacked per-client parameters in which every client holds the shared encoder and
                source head (:meth:`server_params`).
            x: Query inputs ``[Q, ...]``.
            device: Compute device (default: the parameters').
        """
        experts = Experts(module, params, batch_size=self.encode_batch_size, device=device)
        w_src = experts.params[f"{SOURCE_HEAD}.weight"][0].to(torch.float64)
        b_src = experts.params[f"{SOURCE_HEAD}.bias"][0].to(torch.float64)
        w = experts.params["head.weight"].to(torch.float64)  # [m, K, d]
        c = experts.params["head.bias"].to(torch.float64)  # [m, K]
        prior = self.log_rho.to(w.device) if self.prior else torch.zeros_like(b_src)
        selected, scores, probs = [], [], []
        for lo in range(0, x.shape[0], self.encode_batch_size):
            z = experts.encode(0, x[lo : lo + self.encode_batch_size]).to(torch.float64)
            score = z @ w_src.T + b_src + prior  # [q, m]
            p = torch.softmax(torch.einsum("qd,mkd->qmk", z, w) + c, dim=2)  # every client's [q, m, K]
            best = score.argmax(1)
            probs.append(_PREDICTIONS[self.prediction](score, best, p))
            selected.append(best)
            scores.append(score)
        if not selected:
            raise ValueError("FedDRM: no queries to route (the clients' test splits are empty)")
        return Routed(torch.cat(selected).cpu(), torch.cat(scores).cpu(), torch.cat(probs).cpu())

    def finish(self, ctx: FinishContext) -> dict[str, Tensor]:
        """Evaluate FedDRM once on the pooled test queries (module docstring); parameters unchanged."""
        params = self.server_params(ctx.params)
        centers = ctx.data.centers
        x = torch.cat([c.x_test for c in centers])
        y = torch.cat([c.y_test for c in centers]).to(torch.int64)
        source = torch.cat(
            [torch.full((c.x_test.shape[0],), u, dtype=torch.int64) for u, c in enumerate(centers)]
        )
        routed = self.route(ctx.module, params, x, ctx.device)
        pred = routed.prediction
        k = max(int(routed.probabilities.shape[1]), 2)
        self.results = {
            "feddrm_accuracy": float((pred == y).to(torch.float64).mean()),
            "feddrm_balanced_accuracy": float(balanced_accuracy(pred, y, k)),
            "feddrm_source_accuracy": float((routed.selected == source).to(torch.float64).mean()),
            "feddrm_queries": float(y.shape[0]),
        }
        ctx.log(dict(self.results))
        return ctx.params

    def summary_stats(self) -> dict[str, float]:
        return dict(self.results)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "results": dict(self.results)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.results = {k: float(v) for k, v in (state.get("results") or {}).items()}
