"""ReplyNumbers: every transition, the stale-reply invariant, and a random walk."""

from __future__ import annotations

import random
from collections import deque

import pytest

from vecpool._engine.numbering import ReplyNumbers


def reply(number: int) -> tuple[str, int]:
    return ("reply", number)


def flags(numbers: ReplyNumbers) -> set[str]:
    # read through a call, so that mypy narrows no property between transitions
    names = ("waiting", "has_batches", "abandoned")
    idle = {"idle"} if numbers.received >= numbers.sent else set()  # all answered
    return idle | {name for name in names if getattr(numbers, name)}


# -- a fresh numbering -----------------------------------------------------------


def test_a_fresh_numbering_is_idle_and_waits_for_nothing():
    numbers = ReplyNumbers()
    assert (numbers.sent, numbers.received) == (0, 0)
    assert numbers.expected == deque()
    assert numbers.answers == deque()
    assert numbers.batches == {}
    assert flags(numbers) == {"idle"}
    assert numbers.answer() is None
    assert numbers.pop_batch() is None
    assert numbers.owed_batches() == []


def test_a_numbering_can_start_after_commands_all_answered():
    numbers = ReplyNumbers(sent=7)
    assert (numbers.sent, numbers.received) == (7, 7)
    assert "idle" in flags(numbers)
    assert "abandoned" not in flags(numbers)
    assert numbers.sent_one() == 8


# -- send ------------------------------------------------------------------------


def test_sent_one_numbers_commands_one_after_another():
    numbers = ReplyNumbers()
    assert [numbers.sent_one() for _ in range(3)] == [1, 2, 3]
    assert (numbers.sent, numbers.received) == (3, 0)
    # sent, but nobody asked: three unanswered commands, none awaited
    assert flags(numbers) == {"abandoned"}


# -- expect ----------------------------------------------------------------------


def test_expect_waits_for_one_reply():
    numbers = ReplyNumbers()
    numbers.expect(numbers.sent_one())
    assert numbers.expected == deque([1])
    assert "waiting" in flags(numbers)
    assert "idle" not in flags(numbers)
    assert "abandoned" not in flags(numbers)
    assert numbers.answer() is None


def test_expect_drops_the_earlier_answers_and_expectations():
    numbers = ReplyNumbers()
    numbers.expect(numbers.sent_one())
    numbers.expect_also(numbers.sent_one())
    assert numbers.absorb(reply(1)) is True
    assert numbers.answers == deque([(1, reply(1))])
    numbers.expect(numbers.sent_one())  # a new call: command 3
    assert numbers.expected == deque([3])
    assert numbers.answers == deque()
    assert numbers.answer() is None
    # the earlier call's outstanding reply 2 is now dropped
    assert numbers.absorb(reply(2)) is False
    assert numbers.absorb(reply(3)) is True
    assert numbers.answer() == reply(3)


def test_expect_also_waits_for_several_replies_in_order():
    numbers = ReplyNumbers()
    numbers.expect(numbers.sent_one())
    numbers.expect_also(numbers.sent_one())
    numbers.expect_also(numbers.sent_one())
    assert numbers.expected == deque([1, 2, 3])
    assert numbers.absorb("a") is True
    assert "waiting" in flags(numbers)
    assert numbers.answer() == "a"  # the first answer, even while waiting
    assert numbers.absorb("b") is True
    assert numbers.absorb("c") is True
    assert "waiting" not in flags(numbers)
    assert "idle" in flags(numbers)
    assert numbers.answers == deque([(1, "a"), (2, "b"), (3, "c")])
    assert numbers.answer() == "a"


def test_a_start_up_check_is_awaited_after_the_old_pipes_commands():
    # handle.py: ReplyNumbers(sent=after); expect_also(sent_one())
    numbers = ReplyNumbers(sent=5)
    numbers.expect_also(numbers.sent_one())
    assert numbers.expected == deque([6])
    assert "abandoned" not in flags(numbers)
    assert numbers.absorb("ready") is True
    assert (numbers.sent, numbers.received) == (6, 6)
    assert numbers.answers == deque([(6, "ready")])
    assert numbers.answer() == "ready"


# -- absorb ----------------------------------------------------------------------


