"""The names inside a run directory (taulib.rundir.layout): a shard named as a person names it."""

from __future__ import annotations

import pytest

from taulib.rundir import layout


@pytest.mark.parametrize("name", ["7", "007", "00007", "shard-7", "shard-007", "shard-00007", "shard-000007"])
def test_a_shard_named_by_its_number_or_any_padding_of_its_id_is_its_canonical_id(name):
    assert layout.canonical_shard_id(name) == "shard-00007"


def test_a_shard_past_99999_keeps_every_digit():
    assert layout.canonical_shard_id("123456") == "shard-123456" == layout.shard_id(123456)


@pytest.mark.parametrize("name", ["-1", "shard--1", "+7", "seven", "shard-x", "shard-", "", " 7", "7 ", "7.0",
                                  "shard_00007", "SHARD-00007", "\u0667", "shard-\u0667"])
def test_what_is_no_shard_name_is_returned_as_given_for_the_run_to_refuse(name):
    assert layout.canonical_shard_id(name) == name


def test_the_canonical_id_names_the_same_shard_as_its_index():
    assert all(layout.shard_index(layout.canonical_shard_id(str(i))) == i for i in (0, 1, 99999, 100000))


def test_a_shard_number_of_5000_digits_is_returned_as_given_never_converted():
    huge = "9" * 5000
    assert layout.canonical_shard_id(huge) == huge
    assert layout.canonical_shard_id(f"shard-{huge}") == f"shard-{huge}"


@pytest.mark.parametrize("name", ["attempt-0001", "attempt-0042", "attempt-10000", "attempt-999999999"])
def test_an_attempt_id_is_one_tau_writes(name):
    assert layout.is_attempt_id(name)
    assert layout.attempt_id(layout.attempt_ordinal(name)) == name


@pytest.mark.parametrize("name", ["attempt-abc", "attempt-00001", "attempt-001", "attempt-", "attempt-0001 ",
                                  "attempt-\u0661\u0662\u0663\u0664", "attempt-" + "9" * 5000, "attempt-1000000000",
                                  "Attempt-0001", "attempt-0000"])
def test_what_tau_never_writes_is_no_attempt_id(name):
    assert not layout.is_attempt_id(name)
