"""The one mixing function: mix_received over what arrived, and row renormalization."""

from __future__ import annotations

import torch

from lightning_fed.aggregation import mix, mix_received, renormalize


def test_mix_received_equals_the_mixing_matrix_on_a_three_center_toy() -> None:
    """theta = (2, 4, 8); messages 1 -> 0, 2 -> 0, 0 -> 2 with a = (1/2, 1, 3/4), b = (1/4, 1/4, 1/4):
    theta_0 = 1 + 1 + 2 = 4, theta_1 = 4, theta_2 = 6 + 0.5 = 6.5, which is mix() with
    M = [[1/2, 1/4, 1/4], [0, 1, 0], [1/4, 0, 3/4]]."""
    theta = {"t": torch.tensor([[2.0], [4.0], [8.0]])}
    src, dst = torch.tensor([1, 2, 0]), torch.tensor([0, 0, 2])
    a = torch.tensor([0.5, 1.0, 0.75], dtype=torch.float64)
    b = torch.full((3,), 0.25, dtype=torch.float64)
    out = mix_received(theta, {"t": theta["t"][src]}, dst, a, b)
    assert out["t"].reshape(-1).tolist() == [4.0, 4.0, 6.5]
    m = torch.tensor([[0.5, 0.25, 0.25], [0.0, 1.0, 0.0], [0.25, 0.0, 0.75]], dtype=torch.float64)
    assert torch.equal(out["t"], mix(theta, m)["t"])


def test_renormalize_over_what_arrived() -> None:
    """n = (30, 10, 20), 1 -> 0 and 0 -> 1 arrived: rows {0: 30/40, 10/40}, {1: 10/40, 30/40}, 2 alone."""
    n = torch.tensor([30.0, 10.0, 20.0], dtype=torch.float64)
    src, dst = torch.tensor([1, 0]), torch.tensor([0, 1])
    self_w, edge_w = renormalize(n, n[src], dst)
    assert self_w.tolist() == [0.75, 0.25, 1.0] and edge_w.tolist() == [0.25, 0.75]


def test_mix_received_in_groups_of_receivers_is_the_single_call() -> None:
    """30 centers, 90 messages in random (not receiver-major) order plus a receiver-major copy:
    mixing at most 4 messages' bytes at a time gives the single call's rows bit for bit (each row
    sums its messages in the same send order)."""
    g = torch.Generator().manual_seed(0)
    shared = {"w": torch.randn(30, 3, 2, generator=g), "b": torch.randn(30, 1, generator=g)}
    dst = torch.randint(0, 30, (90,), generator=g)
    dst[:5] = 7  # one receiver with more messages than a chunk
    received = {n: torch.randn(90, *t.shape[1:], generator=g) for n, t in shared.items()}
    a = torch.rand(30, generator=g, dtype=torch.float64)
    b = torch.rand(90, generator=g, dtype=torch.float64)
    per_message = 4 * (6 + 1)
    for order in (torch.arange(90), torch.argsort(dst, stable=True)):
        got = {n: t[order] for n, t in received.items()}
        one = mix_received(shared, got, dst[order], a, b[order])
        grouped = mix_received(shared, got, dst[order], a, b[order], max_bytes=4 * per_message)
        assert all(torch.equal(one[n], grouped[n]) for n in shared)


def test_weighted_average_in_column_blocks_is_the_whole_tensor_sum(monkeypatch) -> None:
    """Blocks of 64-aligned columns give the float64 sum of the whole tensor, bit for bit, before
    the cast (1 and 2 threads; widths that are and are not multiples of the block; a 1-wide tensor)."""
    import lightning_fed.aggregation.mixing as mixing

    monkeypatch.setattr(mixing, "AVERAGE_CHUNK_BYTES", 1)  # the smallest blocks: 64 columns each
    threads = torch.get_num_threads()
    try:
        for n_threads in (1, 2):
            torch.set_num_threads(n_threads)
            for rows, shape in [(3, (7,)), (230, (64, 130)), (600, (128, 60)), (41, (1,)), (9, (300,))]:
                gen = torch.Generator().manual_seed(rows)
                p = torch.randn(rows, *shape, generator=gen, dtype=torch.float64)
                w = torch.rand(rows, generator=gen, dtype=torch.float64)
                w = w / w.sum()
                whole = (w.view(-1, *([1] * len(shape))) * p).sum(0, keepdim=True)
                assert torch.equal(mixing.weighted_average({"t": p}, w)["t"], whole), (n_threads, rows, shape)
    finally:
        torch.set_num_threads(threads)