def test_absorb_keeps_the_next_expected_reply():
    numbers = ReplyNumbers()
    numbers.expect(numbers.sent_one())
    assert numbers.absorb("x") is True
    assert numbers.received == 1
    assert numbers.expected == deque()
    assert numbers.answers == deque([(1, "x")])
    assert "waiting" not in flags(numbers)
    assert "idle" in flags(numbers)


def test_absorb_drops_a_reply_nobody_waits_for():
    numbers = ReplyNumbers()
    numbers.sent_one()
    assert numbers.absorb("unasked") is False
    assert numbers.received == 1
    assert numbers.answers == deque()
    assert numbers.answer() is None
    assert "idle" in flags(numbers)
    assert "abandoned" not in flags(numbers)


def test_absorb_skips_replies_numbered_below_the_next_expected():
    numbers = ReplyNumbers()
    numbers.sent_one()
    numbers.sent_one()  # two commands whose calls gave up
    numbers.expect(numbers.sent_one())
    assert "abandoned" in flags(numbers)
    assert numbers.absorb("old 1") is False
    assert "abandoned" in flags(numbers)
    assert numbers.expected == deque([3])  # still waiting for 3
    assert numbers.absorb("old 2") is False
    assert "abandoned" not in flags(numbers)
    assert "waiting" in flags(numbers)
    assert numbers.answer() is None
    assert numbers.absorb("new 3") is True
    assert numbers.answer() == "new 3"
    assert numbers.answers == deque([(3, "new 3")])
    assert numbers.received == 3


def test_absorb_drops_expected_numbers_already_passed():
    numbers = ReplyNumbers()
    numbers.sent_one()
    numbers.sent_one()
    assert numbers.absorb("1 unasked") is False  # reply 1 read before it was awaited
    numbers.expect(1)  # never coming again
    numbers.expect_also(2)
    assert numbers.absorb("two") is True
    assert numbers.expected == deque()
    assert numbers.answers == deque([(2, "two")])
    assert numbers.answer() == "two"


def test_absorb_drops_a_passed_expectation_and_then_the_reply_too():
    numbers = ReplyNumbers()
    numbers.sent_one()
    numbers.sent_one()
    assert numbers.absorb("1") is False
    numbers.expect(1)  # already passed
    assert numbers.absorb("2") is False
    assert numbers.expected == deque()
    assert "waiting" not in flags(numbers)
    assert numbers.answers == deque()


# -- answer ----------------------------------------------------------------------


def test_answer_is_kept_until_the_next_call():
    numbers = ReplyNumbers()
    numbers.expect(numbers.sent_one())
    numbers.absorb({"rows": 1})
    assert numbers.answer() == {"rows": 1}
    assert numbers.answer() == {"rows": 1}  # read again: left in place
    assert numbers.answers == deque([(1, {"rows": 1})])
    numbers.expect(numbers.sent_one())
    assert numbers.answer() is None


def test_answer_can_be_none_when_the_reply_is_none():
    numbers = ReplyNumbers()
    numbers.expect(numbers.sent_one())
    assert numbers.absorb(None) is True
    assert numbers.answers == deque([(1, None)])
    assert numbers.answer() is None


# -- batches ---------------------------------------------------------------------


def test_start_batch_drops_the_last_plain_calls_answers():
    numbers = ReplyNumbers()
    numbers.expect(numbers.sent_one())
    numbers.absorb("plain")
    numbers.start_batch()
    assert numbers.answers == deque()
    assert numbers.answer() is None


def test_start_batch_keeps_answers_while_batches_are_in_flight():
    numbers = ReplyNumbers()
    numbers.start_batch()
    numbers.expect_batch(numbers.sent_one(), [0, 1])
    numbers.start_batch()
    numbers.expect_batch(numbers.sent_one(), [2])
    assert numbers.absorb("b1") is True
    numbers.start_batch()  # a third batch: the answer to the first is kept
    numbers.expect_batch(numbers.sent_one(), [3])
    assert numbers.answers == deque([(1, "b1")])
    assert numbers.expected == deque([2, 3])
    assert numbers.batches == {1: [0, 1], 2: [2], 3: [3]}


