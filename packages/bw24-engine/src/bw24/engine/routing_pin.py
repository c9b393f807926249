"""RoutingPin: the run-gen gate's mixture-of-experts routing held to that of the exact decode.

Why: a mixture of experts' top-k is a step function of its input. Where a token's router logits are close,
an int8 step or a float16 ulp upstream picks another expert and the logits jump, so one rounded forward's NMSE
is one sample of a discontinuous quantity, not a measure of its arithmetic. On the H200 at 2f60de3 the
synthetic qwen3-30b-a3b's rounding alone (exact kernels, int8-rounded inputs) measured 0.0041, and 0.0026 with
nothing changed but the router's summation order (BW24_MOE_ROUTER); its int8 forwards drifted 0.0091-0.0097,
the prefill too, whose experts take no int8 input at all (evidence/run_gen_qwen3-30b-a3b-*_2f60de3_*.log). The
dense models' int8 drift was 0.88-0.97x their rounding alone in the same run.

With the pin, the exact decode records each MoE call's experts and router logits; every later forward of the
gate (the rounded prefill and decode, the rounding alone) runs the recorded experts, weighted by softmax of its
own router logits. Those forwards are smooth functions of their roundings again, so the NMSE bound means
what it means for a dense model. The router is still held to account: where a forward's own top-k differs
from the pin, the swap must be explained by how far its router logits moved. A correct top-k that picks b
over a (a pinned, b not) has l'_b >= l'_a, so l_a - l_b <= |l_a - l'_a| + |l'_b - l_b| <= 2 max|l' - l|
(l the exact logits, l' its own); a swap past that bound is a broken router or top-k, and fails the gate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .ops.ref import expert_weights, router_probs

# headroom over 2 max|dl| for the float64 comparison of float32 logits
_EPS = 1e-6


@dataclass
class RoutingPin:
    """Records the first forward it sees (`begin` ... `end`), then replays it on every later one.
    Backends call `apply` once per MoE call with the call's router logits and own top-k."""

    recording: bool = True
    n_layers: int = 0
    n_tokens: int = 0
    logits: list[np.ndarray] = field(default_factory=list)  # per layer [n_tokens, X] (the exact decode's)
    sel: list[np.ndarray] = field(default_factory=list)  # per layer [n_tokens, k]
    calls: int = 0
    picks: int = 0  # token-layer routings replayed
    flips: int = 0  # of them, where the forward's own top-k differed from the pin
    unexplained: int = 0  # of the flips, those its router's drift does not explain
    _rows: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    _pos: dict[int, int] = field(default_factory=dict)

    def begin(self) -> None:
        """A forward of the gate starts (from a reset cache)."""
        self.calls, self._pos, self._rows = 0, {}, []

    def end(self, n_tokens: int) -> None:
        """A forward of n_tokens ended: the recording is laid out by layer; a replay must have covered every
        layer's n_tokens (a captured graph replayed without its host hooks would not)."""
        if self.recording:
            if not self._rows or len(self._rows) % n_tokens:
                raise RuntimeError(f"routing pin: {len(self._rows)} MoE calls recorded for {n_tokens} tokens "
                                   "(the recording forward must be token-by-token decode)")
            L = len(self._rows) // n_tokens
            self.logits = [np.stack([self._rows[t * L + i][0] for t in range(n_tokens)]) for i in range(L)]
            self.sel = [np.stack([self._rows[t * L + i][1] for t in range(n_tokens)]) for i in range(L)]
            self.n_layers, self.n_tokens, self.recording, self._rows = L, n_tokens, False, []
            return
        seen = [self._pos.get(i, 0) for i in range(self.n_layers)]
        if seen != [n_tokens] * self.n_layers:
            raise RuntimeError(f"routing pin: a forward of {n_tokens} tokens routed {seen} tokens per layer "
                               "through the pin (a graph replay skips it: pinned forwards must run eager)")

    def apply(self, logits, sel, n_used: int, norm_weights: bool) -> tuple[np.ndarray, np.ndarray] | None:
        """One MoE call: router logits [T, X] and the backend's own top-k [T, n_used]. Recording: stores them
        (T must be 1) and returns None (the call runs its own routing). Replaying: returns the pinned experts
        [T, n_used] (int32, the exact decode's order) and their weights (float64: softmax of these logits at
        the pinned experts, renormalized when norm_weights), counting flips."""
        logits = np.asarray(logits, np.float64)
        sel = np.asarray(sel).reshape(logits.shape[0], n_used)
        if self.recording:
            if logits.shape[0] != 1:
                raise RuntimeError("routing pin: the recording forward must be token-by-token decode")
            self._rows.append((logits[0].copy(), sel[0].astype(np.int32)))
            self.calls += 1
            return None
        layer = self.calls % self.n_layers
        p0 = self._pos.get(layer, 0)
        T = logits.shape[0]
        if p0 + T > self.n_tokens:
            raise RuntimeError(f"routing pin: layer {layer} routed past the {self.n_tokens} recorded tokens")
        pinned, exact = self.sel[layer][p0:p0 + T], self.logits[layer][p0:p0 + T]
        self._pos[layer], self.calls = p0 + T, self.calls + 1
        wts = expert_weights(router_probs(logits), pinned, norm_weights)
        for t in range(T):
            self.picks += 1
            a = np.setdiff1d(pinned[t], sel[t])  # pinned, not picked by the forward
            if a.size == 0:
                continue
            b = np.setdiff1d(sel[t], pinned[t])  # picked, not pinned
            self.flips += 1
            drift = float(np.max(np.abs(logits[t] - exact[t])))
            worst = float(np.max(exact[t][a]) - (np.min(exact[t][b]) if b.size else -np.inf))
            if worst > 2 * drift + _EPS * max(1.0, float(np.max(np.abs(exact[t])))):
                self.unexplained += 1
        return pinned.astype(np.int32), wts

    @property
    def ok(self) -> bool:
        return self.unexplained == 0

    def describe(self) -> str:
        s = (f"routing pinned to the exact decode's ({self.n_layers} MoE layers): {self.flips} of {self.picks} "
             f"token-layer top-{self.sel[0].shape[1] if self.sel else 0} picks differed")
        return s + (f", {self.unexplained} not explained by the router logits' drift" if self.unexplained
                    else ", each within its router logits' drift")
