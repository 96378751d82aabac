"""taulib.rules.fields: how a candidate's columns differ from the run's output schema, in words."""

from __future__ import annotations

from taulib.rules.fields import describe, differences

RUN = [{"name": "id", "type": "int64"}, {"name": "text", "type": "string"}, {"name": "score", "type": "double"}]


def test_the_same_columns_have_no_difference():
    assert differences(RUN, [dict(f) for f in RUN]) == []


def test_each_retyped_new_and_missing_field_is_named():
    other = [{"name": "id", "type": "int64"}, {"name": "score", "type": "float"}, {"name": "label", "type": "string"}]
    assert differences(RUN, other) == ["field 'score' is float where the run's is double",
                                       "field 'label' (string) is not in the run's schema",
                                       "field 'text' (string) of the run's schema is missing"]


def test_the_same_fields_in_another_order_are_a_difference_too():
    assert differences(RUN, list(reversed(RUN))) == [
        "the fields are in another order: score, text, id where the run's are id, text, score"]


def test_the_comparison_can_name_another_reference_than_the_run():
    assert differences(RUN[:1], RUN[:2], "shard-00000's") == ["field 'text' (string) is not in shard-00000's schema"]


def test_the_description_names_the_first_five_and_counts_the_rest():
    problems = [f"p{i}" for i in range(7)]
    assert describe(problems) == "p0; p1; p2; p3; p4 and 2 more"
    assert describe(problems[:2]) == "p0; p1"


def test_a_description_counts_the_rest_only_past_its_limit():
    five = [f"problem {n}" for n in range(5)]
    assert describe(five) == "problem 0; problem 1; problem 2; problem 3; problem 4"
    assert describe([*five, "problem 5"]) == "problem 0; problem 1; problem 2; problem 3; problem 4 and 1 more"
    assert describe(five, limit=2) == "problem 0; problem 1 and 3 more"
