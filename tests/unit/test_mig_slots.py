"""MIG slot placement: allowed starts, free region, best-fit start and GPU, share to profile."""

import pytest

from cortex.knowledge.topology import mig_instance
from cortex.rules.mig_slots import (
    A100_80GB,
    best_start,
    choose_gpu,
    first_fit_gpu,
    first_start,
    instance_slots,
    largest_free_run,
    placements,
    profile_for_share,
    room,
    used_slices,
)

G = A100_80GB


def test_empty_gpu_takes_every_allowed_start():
    assert placements(G, "1g.10gb", ()) == (0, 1, 2, 3, 4, 5, 6)
    assert placements(G, "2g.20gb", ()) == (0, 2, 4)
    assert placements(G, "3g.40gb", ()) == (0, 4)
    assert placements(G, "4g.40gb", ()) == (0,)
    assert placements(G, "7g.80gb", ()) == (0,)


def test_instances_in_use_block_overlapping_starts():
    # a 1g.10gb at slice 3 blocks the 3g.40gb at 0 (slices 0-3), not the one at 4
    assert placements(G, "3g.40gb", [(3, 1)]) == (4,)
    assert placements(G, "3g.40gb", [(3, 1), (5, 1)]) == ()
    assert placements(G, "4g.40gb", [(4, 4)]) == (0,)
    assert placements(G, "7g.80gb", [(6, 1)]) == ()
    assert placements(G, "2g.20gb", [(0, 4)]) == (4,)


def test_seven_small_instances_fill_a_gpu_slice_seven_stays_for_whole_gpus_only():
    slots = [(s, 1) for s in range(7)]
    assert placements(G, "1g.10gb", slots) == ()
    assert used_slices(slots) == frozenset(range(7))


def test_largest_free_run():
    assert largest_free_run(G, ()) == 8
    assert largest_free_run(G, {0, 4}) == 3
    assert largest_free_run(G, range(8)) == 0


def test_room_is_the_largest_creatable_profile_then_the_placements_left():
    assert room(G, ()) == (7, 8, 7 + 4 + 3 + 2 + 1 + 1)
    # slices 1-4 free but a 3g.40gb starts only at 0 or 4: the largest is a 2g.20gb at 2
    assert room(G, [(0, 1), (5, 3)]) == (2, 2, 4 + 1 + 1)
    assert room(G, [(0, 8)]) == (0, 0, 0)


def test_best_start_keeps_the_largest_free_region():
    # empty GPU: a 1g at 0 rules out the 4g.40gb (start 0 only); at 4, 5 or 6 it does
    # not, and at 6 it leaves the most placements (1g at 0-5, 2g at 0, 2, 4)
    assert best_start(G, "1g.10gb", ()) == 6
    assert first_start(G, "1g.10gb", ()) == 0
    # a 3g.40gb at 4 keeps 0-3 for a 4g.40gb; at 0 only another 3g fits
    assert best_start(G, "3g.40gb", ()) == 4
    # a 2g.20gb at 4-5: a 1g at 6 keeps 0-3 free for a 4g, a 1g at 0 would not
    assert best_start(G, "1g.10gb", [(4, 2)]) == 6
    assert first_start(G, "1g.10gb", [(4, 2)]) == 0
    assert best_start(G, "2g.20gb", [(0, 4)]) == 4
    assert best_start(G, "4g.40gb", [(0, 1)]) is None


def test_choose_gpu_keeps_empty_gpus_whole_and_the_largest_free_region():
    empty, half, nearly_full = (), [(0, 4)], [(0, 4), (4, 2)]
    # half: a 1g at 6 keeps a 2g.20gb creatable at 4; nearly_full would keep nothing
    assert choose_gpu(G, "1g.10gb", [empty, half, nearly_full]) == (1, 6)
    assert choose_gpu(G, "1g.10gb", [empty, nearly_full]) == (1, 6)
    assert choose_gpu(G, "1g.10gb", [empty, empty]) == (0, 6)
    assert choose_gpu(G, "2g.20gb", [empty, half]) == (1, 4)
    assert choose_gpu(G, "3g.40gb", [nearly_full, half]) == (1, 4)
    assert choose_gpu(G, "7g.80gb", [half, nearly_full]) is None
    assert choose_gpu(G, "7g.80gb", [half, empty]) == (1, 0)
    # same free slices: the GPU that keeps a 4g.40gb creatable wins
    scattered = [(0, 1), (4, 1)]      # free 1-3, 5-7: at best a 2g.20gb after a 1g
    gathered = [(4, 2)]               # free 0-3, 6-7: a 1g at 6 keeps 0-3 for a 4g
    assert choose_gpu(G, "1g.10gb", [scattered, gathered]) == (1, 6)


def test_first_fit_takes_the_first_gpu_and_lowest_start():
    assert first_fit_gpu(G, "1g.10gb", [[(0, 8)], [(4, 2)]]) == (1, 0)
    assert first_fit_gpu(G, "7g.80gb", [[(0, 1)]]) is None


def test_profile_for_share_maps_compute_fraction_to_the_smallest_profile():
    assert profile_for_share(G, 0.1) == "1g.10gb"
    assert profile_for_share(G, 1 / 7) == "1g.10gb"
    assert profile_for_share(G, 0.25) == "2g.20gb"
    assert profile_for_share(G, 0.5) == "4g.40gb"
    assert profile_for_share(G, 0.6) == "7g.80gb"
    assert profile_for_share(G, 1.0) == "7g.80gb"
    with pytest.raises(ValueError):
        profile_for_share(G, 0)


def test_unknown_profile_is_named():
    with pytest.raises(KeyError, match="5g.50gb"):
        placements(G, "5g.50gb", ())


def test_reported_instances_give_their_slots_idle_ones_only_without_in_use_only():
    # as the agent reports them: a 3g.40gb in use at 0, an idle 2g.20gb at 4 and 1g at 6
    gpu = [mig_instance(2, 2, "3g.40gb", 0, 4, 40192, True),
           mig_instance(5, 1, "2g.20gb", 4, 2, 19968, False),
           mig_instance(13, 0, "1g.10gb", 6, 1, 9856, False)]
    assert instance_slots(gpu) == ((0, 4), (4, 2), (6, 1))
    assert placements(G, "3g.40gb", instance_slots(gpu)) == ()
    assert instance_slots(gpu, in_use_only=True) == ((0, 4),)
    assert placements(G, "3g.40gb", instance_slots(gpu, in_use_only=True)) == (4,)
