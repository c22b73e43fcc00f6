"""What crosses between centers: encode/decode hooks, the wire, and the byte ledger."""

from lightning_fed.comm.bf16 import BFloat16Hook
from lightning_fed.comm.faults import FaultInjection
from lightning_fed.comm.hooks import CommHook, IdentityHook
from lightning_fed.comm.ledger import SERVER, Ledger
from lightning_fed.comm.norm_bound import NormBound
from lightning_fed.comm.wire import Wire

__all__ = [
    "SERVER",
    "BFloat16Hook",
    "CommHook",
    "FaultInjection",
    "IdentityHook",
    "Ledger",
    "NormBound",
    "Wire",
]