def test_expect_batch_awaits_the_reply_and_records_its_env_ids():
    numbers = ReplyNumbers()
    numbers.start_batch()
    numbers.expect_batch(numbers.sent_one(), [4, 5])
    assert numbers.expected == deque([1])
    assert numbers.batches == {1: [4, 5]}
    assert flags(numbers) == {"waiting", "has_batches"}
    assert numbers.owed_batches() == [(1, [4, 5])]


def test_pop_batch_returns_each_batch_with_its_reply_in_order():
    numbers = ReplyNumbers()
    for ids in ([0], [1, 2], [3]):
        numbers.start_batch()
        numbers.expect_batch(numbers.sent_one(), ids)
    assert numbers.absorb("r1") is True
    assert numbers.absorb("r2") is True
    assert numbers.pop_batch() == ([0], "r1")
    assert "has_batches" in flags(numbers)  # batch 2 answered, batch 3 in flight
    assert numbers.pop_batch() == ([1, 2], "r2")
    assert numbers.pop_batch() is None  # batch 3 not answered yet
    assert "has_batches" in flags(numbers)
    assert numbers.owed_batches() == [(3, [3])]
    assert numbers.absorb("r3") is True
    assert "has_batches" in flags(numbers)  # answered, not yet popped
    assert numbers.owed_batches() == []
    assert numbers.pop_batch() == ([3], "r3")
    assert numbers.pop_batch() is None
    assert "has_batches" not in flags(numbers)
    assert numbers.batches == {}
    assert numbers.answers == deque()
    assert "idle" in flags(numbers)


def test_pop_batch_drops_plain_answers_on_the_way():
    numbers = ReplyNumbers()
    numbers.expect(numbers.sent_one())  # a plain call, still waiting
    numbers.start_batch()
    numbers.expect_batch(numbers.sent_one(), [7])
    assert numbers.absorb("plain") is True
    assert numbers.absorb("batch") is True
    assert numbers.answers == deque([(1, "plain"), (2, "batch")])
    assert numbers.pop_batch() == ([7], "batch")
    assert numbers.answers == deque()
    assert numbers.batches == {}
    assert "has_batches" not in flags(numbers)


def test_pop_batch_with_only_plain_answers_drops_them_and_returns_none():
    numbers = ReplyNumbers()
    numbers.expect(numbers.sent_one())
    numbers.absorb("plain")
    assert "has_batches" not in flags(numbers)  # a plain call's answer is no batch
    assert numbers.pop_batch() is None
    assert numbers.answers == deque()
    assert numbers.answer() is None


def test_a_batch_reply_whose_call_gave_up_is_dropped():
    numbers = ReplyNumbers()
    numbers.start_batch()
    numbers.expect_batch(numbers.sent_one(), [0])
    numbers.give_up()
    numbers.start_batch()
    numbers.expect_batch(numbers.sent_one(), [1])
    assert numbers.absorb("stale 1") is False
    assert numbers.absorb("fresh 2") is True
    assert numbers.pop_batch() == ([1], "fresh 2")


# -- give up ---------------------------------------------------------------------


def test_give_up_forgets_everything_awaited_but_not_the_counts():
    numbers = ReplyNumbers()
    numbers.start_batch()
    numbers.expect_batch(numbers.sent_one(), [0])
    numbers.expect_batch(numbers.sent_one(), [1])
    assert numbers.absorb("r1") is True
    numbers.give_up()
    assert (numbers.sent, numbers.received) == (2, 1)
    assert numbers.expected == deque()
    assert numbers.answers == deque()
    assert numbers.batches == {}
    assert flags(numbers) == {"abandoned"}
    assert numbers.owed_batches() == []
    assert numbers.absorb("r2") is False  # dropped when it comes
    assert "abandoned" not in flags(numbers)
    assert "idle" in flags(numbers)


def test_give_up_with_nothing_outstanding_abandons_nothing():
    numbers = ReplyNumbers()
    numbers.expect(numbers.sent_one())
    numbers.absorb("done")
    numbers.give_up()
    assert "abandoned" not in flags(numbers)
    assert "idle" in flags(numbers)
    assert numbers.answer() is None


# -- replace ---------------------------------------------------------------------


