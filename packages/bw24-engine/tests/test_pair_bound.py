"""benchmarks/pair_bound.py (issue 8's real pair, replayed against costs): its round accounting on sequences whose
rounds can be counted by hand, and its grid on a small tokens file."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "pair_bound.py"


@pytest.fixture(scope="module")
def pb():
    spec = importlib.util.spec_from_file_location("pair_bound", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["pair_bound"] = mod  # (its frozen dataclass resolves annotations through sys.modules)
    spec.loader.exec_module(mod)
    return mod


def _right_and_wrong(n: int, k: int):
    seq = list(range(100, 100 + n + k + 1))
    right = [seq[g + 1: g + 1 + k] for g in range(n)]   # after prompt + seq[:g + 1] the target says seq[g + 1]
    wrong = [[7] * k for _ in range(n)]
    return seq, right, wrong


def test_verify_cost_is_a_step_at_one_row_and_the_given_figure_at_eight(pb):
    c = pb.Costs(step=1000.0, draft=600.0, verify8=2100.0)
    assert c.verify(1) == 1000.0 and c.verify(8) == pytest.approx(2100.0) and c.verify(4) == pytest.approx(1000 + 3 * 1100 / 7)


def test_every_draft_accepted_emits_k_plus_one_a_round(pb):
    n, k = 33, 7
    seq, right, _ = _right_and_wrong(n, k)
    c = pb.Costs(step=1000.0, draft=500.0, verify8=2000.0)
    r = pb.replay([1, 2, 3], seq, right, c, k_max=k, n=n)
    # 32 tokens after the first: 4 rounds of 8 (the last round's K is cut to what is left: 32 - 24 - 1 = 7)
    assert r["rounds"] == 4 and r["acceptance"] == 1.0
    # draft steps as DraftModelDrafter.propose_into takes them: the first round catches up the first token and feeds
    # 6 drafts (7 steps); each later one catches up the 7th draft (never fed) and the bonus token, then feeds 6 (8)
    assert r["spec_us"] == pytest.approx((7 + 3 * 8) * 500.0 + 4 * 2000.0)
    assert r["ratio"] == pytest.approx(n * 1000.0 / r["spec_us"])


def test_every_draft_rejected_emits_one_a_round(pb):
    n, k = 12, 3
    seq, _, wrong = _right_and_wrong(n, k)
    c = pb.Costs(step=1000.0, draft=500.0, verify8=2000.0)
    r = pb.replay([1], seq, wrong, c, k_max=k, n=n)
    assert r["rounds"] == n - 1 and r["acceptance"] == 0.0
    # each round catches up the target's one token and feeds k - 1 drafts; K shrinks to what is left (2, 1, then a
    # round with no draft: a plain step)
    full = 8 * (3 * 500.0 + c.verify(4))
    assert r["spec_us"] == pytest.approx(full + (2 * 500.0 + c.verify(3)) + (500.0 + c.verify(2)) + 1000.0)


def test_bound_prints_each_prompt_and_a_grid_that_rises_as_costs_fall(pb, tmp_path):
    n, k = pb.N, pb.K_MAX
    seq, right, wrong = _right_and_wrong(n, k)
    mixed = [right[g] if g % 2 else wrong[g] for g in range(n)]
    f = tmp_path / "tokens.json"
    f.write_text(json.dumps(dict(prompts=[dict(ids=[1, 2], seq=seq, drafts=d) for d in (right, wrong, mixed)])))
    lines = pb.bound(f, pb.Costs(1000.0, 640.0, 2000.0))
    assert lines[1].startswith("  p0:") and "acceptance 1.00" in lines[1] and "acceptance 0.00" in lines[2]
    grid = [[float(x) for x in ln.split()[1:]] for ln in lines[7:]]
    assert len(grid) == 5 and all(len(row) == 6 for row in grid)
    assert all(a <= b for row in grid for a, b in zip(row, row[1:], strict=False))  # cheaper drafts, faster
    assert all(grid[i][j] <= grid[i + 1][j] for i in range(1, 4) for j in range(6))  # cheaper verifies, faster


def test_lookup_first_skips_the_draft_where_the_context_repeats(pb):
    # the target repeats a 6-token phrase: once it has been seen, lookup proposes its continuation for free
    phrase = [11, 12, 13, 14, 15, 16]
    n, k = 40, 7
    seq = phrase * 10
    wrong = [[7] * k for _ in range(n)]
    c = pb.Costs(step=1000.0, draft=500.0, verify8=2000.0)
    plain = pb.replay([1, 2], seq, wrong, c, k_max=k, n=n)
    hyb = pb.replay([1, 2], seq, wrong, c, k_max=k, n=n, lookup_min_n=2)
    assert hyb["rounds"] < plain["rounds"] and hyb["ratio"] > plain["ratio"] and hyb["acceptance"] > plain["acceptance"] == 0.0
