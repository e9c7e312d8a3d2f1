"""The answer record as a type: JSON round trips unchanged, derived Spec-Bench fields follow the steps,
one-turn cuts, and inconsistent records are refused with a message naming the question."""

from __future__ import annotations

import copy

import pytest

from specbench.results import BASELINE, Answer, Step, drafter_order


def record_json() -> dict:
    steps = [[{"nodes": 4, "depth": 2, "accepted": 3, "stage_ms": None},
              {"nodes": 1, "depth": 0, "accepted": 1, "stage_ms": None}],
             [{"nodes": 4, "depth": 3, "accepted": 2, "stage_ms": {"draft": 0.5, "verify": 3.0}}]]
    return {
        "question_id": 81, "category": "writing", "answer_id": "abc", "model_id": "m", "tstamp": 1.5,
        "drafter": "ngram",
        "choices": [{"index": 0, "turns": ["a", "b"], "new_tokens": [5, 3], "wall_time": [0.5, 0.25],
                     "decoding_steps": [2, 1], "accept_lengths": [3, 1, 2], "output_ids": [[1, 2, 3, 4, 5], [6, 7, 8]],
                     "steps": steps, "prefill_ms": [10.0, 12.0], "wall_time_repeats": [[0.5], [0.25]],
                     "plugin_field": [1]}],
        "equal_to_vanilla": False, "first_divergence": [None, 2], "plugin_key": {"temperature": 0},
    }


def test_round_trip_keeps_the_layout_and_unknown_keys():
    data = record_json()
    answer = Answer.from_json(copy.deepcopy(data))
    assert answer.to_json() == data
    assert answer.extra == {"plugin_key": {"temperature": 0}} and answer.choice_extra == {"plugin_field": [1]}
    assert answer.steps[1][0] == Step(4, 3, 2, {"draft": 0.5, "verify": 3.0})
    assert answer.steps[1][0].draft_ms == 0.5 and Step(4, 3, 2, {"draft": 0.5, "transform": 0.25}).draft_ms == 0.75
    assert Step(4, 3, 2).draft_ms == 0.0  # a run without stage times
    assert answer.tree_budget is None  # a record from before budgets were recorded stays as it was
    budgeted = record_json() | {"tree_budget": 8}
    assert Answer.from_json(copy.deepcopy(budgeted)).to_json() == budgeted
    assert Answer.from_json(budgeted).tree_budget == 8 and "tree_budget" not in Answer.from_json(budgeted).extra


def test_derived_fields_follow_the_steps():
    answer = Answer.from_json(record_json())
    assert answer.decoding_steps == [2, 1] and answer.accept_lengths == [3, 1, 2]
    assert answer.equal_to_vanilla is False
    answer.first_divergence = None
    assert answer.equal_to_vanilla is None and answer.to_json()["equal_to_vanilla"] is None


def test_one_turn_cut():
    second = Answer.from_json(record_json()).turn(1)
    assert second.turns == ["b"] and second.new_tokens == [3] and second.accept_lengths == [2]
    assert second.first_divergence == [2] and second.equal_to_vanilla is False and second.prefill_ms == [12.0]


@pytest.mark.parametrize("change, message", [
    (lambda d: d["choices"][0].pop("steps"), "steps"),
    (lambda d: d.pop("category"), "category"),
    (lambda d: d["choices"][0]["accept_lengths"].append(1), "question 81: accept_lengths disagree"),
    (lambda d: d["choices"][0]["decoding_steps"].__setitem__(0, 3), "question 81: turn 1 has 2 step records"),
    (lambda d: d["choices"][0]["wall_time"].pop(), "question 81: wall_time has 1 entries for 2 turns"),
    (lambda d: d["choices"][0]["new_tokens"].__setitem__(1, 0), "must be positive"),
])
def test_inconsistent_records_are_refused(change, message):
    data = record_json()
    change(data)
    with pytest.raises((KeyError, ValueError), match=message):
        Answer.from_json(data)


def test_baseline_first_then_the_order_given():
    assert drafter_order(["hydra", BASELINE, "ngram", "hydra"]) == [BASELINE, "hydra", "ngram"]
