"""The batch planner (dialscore_server.scheduling.planner) on lengths and token tuples: no model, no torch."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from dialscore_server.scheduling.planner import (
    CPU_PASS_LIMITS, GPU_PASS_LIMITS, MAX_PASS_WASTE, MIN_PASS_TOKENS, PASS_OVERHEAD_TOKENS,
    BatchStats, PassLimits, SharedPrefixGroup, chunk_passes, common_prefix, pack,
    pass_limits_for, share_prefixes,
)

Seq = tuple[int, ...]


def test_planner_and_pairing_import_without_torch():
    code = ("import sys, dialscore_server.scheduling.planner, dialscore_server.contradiction.engine.pairing; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# ------------------------------------------------------------------------------------------ pack
def rows_times_longest(costs: list[int]):
    return lambda run: len(run) * max(costs[i] for i in run)


@pytest.mark.parametrize("with_lengths", [False, True], ids=["budget", "budget-and-padding"])
def test_pack_keeps_order_and_cuts_greedily_by_its_rules(with_lengths):
    """Every run obeys the budget and, given the elements' lengths (ascending), no element pads
    the ones before it by more than a pass's overhead; a run ends only where the next element
    would break a rule."""
    rng = random.Random(0)

    def pads(before: list[int], x: int) -> bool:  # x joining `before` pads it past the bound
        return with_lengths and len(before) * (lengths[x] - lengths[before[-1]]) > PASS_OVERHEAD_TOKENS

    for _ in range(200):
        lengths = sorted(rng.randint(1, 80) for _ in range(rng.randint(0, 40)))
        budget = rng.randint(1, 2000)
        cost = rows_times_longest(lengths)
        runs = pack(list(range(len(lengths))), cost, budget,
                    length=lengths.__getitem__ if with_lengths else None)
        assert [i for run in runs for i in run] == list(range(len(lengths)))
        for run in runs:
            assert run and (len(run) == 1 or cost(run) <= budget)
            assert not any(pads(run[:n], run[n]) for n in range(1, len(run)))
        for run, after in zip(runs, runs[1:]):
            assert cost(run + after[:1]) > budget or pads(run, after[0])


def test_pack_ends_a_run_where_the_next_element_pads_it_past_a_pass():
    # Four rows of 10, then 19 (pads 36 slots > 32) and 18 (pads 32: kept).
    assert pack([0, 1, 2, 3, 4], rows_times_longest([10, 10, 10, 10, 19]), 10**6,
                length=[10, 10, 10, 10, 19].__getitem__) == [[0, 1, 2, 3], [4]]
    assert pack([0, 1, 2, 3, 4], rows_times_longest([10, 10, 10, 10, 18]), 10**6,
                length=[10, 10, 10, 10, 18].__getitem__) == [[0, 1, 2, 3, 4]]


def test_pack_puts_an_oversized_item_alone():
    costs = [3, 3, 50, 3]
    runs = pack([0, 1, 2, 3], rows_times_longest(costs), budget=10)
    assert runs == [[0, 1], [2], [3]]
    assert pack([], rows_times_longest([]), budget=10) == []
    assert pack([7], lambda run: 10**9, budget=1) == [[7]]


# ---------------------------------------------------------------------------------- chunk_passes
def pass_ok(lengths: list[int], budget: int, prefix_width: int, kv_budget: int) -> bool:
    """A pass of several rows obeys the four rules at every row it took in."""
    for n in range(2, len(lengths) + 1):
        w, real_before = max(lengths[:n]), sum(lengths[:n - 1])
        if n * w > budget or n * (prefix_width + w) > kv_budget:
            return False
        if (n - 1) * (lengths[n - 1] - max(lengths[:n - 1])) > PASS_OVERHEAD_TOKENS:
            return False
        if real_before >= MIN_PASS_TOKENS and 1 - sum(lengths[:n]) / (n * w) > MAX_PASS_WASTE:
            return False
    return True


def test_chunk_passes_obey_the_budget_kv_and_waste_rules_greedily():
    rng = random.Random(1)
    for _ in range(300):
        lengths = sorted(rng.randint(1, 40) for _ in range(rng.randint(0, 120)))
        budget, prefix_width = rng.randint(1, 2000), rng.randint(0, 80)
        kv_budget = rng.randint(1, 4 * budget)
        passes = chunk_passes(lengths, lambda n: n, budget, prefix_width, kv_budget)
        assert [x for p in passes for x in p] == lengths
        for p in passes:
            assert p and (len(p) == 1 or pass_ok(p, budget, prefix_width, kv_budget))
        for p, after in zip(passes, passes[1:]):
            assert not pass_ok(p + after[:1], budget, prefix_width, kv_budget)


def test_chunk_passes_waste_rule_applies_once_a_pass_holds_enough_tokens():
    assert PASS_OVERHEAD_TOKENS == 32  # the figures below
    big = 10**6
    # 30 rows of 10 hold 300 >= MIN_PASS_TOKENS real tokens; a row of 11 would pad 30 slots (9%).
    assert [len(p) for p in chunk_passes([10] * 30 + [11], lambda n: n, big, 0, big)] == [30, 1]
    # Fewer real tokens than MIN_PASS_TOKENS: padding is accepted up to a pass's overhead
    # (5 rows padded by 6 = 30 slots), not beyond it (5 × 7 = 35).
    assert [len(p) for p in chunk_passes([10] * 5 + [16], lambda n: n, big, 0, big)] == [6]
    assert [len(p) for p in chunk_passes([10] * 5 + [17], lambda n: n, big, 0, big)] == [5, 1]


def test_the_padding_rules_are_the_limits_given():
    """The same rows, cut by the CPU's limits and by looser ones: a row of 17 after five of 10
    pads 35 slots (> 32, < 64); a row of 11 after thirty of 10 pads 9% (> 3%, < 25%)."""
    big = 10**6
    loose = PassLimits(overhead_tokens=64, max_waste=0.25)
    assert CPU_PASS_LIMITS == PassLimits(PASS_OVERHEAD_TOKENS, MAX_PASS_WASTE)
    for rows, cpu in (([10] * 5 + [17], [5, 1]), ([10] * 30 + [11], [30, 1])):
        assert [len(p) for p in chunk_passes(rows, lambda n: n, big, 0, big)] == cpu
        assert [len(p) for p in chunk_passes(rows, lambda n: n, big, 0, big, loose)] == [len(rows)]
    lengths = [10, 10, 10, 10, 19]  # the fifth pads 36 slots
    assert pack(list(range(5)), rows_times_longest(lengths), big,
                length=lengths.__getitem__) == [[0, 1, 2, 3], [4]]
    assert pack(list(range(5)), rows_times_longest(lengths), big, length=lengths.__getitem__,
                limits=loose) == [[0, 1, 2, 3, 4]]


def test_a_gpu_pass_takes_more_padding_than_a_cpu_pass():
    assert pass_limits_for("cpu") == CPU_PASS_LIMITS
    assert pass_limits_for("cuda") == pass_limits_for("cuda:1") == GPU_PASS_LIMITS
    assert GPU_PASS_LIMITS.overhead_tokens > CPU_PASS_LIMITS.overhead_tokens
    assert GPU_PASS_LIMITS.max_waste > CPU_PASS_LIMITS.max_waste


def test_chunk_passes_kv_rule_counts_the_prefix_width():
    big = 10**6
    # rows × (prefix 100 + longest 10) <= 450: four rows per pass.
    assert [len(p) for p in chunk_passes([10] * 9, lambda n: n, big, 100, 450)] == [4, 4, 1]
    # The token budget alone: rows × 10 <= 25.
    assert [len(p) for p in chunk_passes([10] * 5, lambda n: n, 25, 0, big)] == [2, 2, 1]
    # One row always forms a pass, however long.
    assert chunk_passes([500], lambda n: n, 10, 100, 10) == [[500]]


# --------------------------------------------------------------------------------- common_prefix
def test_common_prefix_matches_a_plain_scan():
    rng = random.Random(2)

    def naive(a: Seq, b: Seq) -> int:
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    for _ in range(500):
        base = tuple(rng.randrange(3) for _ in range(rng.randint(0, 30)))
        a = base + tuple(rng.randrange(3) for _ in range(rng.randint(0, 10)))
        b = base[:rng.randint(0, len(base))] + tuple(rng.randrange(3) for _ in range(rng.randint(0, 10)))
        assert common_prefix(a, b) == naive(a, b) == common_prefix(b, a)
    assert common_prefix((), (1,)) == 0 and common_prefix((1, 2), (1, 2)) == 2


# -------------------------------------------------------------------------------- share_prefixes
def gain(groups: list[SharedPrefixGroup]) -> int:
    """Tokens not recomputed: Σ (items - 1) × prefix."""
    return sum((len(g.items) - 1) * g.length for g in groups)


def check_valid(seqs: list[Seq], groups: list[SharedPrefixGroup], alone: list[int],
                min_shared: int) -> None:
    """Every index once; each group's prefix is shared by all its items, is at least
    `min_shared` tokens and stops at least one token short of its shortest item."""
    assert sorted([i for g in groups for i in g.items] + alone) == list(range(len(seqs)))
    assert alone == sorted(alone)
    for g in groups:
        members = [seqs[i] for i in g.items]
        assert len(members) >= 2 and g.length >= min_shared
        assert all(m[:g.length] == members[0][:g.length] for m in members)
        assert g.length <= min(len(m) for m in members) - 1


def test_share_prefixes_finds_the_groups():
    src = tuple(range(100, 140))  # 40 tokens
    other = tuple(range(500, 530))
    seqs = [src + (7, 8, 9), other + (1,), src + (7, 8, 10, 11), (1, 2, 3, 4), src + (12,),
            other + (2, 3)]
    groups, alone = share_prefixes(seqs, min_shared_prefix=16)
    check_valid(seqs, groups, alone, 16)
    assert {frozenset(g.items): g.length for g in groups} == {
        frozenset({0, 2, 4}): 40, frozenset({1, 5}): 30}
    assert alone == [3]


def test_share_prefixes_respects_min_shared_prefix():
    shared = tuple(range(15))
    seqs = [shared + (1, 2), shared + (3, 4), shared + (5,)]
    assert share_prefixes(seqs, min_shared_prefix=16) == ([], [0, 1, 2])
    assert share_prefixes(seqs, min_shared_prefix=15) == ([SharedPrefixGroup(15, (0, 1, 2))], [])
    with pytest.raises(ValueError):
        share_prefixes(seqs, min_shared_prefix=0)


def test_share_prefixes_stops_one_token_short_of_the_shortest_item():
    seq = tuple(range(30))
    # Duplicates: the prefix is the whole item but one token.
    groups, alone = share_prefixes([seq, seq, seq], min_shared_prefix=16)
    assert [g.length for g in groups] == [29] and alone == []
    # An item that is a prefix of the others bounds the group's prefix.
    seqs = [seq + (1, 2, 3), seq[:20], seq + (4, 5)]
    groups, alone = share_prefixes(seqs, min_shared_prefix=16)
    check_valid(seqs, groups, alone, 16)
    assert {frozenset(g.items): g.length for g in groups} == {frozenset({0, 1, 2}): 19}
    # The same, with the short item below the minimum once shortened: left alone.
    seqs = [seq + (1, 2, 3), seq[:16], seq + (4, 5)]
    groups, alone = share_prefixes(seqs, min_shared_prefix=16)
    assert {frozenset(g.items): g.length for g in groups} == {frozenset({0, 2}): 30}
    assert alone == [1]
    assert share_prefixes([seq], 1) == ([], [0]) and share_prefixes([], 1) == ([], [])


def set_partitions(items: list[int]):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for partition in set_partitions(rest):
        yield [[first]] + partition
        for k in range(len(partition)):
            yield partition[:k] + [[first] + partition[k]] + partition[k + 1:]


def best_gain_by_brute_force(seqs: list[Seq], min_shared: int) -> int:
    """The most tokens any partition of the items into groups saves (any blocks, not only runs
    of sorted items)."""
    best = 0
    for partition in set_partitions(list(range(len(seqs)))):
        total = 0
        for block in partition:
            if len(block) < 2:
                continue
            members = [seqs[i] for i in block]
            shared = min(common_prefix(members[0], m) for m in members[1:])
            p = min(shared, min(len(m) for m in members) - 1)
            if p >= min_shared:
                total += (len(block) - 1) * p
        best = max(best, total)
    return best


def test_share_prefixes_matches_a_brute_force_optimum():
    rng = random.Random(3)
    for _ in range(300):
        n = rng.randint(0, 6)
        min_shared = rng.randint(1, 4)
        # A two-letter alphabet and short sequences: many shared prefixes, duplicates, items that
        # are prefixes of others.
        seqs = [tuple(rng.randrange(2) for _ in range(rng.randint(1, 8))) for _ in range(n)]
        groups, alone = share_prefixes(seqs, min_shared_prefix=min_shared)
        check_valid(seqs, groups, alone, min_shared)
        assert gain(groups) == best_gain_by_brute_force(seqs, min_shared), seqs


# ------------------------------------------------------------------------------------ BatchStats
def test_batch_stats_properties():
    stats = BatchStats(items=3, item_tokens=100, real_tokens=60, padded_tokens=80)
    assert stats.padding_waste == pytest.approx(0.25)
    assert stats.reused_tokens == 40
    empty = BatchStats()
    assert empty.padding_waste == 0.0 and empty.reused_tokens == 0
    assert empty.batch_sizes == [] and empty.batch_sizes is not BatchStats().batch_sizes
    # A producer that does not count item tokens never reports negative reuse.
    assert BatchStats(real_tokens=5, padded_tokens=5).reused_tokens == 0
