"""Former home of the two server-momentum classes; kept as an import alias for one release.

:class:`ServerMomentum` (FedAvgM on the star) now lives in
:mod:`lightning_fed.aggregation.server_optimizer` and :class:`CenterServerMomentum` (each center
as its own server, ABPS-X) in :mod:`lightning_fed.aggregation.center_optimizer`, beside the other
server optimizers; import them from there (or from :mod:`lightning_fed.aggregation`).
"""

from lightning_fed.aggregation.center_optimizer import CenterServerMomentum
from lightning_fed.aggregation.server_optimizer import ServerMomentum

__all__ = ["CenterServerMomentum", "ServerMomentum"]