def test_take_over_keeps_the_old_answers_and_only_the_answered_batches():
    old = ReplyNumbers()
    for ids in ([0, 1], [2], [3]):
        old.start_batch()
        old.expect_batch(old.sent_one(), ids)
    assert old.absorb("r1") is True
    assert old.owed_batches() == [(2, [2]), (3, [3])]

    # restart.py: the replacement goes on from the old pipe's numbers
    new = ReplyNumbers(sent=old.sent)
    new.expect_also(new.sent_one())  # its start-up check: command 4
    assert new.absorb("ready") is True
    new.take_over(old)
    assert new.answers == deque([(1, "r1")])
    assert new.batches == {1: [0, 1]}
    assert new.expected == deque()
    assert (new.sent, new.received) == (4, 4)
    assert new.owed_batches() == []
    assert "has_batches" in flags(new)  # answer 1 not popped yet

    # the owed batches are sent again and awaited under new numbers
    for _, ids in old.owed_batches():
        new.expect_batch(new.sent_one(), ids)
    assert new.owed_batches() == [(5, [2]), (6, [3])]
    assert new.absorb("r2 again") is True
    assert new.absorb("r3 again") is True
    assert new.pop_batch() == ([0, 1], "r1")
    assert new.pop_batch() == ([2], "r2 again")
    assert new.pop_batch() == ([3], "r3 again")
    assert new.pop_batch() is None
    assert "has_batches" not in flags(new)


def test_take_over_copies_rather_than_shares_the_old_state():
    old = ReplyNumbers()
    old.start_batch()
    old.expect_batch(old.sent_one(), [0])
    old.absorb("r1")
    new = ReplyNumbers(sent=old.sent)
    new.take_over(old)
    old.give_up()
    assert new.answers == deque([(1, "r1")])
    assert new.batches == {1: [0]}
    assert new.pop_batch() == ([0], "r1")


def test_take_over_keeps_a_plain_calls_answer():
    old = ReplyNumbers()
    old.expect(old.sent_one())
    old.absorb("plain")
    new = ReplyNumbers(sent=old.sent)
    new.take_over(old)
    assert new.answer() == "plain"
    assert new.batches == {}
    assert new.owed_batches() == []


def test_take_over_of_a_dead_workers_unanswered_call_owes_nothing_answered():
    old = ReplyNumbers()
    old.expect(old.sent_one())
    new = ReplyNumbers(sent=old.sent)
    new.take_over(old)
    assert new.answers == deque()
    assert new.answer() is None
    assert new.expected == deque()
    assert "waiting" not in flags(new)
    assert "idle" in flags(new)
    assert "waiting" in flags(old)  # the caller reads this to decide to re-send


def test_owed_batches_lists_unanswered_batches_oldest_first():
    numbers = ReplyNumbers()
    numbers.batches = {9: [4], 2: [0], 5: [1, 2]}
    numbers.answers = deque([(5, "r5")])
    assert numbers.owed_batches() == [(2, [0]), (9, [4])]


# -- the invariant ---------------------------------------------------------------


def test_a_stale_reply_is_never_the_next_calls_answer():
    numbers = ReplyNumbers()
    # call A sends command 1 and times out with its reply outstanding
    numbers.expect(numbers.sent_one())
    numbers.give_up()
    assert "abandoned" in flags(numbers)
    # call B sends command 2
    numbers.expect(numbers.sent_one())
    # the worker answers in order: first A's stale reply...
    assert numbers.absorb("rows of A") is False
    assert "waiting" in flags(numbers)
    assert numbers.answer() is None
    # ...then B's
    assert numbers.absorb("rows of B") is True
    assert "waiting" not in flags(numbers)
    assert numbers.answer() == "rows of B"
    assert "abandoned" not in flags(numbers)


def test_a_stale_reply_arriving_before_the_next_call_is_dropped():
    numbers = ReplyNumbers()
    numbers.expect(numbers.sent_one())
    numbers.give_up()
    assert numbers.absorb("rows of A") is False  # read while idle
    numbers.expect(numbers.sent_one())
    assert numbers.answer() is None
    assert numbers.absorb("rows of B") is True
    assert numbers.answer() == "rows of B"


