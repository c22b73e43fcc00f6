"""Which methods take ``algorithm.init_args.aggregator`` (a robust aggregator by class_path).

A method takes the key when its constructor has an ``aggregator`` argument and it does not take it
only to refuse it (``refuses_aggregator = True``: FedDyn, BNNFedAvg, whose server rule is no
aggregate of the uploads). ``fit`` names these methods in its one-line refusal of the key on any
other method (SCAFFOLD, MOON, ...), instead of jsonargparse's multi-line "not accepted" message.
"""

from __future__ import annotations

import inspect
import re

__all__ = ["aggregator_methods", "unaccepted_aggregator"]

#: jsonargparse's message for an ``aggregator`` key on a class whose constructor lacks it.
_NOT_ACCEPTED = re.compile(
    r"Problem with given class_path '(?P<path>[^']+)':\s*Option 'aggregator(?:\.[^']*)?' is not accepted"
)


def aggregator_methods() -> list[str]:
    """The names, in ``lightning_fed.algorithms.__all__`` order, of the methods that use the key."""
    import lightning_fed.algorithms as algorithms

    out = []
    for name in algorithms.__all__:
        cls = getattr(algorithms, name)
        if not (inspect.isclass(cls) and issubclass(cls, algorithms.Algorithm)):
            continue
        if "aggregator" in inspect.signature(cls).parameters and not getattr(
            cls, "refuses_aggregator", False
        ):
            out.append(name)
    return out


def unaccepted_aggregator(message: str) -> str | None:
    """The one line for jsonargparse's error ``message`` when it is an ``aggregator`` key given to a
    method that has no such argument; None for any other error.

    Args:
        message: The parser's error message (several lines).
    """
    found = _NOT_ACCEPTED.search(message)
    if found is None:
        return None
    method = found["path"].rsplit(".", 1)[-1]
    return (
        f"algorithm.init_args.aggregator: {method} takes no aggregator; drop the key, or use a method "
        f"that does: {', '.join(aggregator_methods())}"
    )
