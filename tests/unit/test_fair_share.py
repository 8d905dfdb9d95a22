"""Weighted concurrency (worker/fair_share.py, worker/slots.py): pure arithmetic, checked
with Hypothesis over random configurations and random orders of claims and finishes."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from awa_django.worker.fair_share import FairShare
from awa_django.worker.slots import FixedSlots, WeightedSlots


@dataclass
class Spec:
    cap: int
    min_workers: int
    weight: float


def queues_and_total() -> st.SearchStrategy[tuple[int, dict[str, Spec]]]:
    @st.composite
    def build(draw: st.DrawFn) -> tuple[int, dict[str, Spec]]:
        count = draw(st.integers(1, 5))
        specs = {}
        for i in range(count):
            cap = draw(st.integers(1, 20))
            specs[f"q{i}"] = Spec(
                cap, draw(st.integers(0, min(cap, 3))), draw(st.sampled_from([0, 0.5, 1, 3]))
            )
        reserved = sum(s.min_workers for s in specs.values())
        return draw(st.integers(reserved + 1, reserved + 30)), specs

    return build()


def build(total: int, specs: dict[str, Spec]) -> tuple[FairShare, dict[str, WeightedSlots]]:
    pool = total - sum(s.min_workers for s in specs.values())
    share = FairShare(pool, {name: s.weight for name, s in specs.items()})
    return share, {
        name: WeightedSlots(name, s.cap, s.min_workers, share) for name, s in specs.items()
    }


# One simulated event: a queue's dispatcher claims (finding `found` of the jobs it asked
# for, None = all of them), or one of its attempts finishes.
events = st.lists(
    st.tuples(st.integers(0, 4), st.booleans(), st.none() | st.integers(0, 5)), max_size=150
)


@given(config=queues_and_total(), steps=events)
def test_the_total_and_each_cap_are_never_exceeded(
    config: tuple[int, dict[str, Spec]], steps: list[tuple[int, bool, int | None]]
) -> None:
    total, specs = config
    share, slots = build(total, specs)
    names = list(slots)
    for index, claims, found in steps:
        queue = slots[names[index % len(names)]]
        if claims:
            reserved = queue.reserve()
            claimed = reserved if found is None else min(found, reserved)
            queue.unreserve(reserved - claimed, found_all=claimed == reserved)
        elif queue.running:
            queue.release()
        assert sum(s.running for s in slots.values()) <= total
        assert all(s.running <= s.cap for s in slots.values())
        assert 0 <= share.available <= share.pool


@given(config=queues_and_total(), steps=events)
def test_minimums_are_always_there(
    config: tuple[int, dict[str, Spec]], steps: list[tuple[int, bool, int | None]]
) -> None:
    """However the pool is lent out, a queue below its min_workers can start that many."""
    total, specs = config
    _, slots = build(total, specs)
    names = list(slots)
    for index, claims, _ in steps:
        queue = slots[names[index % len(names)]]
        if claims:
            queue.reserve()
        elif queue.running:
            queue.release()
    for queue in slots.values():
        own_free = queue.min_workers - (queue.running - queue.borrowed)
        assert queue.reserve() >= own_free


@settings(max_examples=300)
@given(config=queues_and_total(), order=st.permutations(range(5)))
def test_every_queue_with_work_and_weight_eventually_runs(
    config: tuple[int, dict[str, Spec]], order: list[int]
) -> None:
    """Every queue always has work. Attempts finish one at a time, oldest first, and the
    queue that just finished claims first (the worst case: it would take its slot straight
    back), then the others in a drawn order. Every queue of weight > 0 (or with a minimum)
    runs something within a bounded number of finishes."""
    total, specs = config
    _, slots = build(total, specs)
    names = [f"q{i}" for i in order if f"q{i}" in slots]
    running: list[str] = []  # attempts in start order
    ever_ran: set[str] = set()
    first = names[0]
    for _ in range(2 * total + 2 * len(names) + 4):
        for name in [first, *names]:
            got = slots[name].reserve()
            running += [name] * got
            if got:
                ever_ran.add(name)
        if running:
            first = running.pop(0)
            slots[first].release()
    assert {n for n, s in specs.items() if s.weight > 0 or s.min_workers > 0} <= ever_ran


def test_a_freed_slot_goes_to_the_queue_that_waited_not_back_to_its_holder() -> None:
    _, slots = build(2, {"a": Spec(5, 0, 1), "b": Spec(5, 0, 1), "c": Spec(5, 0, 1)})
    a, b, c = slots["a"], slots["b"], slots["c"]
    assert (a.reserve(), b.reserve(), c.reserve()) == (2, 0, 0)  # a asked alone
    a.release()
    assert (a.reserve(), b.reserve(), c.reserve()) == (0, 1, 0)  # shares: ceil(2/3) = 1
    a.release()
    assert a.reserve() == 0  # c waited longer and holds none: this slot is c's
    assert c.reserve() == 1


def test_weights_share_the_pool_three_to_one_under_saturation() -> None:
    share, slots = build(8, {"a": Spec(8, 0, 3), "b": Spec(8, 0, 1)})
    a, b = slots["a"], slots["b"]
    assert a.reserve() == 8  # b has not asked yet: a may use the whole pool
    assert b.reserve() == 0  # b wants slots now; none is free
    for _ in range(4):  # as a's attempts finish, the slots go to b up to its share...
        a.release()
        a.reserve()
        b.reserve()
    assert (a.running, b.running) == (6, 2)  # ...ceil(8 x 3/4) and ceil(8 x 1/4)
    assert share.available == 0


def test_an_idle_queue_lends_its_share_and_gets_it_back() -> None:
    _, slots = build(8, {"a": Spec(8, 0, 3), "b": Spec(8, 0, 1)})
    a, b = slots["a"], slots["b"]
    assert b.reserve() == 8
    b.unreserve(8, found_all=False)  # b found no work: it stops wanting
    assert a.reserve() == 8  # b's share is lent to a
    assert b.reserve() == 0  # b has work again, but a holds every slot...
    a.release()
    a.release()
    assert a.reserve() == 0  # ...and the freed slots wait for b, which holds none
    assert b.reserve() == 2
    assert (a.running, b.running) == (6, 2)


def test_a_queue_capped_by_its_concurrency_leaves_the_rest_to_others() -> None:
    _, slots = build(8, {"a": Spec(2, 0, 3), "b": Spec(8, 0, 1)})
    assert slots["a"].reserve() == 2
    assert slots["b"].reserve() == 6


def test_fixed_slots_are_the_queue_concurrency() -> None:
    slots = FixedSlots(3)
    assert slots.reserve() == 3
    slots.unreserve(1, found_all=False)
    assert (slots.running, slots.reserve(), slots.running) == (2, 1, 3)