@pytest.mark.parametrize("seed", range(25))
def test_random_walk_answers_are_always_the_replies_to_their_commands(seed):
    rng = random.Random(seed)
    numbers = ReplyNumbers(sent=rng.choice([0, 0, 3]))
    pending: deque[int] = deque()  # commands the worker has not answered yet
    call: list[int] = []  # the current call's command numbers
    answered = dropped = completed = 0
    for _ in range(400):
        action = rng.random()
        if action < 0.3:
            if numbers.waiting:
                continue  # a call runs until it completes or gives up
            call = []
            for i in range(rng.randint(1, 3)):
                number = numbers.sent_one()
                pending.append(number)
                call.append(number)
                if i == 0:
                    numbers.expect(number)
                else:
                    numbers.expect_also(number)
        elif action < 0.4:
            numbers.give_up()
            call = []
        elif pending:
            number = pending.popleft()
            kept = numbers.absorb(reply(number))
            assert kept is (number in call)
            if kept:
                answered += 1
                assert numbers.answers[-1] == (number, reply(number))
            else:
                dropped += 1
            if call and not numbers.waiting:
                completed += 1
                assert numbers.answer() == reply(call[0])
                assert list(numbers.answers) == [(n, reply(n)) for n in call]
        # the counters and properties agree with the model after every step
        assert numbers.received == numbers.sent - len(pending)
        assert (numbers.received >= numbers.sent) is (not pending)
        unanswered = [n for n in call if n in pending]
        assert list(numbers.expected) == unanswered
        assert numbers.waiting is bool(unanswered)
        assert numbers.abandoned is (len(pending) > len(unanswered))
        for number, answer in numbers.answers:
            assert answer == reply(number)
            assert number in call
    assert answered > 0
    assert dropped > 0  # the walk did meet stale replies
    assert completed > 0


@pytest.mark.parametrize("seed", range(25))
def test_random_walk_batches_pop_with_their_own_replies(seed):
    rng = random.Random(1000 + seed)
    numbers = ReplyNumbers()
    pending: deque[int] = deque()
    ids_of: dict[int, list[int]] = {}  # batches in flight or answered, by number
    unpopped: deque[int] = deque()  # answered batches not yet popped
    popped = dropped = next_env = 0
    for _ in range(400):
        action = rng.random()
        if action < 0.35:
            numbers.start_batch()
            number = numbers.sent_one()
            ids = [next_env, next_env + 1]
            next_env += 2
            numbers.expect_batch(number, ids)
            pending.append(number)
            ids_of[number] = ids
        elif action < 0.4:
            numbers.give_up()
            ids_of.clear()
            unpopped.clear()
        elif action < 0.7 and pending:
            number = pending.popleft()
            kept = numbers.absorb(reply(number))
            assert kept is (number in ids_of)
            if kept:
                unpopped.append(number)
            else:
                dropped += 1
        else:
            got = numbers.pop_batch()
            if unpopped:
                number = unpopped.popleft()
                assert got == (ids_of.pop(number), reply(number))
                popped += 1
            else:
                assert got is None
        owed = sorted((n, ids) for n, ids in ids_of.items() if n not in unpopped)
        assert numbers.owed_batches() == owed
        assert numbers.batches == ids_of
        assert numbers.has_batches is bool(ids_of)
        assert numbers.received == numbers.sent - len(pending)
    assert popped > 0
    assert dropped > 0


def test_a_reply_that_fails_to_decode_still_takes_its_number():
    # found in review: decoding before counting shifted every later reply by one
    def explode(raw):
        msg = f"cannot decode {raw!r}"
        raise ValueError(msg)

    numbers = ReplyNumbers()
    numbers.expect(numbers.sent_one())
    with pytest.raises(ValueError, match="cannot decode 'bad'"):
        numbers.absorb("bad", explode)
    assert numbers.received == 1
    numbers.expect(numbers.sent_one())
    assert numbers.absorb("next") is True
    assert numbers.answer() == "next"


def test_a_stale_reply_is_decoded_but_not_kept():
    decoded = []

    def decode(raw):
        decoded.append(raw)
        return raw

    numbers = ReplyNumbers()
    numbers.sent_one()  # its call gave up
    numbers.expect(numbers.sent_one())
    assert numbers.absorb("stale", decode) is False
    assert numbers.absorb("fresh", decode) is True
    assert decoded == ["stale", "fresh"]
    assert numbers.answer() == "fresh"
