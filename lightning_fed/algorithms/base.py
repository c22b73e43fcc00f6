"""The algorithm interface: which data each model trains on, and how parameters are exchanged.

An :class:`Algorithm` is a decision plugin: the federation calls its methods directly and uses what
they return (``fabric.call`` discards return values). One small subclass per method overrides
:meth:`Algorithm.aggregate` (and, rarely, :meth:`Algorithm.train_groups`); the local training loop
lives once, in the engines.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from torch import Tensor

from lightning_fed.comm.wire import Wire
from lightning_fed.data.center import FederatedData
from lightning_fed.dp.config import DPConfig
from lightning_fed.engine.base import Engine
from lightning_fed.engine.objective import LocalTerm
from lightning_fed.models.base import CenterModule
from lightning_fed.types import FinishContext, RoundContext

__all__ = ["Algorithm"]


class Algorithm(ABC):
    """Base class of federated methods.

    Args:
        personal_layers: Number of head layers kept local and never sent (0 shares everything;
            ABPS Sec. 6.4 extension P uses 1 or 2).
    """

    #: Whether this class's :meth:`aggregate` was audited to compute each receiver's new rows from
    #: its own rows, the messages the wire delivered and state every process computes alike (no
    #: state kept per center from a center's own rows, no receiver-side decision beyond the wire's
    #: checks). Read from the class itself, never inherited: a subclass is audited on its own.
    #: :meth:`replay_blocker` reads it.
    owner_rows_suffice: ClassVar[bool] = False

    def replay_blocker(self) -> str | None:
        """Why multi-process runs must give every process every center's full-precision rows, or None.

        Under DDP every process replays the whole aggregation, but keeps only the rows of the
        centers it trains (:class:`~lightning_fed.distributed.ShardedEngine`). With a lossy wire
        (``comm: BFloat16Hook``) the processes can exchange the trained rows in the wire's dtype
        (half the bytes) when, for every receiver, its owner's replay is exact: the receiver's new
        rows read only its own rows (exact at the owner) and the messages (exact anywhere, being
        already in the wire's dtype), and the wire's checks take each receiver's verdict from its
        owner. None when :attr:`owner_rows_suffice` is declared by this very class.
        """
        if type(self).__dict__.get("owner_rows_suffice", False):
            return None
        return (
            f"{type(self).__name__}'s aggregation is not audited to need only each receiver's own rows "
            "and the messages (docs/scale_out.md, 'What crosses between processes')"
        )

    def __init__(self, personal_layers: int = 0) -> None:
        if personal_layers < 0:
            raise ValueError(f"algorithm.personal_layers must be >= 0, got {personal_layers}")
        self.personal_layers = int(personal_layers)

    def model_for(self, module: CenterModule) -> CenterModule:
        """The per-center module the engines train, built from the user's ``module`` (default: itself).

        Called once by the federation, before the model is initialized. Methods that train more
        than the user's model at every center wrap it here (Ditto and APFL: a global and a personal
        copy, :class:`~lightning_fed.algorithms.twin.TwinModule`).
        """
        return module

    def prepare(self, data: FederatedData) -> FederatedData:
        """The view of the data this method trains and evaluates on (default: as given)."""
        return data

    def setup(self, data: FederatedData, module: CenterModule, seed: int = 0) -> None:
        """Called once before training: remember sizes and which parameters are shared."""
        self.num_centers = data.num_centers
        self.n_train = data.n_train
        personal = set(head_names(module, self.personal_layers)) if self.personal_layers else set()
        personal |= set(self.local_names(module))
        self.shared_names = tuple(n for n, _ in module.named_parameters() if n not in personal)
        if not self.shared_names:
            raise ValueError(
                f"algorithm.personal_layers={self.personal_layers} keeps every layer of the model local: "
                "nothing would be shared (use fewer personal layers, or LocalOnly)"
            )

    def local_names(self, module: CenterModule) -> tuple[str, ...]:
        """Parameters the method keeps at every center besides the ``personal_layers`` head (default
        none): FedBN's normalization layers, the personal copy of Ditto and APFL. They never cross
        the wire; :meth:`setup` leaves them out of :attr:`shared_names`."""
        return ()

    def train_groups(self, data: FederatedData) -> list[list[int]]:
        """Which centers' training rows each model trains on (default: one model per center)."""
        return [[c] for c in range(data.num_centers)]

    def local_term(self) -> LocalTerm | None:
        """An extra term of every center's local loss (FedProx, FedDyn, MOON); None by default.

        Called once, after :meth:`setup`; the engine adds the term in every local step.
        """
        return None

    def parameter_mask(self) -> dict[str, Tensor] | None:
        """Which coordinates each model trains: ``{name: bool [C, *shape]}``, or None (dense, the default).

        Sparse methods (DisPFL) return their per-center masks. The federation passes the mask to the
        engine (:meth:`Engine.set_mask <lightning_fed.engine.base.Engine.set_mask>`) after
        :meth:`setup` and after every :meth:`aggregate`, before installing the aggregated
        parameters; outside the mask parameters stay exactly 0 and get no update.
        """
        return None

    def start_round(self, ctx: RoundContext, engine: Engine, wire: Wire) -> None:  # noqa: B027
        """Before local training of ``ctx.round``: an exchange the round opens with (none by default).

        FedAvg with client sampling (:mod:`lightning_fed.comm.sampling`) sends the server's model to
        the sampled centers that do not hold it, so every sampled center trains from it.
        """

    def train_round(self, engine: Engine, round_idx: int) -> Tensor:
        """Local training of round ``round_idx``; returns each trained model's mean loss ``[models]``.

        Default: the engine's local epochs on every model (one line, shared by every method).
        Methods whose local training is not one model per center (FedSPD's cluster models) override
        it, so no compute is spent on an epoch whose result :meth:`aggregate` would overwrite.
        """
        return engine.train_round(round_idx)

    @abstractmethod
    def aggregate(self, ctx: RoundContext, params: dict[str, Tensor], wire: Wire) -> dict[str, Tensor]:
        """Exchange over ``wire`` and return the new stacked parameters (all names, center order)."""

    def finish(self, ctx: FinishContext) -> dict[str, Tensor]:
        """After the last round, before evaluation: a final stage (EdgeDRM's stage II); returns the
        final stacked parameters (default: ``ctx.params`` unchanged)."""
        return ctx.params

    def newcomer_weights(self, data: FederatedData, metadata: Tensor, peers: int) -> Tensor | None:
        """Which trained models a center that did not train receives (``evaluation.holdout_centers``).

        Returns ``[H, C]`` mixing weights over the ``C`` trained centers (each row sums to 1;
        :mod:`lightning_fed.aggregation.newcomer`), or None for the model every center started from
        (the seeded initialization). Default: every center by its training rows (for the star
        methods, FedAvg and its variants, every center holds the global model after aggregation, so
        this is the global model; personal layers, if any, are averaged too).

        Args:
            data: The trained federation (as :meth:`prepare` returned it).
            metadata: The newcomers' descriptors ``[H, d]`` (each from its own train split).
            peers: ``evaluation.holdout_peers`` (read by the peer methods' rule).
        """
        from lightning_fed.aggregation.newcomer import size_weights

        return size_weights(data.n_train, metadata.shape[0])

    def use_client_dp(self, dp: DPConfig) -> None:
        """Train with client-level DP-FedAvg (``trainer.dp.level: client``, :mod:`lightning_fed.dp.client`).

        Only FedAvg's star covers it (:meth:`FedAvg.use_client_dp
        <lightning_fed.algorithms.FedAvg.use_client_dp>`): the mechanism clips each center's update
        against the one server model it trained from and noises their sum once at the server;
        a peer method has no server and no common model to clip against.

        Raises:
            ValueError: One line naming ``trainer.dp.level`` (this default).
        """
        raise ValueError(
            f"trainer.dp.level=client: {type(self).__name__} has no server whose average DP-FedAvg's "
            "clipping and noise cover; use lightning_fed.algorithms.FedAvg (or FedProx, FedRep, FedBN, "
            "Ditto), or trainer.dp.level=sample"
        )

    def round_stats(self) -> dict[str, float]:
        """Scalars about the last round's decisions (e.g. isolation rate); logged per round."""
        return {}

    def summary_stats(self) -> dict[str, float]:
        """Scalars for the run summary (e.g. rested center-rounds); merged into ``summary.json``."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """State that must survive a checkpoint (none by default)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 (stateless by default)
        """Restore :meth:`state_dict`."""

    def shared(self, params: dict[str, Tensor]) -> dict[str, Tensor]:
        """The subset of ``params`` that crosses the wire."""
        return {n: params[n] for n in self.shared_names}


def head_names(module: CenterModule, layers: int) -> tuple[str, ...]:
    """``module.head_parameter_names(layers)``, checked: a tuple of the module's parameter names.

    Raises:
        ValueError: One line naming ``algorithm.personal_layers`` and the method to implement, when
            the module does not implement it, returns something else, or names unknown parameters.
    """
    where = f"algorithm.personal_layers={layers}"
    try:
        names = module.head_parameter_names(layers)
    except (ValueError, NotImplementedError) as err:
        raise ValueError(f"{where}: {err}") from None
    method = f"{type(module).__name__}.head_parameter_names({layers})"
    if isinstance(names, str) or not isinstance(names, list | tuple | set | frozenset):
        raise ValueError(
            f"{where}: {method} must return a tuple of parameter names, got {type(names).__name__}"
        )
    unknown = sorted(set(names) - {n for n, _ in module.named_parameters()})
    if unknown:
        raise ValueError(f"{where}: {method} names parameters the model does not have: {unknown[:3]}")
    return tuple(names)
