"""BNN+FL (Saile et al. 2024; ABPS Sec. 6.2 baseline): FedAvg of mean-field Gaussian posteriors.

Every center trains a :class:`~lightning_fed.models.BayesianMLP` (``q_j(w) = N(mu_j, sigma_j^2)``
per weight, ``sigma_j = softplus(rho_j)``) on its negative ELBO, then, as in FedAvg's star, uploads
its shared posterior parameters ``(mu_j, rho_j)`` to the server (one message) and downloads the
aggregate (one message): ``2|W|`` bytes per center per round, ``|W|`` counting means and ``rho``.
With weights ``w_j = n_j / sum_k n_k`` the server computes, per weight,

    mu = sum_j w_j mu_j
    sigma^2 = rule(w, mu_j, sigma_j^2)        (a :class:`VarianceRule`, see below)
    rho = softplus^{-1}(sigma)

and sends ``(mu, rho)`` back. The paper leaves the variance rule open; two are configurable:

* :class:`MixtureMoments` (default): the Gaussian that matches the first two moments of the mixture
  ``sum_j w_j q_j`` (the closest Gaussian to it in ``KL(mixture || q)``):
  ``sigma^2 = sum_j w_j (sigma_j^2 + mu_j^2) - mu^2 = sum_j w_j sigma_j^2 + sum_j w_j (mu_j - mu)^2``.
  The spread of the centers' means counts as uncertainty.
* :class:`AverageVariance`: ``sigma^2 = sum_j w_j sigma_j^2`` (moments averaged like parameters).

The exchange, faults and validation are FedAvg's (:class:`~lightning_fed.algorithms.FedAvg`, which
this class extends by its server step only): unavailable centers
neither send nor receive, the server averages the uploads it accepts with weights renormalized over
them, and a center that rejects the download keeps its own posterior. Personal (head) layers, when
configured, stay local (both their ``mu`` and ``rho``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import Tensor

from lightning_fed.aggregation.mixing import sample_weights
from lightning_fed.aggregation.robust import Aggregator, refuse_aggregator
from lightning_fed.algorithms.fedavg import FedAvg
from lightning_fed.data.center import FederatedData
from lightning_fed.models.base import CenterModule
from lightning_fed.models.bayes_mlp import inverse_softplus
from lightning_fed.types import RoundContext

__all__ = ["AverageVariance", "BNNFedAvg", "MixtureMoments", "VarianceRule", "aggregate_moments"]


class VarianceRule(ABC):
    """How the server combines the centers' posterior variances into one."""

    @abstractmethod
    def __call__(self, weights: Tensor, mu: Tensor, var: Tensor, mean: Tensor) -> Tensor:
        """Aggregate variance.

        Args:
            weights: ``w_j`` ``[J]`` (sum 1).
            mu: Centers' means ``[J, ...]``.
            var: Centers' variances ``sigma_j^2`` ``[J, ...]``.
            mean: The aggregate mean ``sum_j w_j mu_j`` ``[...]``.
        """


def _weighted_sum(weights: Tensor, t: Tensor) -> Tensor:
    return (weights.view(-1, *([1] * (t.dim() - 1))) * t).sum(0)


class MixtureMoments(VarianceRule):
    """Moment matching of the mixture: ``sigma^2 = sum_j w_j sigma_j^2 + sum_j w_j (mu_j - mu)^2``."""

    def __call__(self, weights: Tensor, mu: Tensor, var: Tensor, mean: Tensor) -> Tensor:
        # The centered form equals sum_j w_j (sigma_j^2 + mu_j^2) - mu^2 and cannot go negative.
        return _weighted_sum(weights, var + (mu - mean).square())


class AverageVariance(VarianceRule):
    """The weighted average of the variances: ``sigma^2 = sum_j w_j sigma_j^2``."""

    def __call__(self, weights: Tensor, mu: Tensor, var: Tensor, mean: Tensor) -> Tensor:
        return _weighted_sum(weights, var)


def aggregate_moments(weights: Tensor, mu: Tensor, rho: Tensor, rule: VarianceRule) -> tuple[Tensor, Tensor]:
    """One aggregated posterior ``(mu, rho)`` (leading dimension 1) from ``J`` uploads ``[J, ...]``.

    Computes ``mu = sum_j w_j mu_j``, ``sigma^2 = rule(...)`` with ``sigma_j = softplus(rho_j)`` and
    ``rho = softplus^{-1}(sigma)`` in float64, returned in the uploads' dtype.
    """
    w = weights.to(mu.device, torch.float64)
    mu64, sigma = mu.to(torch.float64), torch.nn.functional.softplus(rho.to(torch.float64))
    mean = _weighted_sum(w, mu64)
    var = rule(w, mu64, sigma.square(), mean)
    # A variance that underflowed to 0 would give rho = -inf: keep it at the smallest positive float.
    new_sigma = var.sqrt().clamp_min(torch.finfo(torch.float64).tiny)
    return mean.unsqueeze(0).to(mu.dtype), inverse_softplus(new_sigma).unsqueeze(0).to(rho.dtype)


class BNNFedAvg(FedAvg):
    """Star exchange of mean-field posteriors (FedAvg's exchange); the server aggregates their moments.

    Args:
        variance: How the server combines variances (default :class:`MixtureMoments`).
        personal_layers: Head layers kept local (their ``mu`` and ``rho``), as in every method.
        aggregator: Refused (one line) unless None: the server matches the posteriors' moments
            (``mu`` and ``rho`` together), which no coordinate-wise robust aggregator preserves.
    """

    #: It takes ``aggregator`` only to refuse it (``fit`` lists the methods that use one).
    refuses_aggregator = True

    def __init__(
        self,
        variance: VarianceRule | None = None,
        personal_layers: int = 0,
        aggregator: Aggregator | None = None,
    ) -> None:
        refuse_aggregator("BNNFedAvg", aggregator, "its server matches the posteriors' moments (mu with rho)")
        super().__init__(personal_layers)  # no server momentum: moments are aggregated, not steps
        self.variance = variance if variance is not None else MixtureMoments()

    def setup(self, data: FederatedData, module: CenterModule, seed: int = 0) -> None:
        """Pair every shared ``*_mu`` with its ``*_rho``; any other shared parameter is an error."""
        super().setup(data, module, seed)
        shared = set(self.shared_names)
        self.pairs = tuple((n, n[: -len("_mu")] + "_rho") for n in self.shared_names if n.endswith("_mu"))
        paired = {n for pair in self.pairs for n in pair}
        unpaired = sorted(shared - paired) + sorted(rho for _, rho in self.pairs if rho not in shared)
        if not self.pairs or unpaired:
            raise ValueError(
                f"algorithm BNNFedAvg aggregates mean-field Gaussian posteriors (pairs name_mu/name_rho), "
                f"but model {type(module).__name__} shares {unpaired[:3] or list(self.shared_names)[:3]} "
                "without such a pair: use model.class_path=lightning_fed.models.BayesianMLP"
            )

    def server_model(
        self, uploaded: dict[str, Tensor], senders: Tensor, ctx: RoundContext
    ) -> dict[str, Tensor]:
        """The aggregated posterior ``(mu, rho)`` per pair (module docstring), FedAvg weights."""
        weights = sample_weights(self.n_train[senders])
        posterior: dict[str, Tensor] = {}
        for mu_name, rho_name in self.pairs:
            posterior[mu_name], posterior[rho_name] = aggregate_moments(
                weights, uploaded[mu_name], uploaded[rho_name], self.variance
            )
        return posterior
