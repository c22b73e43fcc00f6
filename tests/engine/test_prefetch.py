"""Dropout words drawn up front (CenterStreams.prefetch) equal the lazily drawn ones, per center.

A center's words must depend only on (seed, round, center, step), never on which other centers
share its process: that is what the DDP equality tests (tests/distributed) rely on.
"""

from __future__ import annotations

import pytest
import torch

from lightning_fed.engine import PackedEngine
from lightning_fed.engine.packed import CenterStreams
from lightning_fed.models import MortalityMLP
from lightning_fed.seeding import torch_generator

CPU = torch.device("cpu")


def _stream(seed: int, round_idx: int, center: int, count: int) -> torch.Tensor:
    """The first ``count`` words of a center's own stream."""
    gen = torch_generator(seed, "dropout", round_idx, center)
    return torch.randint(-(2**63), 2**63 - 1, (count,), dtype=torch.int64, generator=gen)


@pytest.mark.parametrize("threads", [1, 3])
def test_prefetched_words_are_each_centers_stream_in_step_order(threads: int) -> None:
    """Steps 3, 2, 2, 1 of 10 words, read as two draws (6 then 4 words) per step: row p of every
    draw is the next words of center ``centers[p]``'s stream, as the lazy draws give them."""
    centers, steps, per_step = [4, 9, 1, 7], [3, 2, 2, 1], 10
    lazy = CenterStreams(5, 2, centers, CPU)
    ahead = CenterStreams(5, 2, centers, CPU)
    ahead.prefetch(steps, per_step, threads=threads)
    for s in range(3):
        k = sum(n > s for n in steps)
        for count in (6, 4):
            got, expected = ahead.words(k, count).clone(), lazy.words(k, count).clone()
            assert torch.equal(got, expected), (s, count)
        ahead.next_step()
    for p, c in enumerate(centers):
        full = _stream(5, 2, c, steps[p] * per_step)
        table_rows = [ahead._table[ahead._step_start[s] + p] for s in range(steps[p])]
        assert torch.equal(torch.cat(table_rows), full)


def test_a_centers_words_do_not_depend_on_the_other_centers() -> None:
    """Center 9's words of each step are the same whichever centers share its streams."""
    per_step = 8
    alone = CenterStreams(0, 3, [9], CPU)
    alone.prefetch([4], per_step)
    crowd = CenterStreams(0, 3, [2, 11, 9, 5], CPU)
    crowd.prefetch([6, 5, 4, 1], per_step, threads=2)
    for s in range(4):
        k = sum(n > s for n in [6, 5, 4, 1])
        assert torch.equal(crowd.words(k, per_step)[2], alone.words(1, per_step)[0]), s
        crowd.next_step()
        alone.next_step()


def test_words_beyond_a_steps_prefetched_ones_continue_each_stream() -> None:
    """A step that draws more than ``words_per_step`` gets the rest from the generators, which stand
    after the round's prefetched words; a request for more rows than are active is an error."""
    streams = CenterStreams(1, 0, [3, 8], CPU)
    streams.prefetch([2, 1], 4)
    first = streams.words(2, 6).clone()
    for p, (c, n) in enumerate([(3, 2), (8, 1)]):
        full = _stream(1, 0, c, n * 4 + 2)
        assert torch.equal(first[p], torch.cat([full[:4], full[n * 4 :]]))
    streams.next_step()
    with pytest.raises(ValueError, match="1 active"):
        streams.words(2, 4)
    with pytest.raises(ValueError, match="non-increasing"):
        CenterStreams(1, 0, [3, 8], CPU).prefetch([1, 2], 4)


def test_prefetched_rounds_train_bit_identically_to_lazy_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine learns the words per step in round 0 and prefetches from round 1 on (3 worker
    threads here); an engine that never prefetches gives the same bits after 3 rounds."""
    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)
    gen = torch.Generator().manual_seed(0)
    sizes = [40, 7, 130, 3, 64, 90, 18]
    train = [(torch.randn(n, 6, generator=gen), (torch.rand(n, generator=gen) < 0.4).float()) for n in sizes]
    torch.manual_seed(0)
    module = MortalityMLP(in_features=6, hidden=(16, 8), dropout=0.2)
    engines = [PackedEngine(), PackedEngine()]
    for engine in engines:
        engine.setup(module, train, batch_size=16, epochs=2, seed=3)
    for r in range(3):
        engines[1]._words_per_step = None  # re-learnt during the round: every round drawn lazily
        losses = [engine.train_round(r) for engine in engines]
        assert torch.equal(losses[0], losses[1]), r
    assert engines[0]._words_per_step == 16 * (16 + 8) // 4 and "words" in engines[0].scratch.buffers
    a, b = (engine.get_params() for engine in engines)
    for name in a:
        assert torch.equal(a[name], b[name]), name
