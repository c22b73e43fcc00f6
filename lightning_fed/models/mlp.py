"""The ABPS paper's mortality MLP (Sec. 6.3): input -> 128 -> 64 -> 1, ReLU, dropout 0.2.

Trained with BCE on logits and Adam (lr 1e-3, weight decay 1e-5). :meth:`MortalityMLP.packed_forward`
runs ``k`` centers at once with batched matrix multiplies (``baddbmm``), which measured faster on
CPU than ``vmap`` over ``functional_call`` (docs/architecture.md, Performance decisions); dropout
masks are drawn per center from the engine's per-center seeded streams, so centers get independent
masks and a center's masks are the same whichever centers (or processes) it is packed with.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Literal

import torch
from torch import Tensor, nn

from lightning_fed.models.base import CenterModule, RowStreams, hidden_widths, input_width_to_build

__all__ = ["MortalityMLP", "RowStreams", "dropout_mask"]

_INT16_LEVELS = 1 << 16
#: Columns that elementwise transcendental ops (sigmoid, BCE) see per center: a multiple of every
#: CPU vector loop's stride (2 x 16 float32 with AVX-512), so no center's entries fall in a scalar tail.
_ROW_ALIGN = 64


def _scratch(workspace: dict[str, Tensor] | None, name: str, shape: tuple[int, ...], like: Tensor) -> Tensor:
    """A ``shape`` view of the reusable buffer ``workspace[name]`` (dtype and device of ``like``).

    The buffer grows when a larger shape is asked for and is otherwise reused as is (its contents
    are garbage: callers overwrite it). Without a workspace a fresh tensor is returned.
    """
    n = math.prod(shape)
    if workspace is None:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    buf = workspace.get(name)
    if buf is None or buf.numel() < n or buf.dtype != like.dtype or buf.device != like.device:
        buf = torch.empty(n, dtype=like.dtype, device=like.device)
        workspace[name] = buf
    return buf[:n].view(shape)


def _packed_linear(
    h: Tensor, w: Tensor, b: Tensor, workspace: dict[str, Tensor] | None = None, name: str = "z"
) -> Tensor:
    """``b + h W^T`` per center: ``h [k, B, in]``, ``w [k, out, in]``, ``b [k, out]`` -> ``[k, B, out]``.

    A one-unit layer is computed as two units (the second with zero weights, then dropped): torch
    computes a batched product with a single output column through kernels whose rounding depends on
    how many centers share the call, while with two columns every center's product is bit-identical
    whatever the number of centers. So a shard of centers trains exactly as in the whole federation
    (:mod:`lightning_fed.distributed`); the extra column costs nothing measurable.

    With a ``workspace`` (see :meth:`MortalityMLP.packed_loss_grad`) the result (and the padded
    one-unit weights) live in its buffers ``name`` and ``name + ".w"`` / ``name + ".b"``.
    """
    if workspace is None:  # autograd may run through this: no out= (and nothing to reuse)
        if w.shape[1] == 1:
            w2, b2 = torch.cat([w, torch.zeros_like(w)], 1), torch.cat([b, torch.zeros_like(b)], 1)
            return torch.baddbmm(b2.unsqueeze(1), h, w2.transpose(1, 2))[..., :1]
        return torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))
    k, rows, units = h.shape[0], h.shape[1], w.shape[1]
    if units == 1:
        w2 = _scratch(workspace, f"{name}.w", (k, 2, w.shape[2]), w)
        b2 = _scratch(workspace, f"{name}.b", (k, 2), b)
        w2[:, :1].copy_(w)
        w2[:, 1:].zero_()
        b2[:, :1].copy_(b)
        b2[:, 1:].zero_()
        out = _scratch(workspace, name, (k, rows, 2), h)
        return torch.baddbmm(b2.unsqueeze(1), h, w2.transpose(1, 2), out=out)[..., :1]
    out = _scratch(workspace, name, (k, rows, units), h)
    return torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2), out=out)


def _relu_dropout_gate(
    z: Tensor,
    p: float,
    generator: torch.Generator | RowStreams | None,
    workspace: dict[str, Tensor] | None,
    name: str,
) -> Tensor:
    """``1[z > 0] * dropout_mask`` (the factor that turns ``z`` into the layer's activation).

    The same values as ``(z > 0).to(z.dtype) * dropout_mask(z, p, generator)``: both factors are 0
    or 1 (times the exact mask scale), so ANDing the two conditions and scaling once gives the same
    bits while making two passes fewer and no fresh tensors (the buffers ``name`` / ``name + ".keep"``
    / ``name + ".bool"`` of ``workspace``). Without a generator or with ``p == 0`` it is ``1[z > 0]``.
    """
    positive = _scratch(workspace, f"{name}.bool", tuple(z.shape), z.new_empty(0, dtype=torch.bool))
    torch.gt(z, 0, out=positive)
    gate = _scratch(workspace, name, tuple(z.shape), z)
    if generator is None or p <= 0:
        return gate.copy_(positive)
    threshold, scale = _dropout_threshold(p)
    keep = _scratch(workspace, f"{name}.keep", tuple(z.shape), positive)
    torch.ge(_uniform16(z, generator), threshold, out=keep)
    positive.logical_and_(keep)
    return gate.copy_(positive).mul_(scale)


def _row_aligned(op: Callable[..., Tensor], *rows: Tensor) -> Tensor:
    """Elementwise ``op`` on ``[k, B]`` rows, computed on rows padded to :data:`_ROW_ALIGN` columns.

    Vectorized ``exp``/``log`` round differently from their scalar tail loop; with aligned rows every
    center's entries take the vector path whatever ``k`` is (same reason as :func:`_packed_linear`).
    """
    width = rows[0].shape[-1]
    pad = (-width) % _ROW_ALIGN
    if pad == 0:
        return op(*rows)
    return op(*(torch.nn.functional.pad(r, (0, pad)) for r in rows))[..., :width]


def _dropout_threshold(p: float) -> tuple[int, float]:
    """Threshold on a signed 16-bit uniform and the inverted-dropout scale for drop rate ``p``."""
    kept_levels = round((1.0 - p) * _INT16_LEVELS)
    threshold = _INT16_LEVELS // 2 - kept_levels  # P(v >= threshold) = kept_levels / 2^16
    return threshold, _INT16_LEVELS / kept_levels


def _uniform16(like: Tensor, generator: torch.Generator | RowStreams) -> Tensor:
    """Signed 16-bit uniforms shaped like ``like``, four per 64-bit word of ``generator``.

    With per-row streams row ``c`` comes from stream ``c`` alone (see :func:`dropout_mask`); the
    words may be a strided view of the streams' buffer (no copy is made).
    """
    if isinstance(generator, torch.Generator):
        n = like.numel()
        words = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64, generator=generator)
        return words.view(torch.int16)[:n].view(like.shape)
    rows, n = like.shape[0], like[0].numel()
    words = generator.words(rows, (n + 3) // 4)
    return words.view(torch.int16)[:, :n].reshape(like.shape)


def dropout_mask(like: Tensor, p: float, generator: torch.Generator | RowStreams) -> Tensor:
    """Inverted-dropout mask ``keep / P(keep)`` shaped like ``like``, drawn cheaply from ``generator``.

    One 64-bit random integer gives four 16-bit uniforms, each compared with a threshold, which
    measured ~7x faster than ``bernoulli_`` on CPU (the mask RNG was 44 % of a packed round). The
    keep probability is therefore ``round((1 - p) 2^16) / 2^16`` (within 1e-5 of ``1 - p``) and the
    mask divides by exactly that, so the layer's expectation is preserved.

    ``generator`` is either one ``torch.Generator`` for the whole mask, or per-row streams
    (:class:`RowStreams`, e.g. the packed engine's per-center streams): then row ``c`` of
    ``like`` (``like[c]``, one center's activations) is drawn from stream ``c`` alone, so a center's
    masks do not depend on which other centers share the batch (or the process).
    """
    threshold, scale = _dropout_threshold(p)
    return (_uniform16(like, generator) >= threshold).to(like.dtype).mul_(scale)


class MortalityMLP(CenterModule):
    """Two-hidden-layer MLP for binary mortality prediction.

    Args:
        in_features: Input width; ``None`` takes it from the data when the federation starts.
        hidden: Hidden widths (paper: 128, 64).
        dropout: Dropout probability after each hidden ReLU (paper: 0.2).
        lr: Learning rate (paper: 1e-3, with Adam).
        weight_decay: L2 weight decay (paper: 1e-5).
        optimizer: ``"adam"`` (the paper's) or ``"sgd"`` (plain SGD, no momentum: the local optimizer
            that SCAFFOLD's control update assumes, Karimireddy et al. 2020, Sec. 3).
    """

    def __init__(
        self,
        in_features: int | None = None,
        hidden: Sequence[int] = (128, 64),
        dropout: float = 0.2,
        lr: float = 1e-3,
        weight_decay: float = 1e-5,
        optimizer: Literal["adam", "sgd"] = "adam",
    ) -> None:
        super().__init__()
        if optimizer not in ("adam", "sgd"):
            raise ValueError(f"model.optimizer must be 'adam' or 'sgd', got {optimizer!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"model.dropout must be in [0, 1), got {dropout}")
        if lr <= 0:
            raise ValueError(f"model.lr must be > 0, got {lr}")
        if weight_decay < 0:
            raise ValueError(f"model.weight_decay must be >= 0, got {weight_decay}")
        widths = hidden_widths(hidden)
        self.save_hyperparameters()
        self.hidden = widths
        self.dropout = float(dropout)
        self.lr = float(lr)
        self.weight_decay = float(weight_decay)
        self.optimizer_name = optimizer
        self.layers = nn.ModuleList()
        self.in_features: int | None = None
        if in_features is not None:
            self.set_num_features(in_features)

    def set_num_features(self, num_features: int) -> None:
        """Build the layers for ``num_features`` inputs (error if built for another width)."""
        if not input_width_to_build(self.in_features, num_features):
            return
        self.in_features = int(num_features)
        widths = [self.in_features, *self.hidden, 1]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(widths))

    def head_parameter_names(self, layers: int = 1) -> tuple[str, ...]:
        """Parameters of the last ``layers`` Linear layers (1: output layer; 2: last two)."""
        if not 1 <= layers <= len(self.layers):
            raise ValueError(f"head layers must be in [1, {len(self.layers)}], got {layers}")
        first = len(self.layers) - layers
        return tuple(f"layers.{i}.{p}" for i in range(first, len(self.layers)) for p in ("weight", "bias"))

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``[n]`` for inputs ``[n, F]``."""
        return self.forward_features(x)[0]

    def forward_features(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Logits ``[n]`` and the last hidden layer's activation ``[n, H]`` (after ReLU and dropout)."""
        for layer in self.layers[:-1]:
            x = nn.functional.dropout(torch.relu(layer(x)), self.dropout, self.training)
        return self.layers[-1](x).squeeze(-1), x

    def packed_forward(
        self, params: dict[str, Tensor], x: Tensor, generator: torch.Generator | RowStreams | None
    ) -> Tensor:
        """Logits ``[k, B]`` for ``k`` stacked parameter sets and inputs ``[k, B, F]``.

        Layer l computes ``h <- b_l + h W_l^T`` per center with one ``baddbmm``; when ``generator``
        is given, each hidden activation is multiplied by an independent inverted-dropout mask
        (:func:`dropout_mask`).
        """
        return self.packed_forward_features(params, x, generator)[0]

    def packed_forward_features(
        self, params: dict[str, Tensor], x: Tensor, generator: torch.Generator | RowStreams | None
    ) -> tuple[Tensor, Tensor]:
        """Packed logits ``[k, B]`` and last hidden activations ``[k, B, H]`` (see :meth:`packed_forward`)."""
        h = x
        last = len(self.layers) - 1
        for i in range(last):
            w, b = params[f"layers.{i}.weight"], params[f"layers.{i}.bias"]
            h = torch.relu(_packed_linear(h, w, b))
            if generator is not None and self.dropout > 0:
                h = h * dropout_mask(h, self.dropout, generator)
        w, b = params[f"layers.{last}.weight"], params[f"layers.{last}.bias"]
        return _packed_linear(h, w, b).squeeze(-1), h

    def packed_loss_grad(
        self,
        params: dict[str, Tensor],
        x: Tensor,
        y: Tensor,
        mask: Tensor,
        generator: torch.Generator | RowStreams | None,
        grads: dict[str, Tensor],
        workspace: dict[str, Tensor] | None = None,
    ) -> Tensor:
        """Per-center mean BCE ``[k]`` and hand-derived gradients (one forward, one backward).

        With ``a_0 = x``, ``z_l = a_{l-1} W_l^T + b_l``, ``a_l = relu(z_l) * m_l`` (``m_l`` the dropout
        mask) and the loss of center c ``L_c = sum_b mask_b BCE(z_L, y_b) / n_c``:
        ``dz_L = (sigmoid(z_L) - y) mask / n_c``; for each layer from the top ``dW_l = dz_l^T a_{l-1}``,
        ``db_l = sum_b dz_l`` and ``dz_{l-1} = (dz_l W_l) * 1[z_{l-1} > 0] m_{l-1}``.
        Skips autograd's graph bookkeeping (measured ~13 % faster per round than autograd).

        Args:
            workspace: Scratch buffers kept by the caller between calls (the packed engine passes
                one dict for the whole run): every activation, gate and gradient temporary is
                written into them (``out=``) instead of a fresh tensor, which on CPU saves the page
                faults of a fresh multi-MB allocation per op (measured ~25x the cost of reusing
                the memory). The arithmetic is the same op for op, so the results are bit-identical
                with and without it. None allocates as usual.
        """
        ws = {} if workspace is None else workspace
        k, rows = x.shape[0], x.shape[1]
        acts = [x]
        gates = []
        last = len(self.layers) - 1
        h = x
        for i in range(len(self.layers)):
            w, b = params[f"layers.{i}.weight"], params[f"layers.{i}.bias"]
            h = _packed_linear(h, w, b, ws, f"z{i}")
            if i < last:
                gate = _relu_dropout_gate(h, self.dropout, generator, ws, f"gate{i}")
                h.mul_(gate)
                gates.append(gate)
                acts.append(h)
        logits = h.squeeze(-1)
        count = mask.sum(1)
        per_row = _row_aligned(
            lambda z, t: torch.nn.functional.binary_cross_entropy_with_logits(z, t, reduction="none"),
            logits,
            y,
        )
        loss = (per_row * mask).sum(1) / count
        dz = ((_row_aligned(torch.sigmoid, logits) - y) * mask / count.unsqueeze(1)).unsqueeze(-1)
        for i in range(last, -1, -1):
            w = params[f"layers.{i}.weight"]
            # Computed contiguous, then copied into the strided gradient views: a bmm written
            # straight into them picks kernels by the number of centers (see _packed_linear).
            dw = _scratch(ws, f"dw{i}", (k, *w.shape[1:]), x)
            grads[f"layers.{i}.weight"].copy_(torch.bmm(dz.transpose(1, 2), acts[i], out=dw))
            grads[f"layers.{i}.bias"].copy_(dz.sum(1))
            if i > 0:
                out = _scratch(ws, f"dz{i - 1}", (k, rows, w.shape[2]), x)
                if w.shape[1] == 1:
                    # A one-unit layer's dz W is an outer product: each entry is one product, so the
                    # broadcast multiply gives the bmm's exact bits at a fifth of its cost.
                    dz = torch.mul(dz, w, out=out).mul_(gates[i - 1])
                else:
                    dz = torch.bmm(dz, w, out=out).mul_(gates[i - 1])
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """Adam (the paper's) or plain SGD with the model's learning rate and L2 weight decay."""
        if self.optimizer_name == "sgd":
            return torch.optim.SGD(self.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        return torch.optim.Adam(self.parameters(), lr=self.lr, weight_decay=self.weight_decay)
