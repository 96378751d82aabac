"""taulib.jsonio's time arithmetic: the day counts are the proleptic Gregorian calendar's, day for day what the
standard library's calendar module says (which tau does not import: it costs every command's start-up), and a
timestamp parses to the epoch seconds it was formatted from."""

from __future__ import annotations

import calendar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taulib.errors import BadInput
from taulib.jsonio import days_in_month, days_since_epoch, format_time, parse_time


def test_every_month_of_every_year_tau_accepts_has_the_calendars_days_and_day_count():
    for year in range(1970, 10000):
        for month in range(1, 13):
            days = calendar.monthrange(year, month)[1]
            assert days_in_month(year, month) == days, (year, month)
            for day in (1, days):
                assert days_since_epoch(year, month, day) * 86400 == calendar.timegm((year, month, day, 0, 0, 0)), \
                    (year, month, day)


@settings(max_examples=2000, deadline=None)
@given(st.floats(min_value=0, max_value=253402300799.999, allow_nan=False))
def test_a_formatted_time_parses_to_what_calendar_timegm_gives(epoch):
    text = format_time(epoch)
    seconds = calendar.timegm((int(text[0:4]), int(text[5:7]), int(text[8:10]), int(text[11:13]), int(text[14:16]),
                               int(text[17:19])))
    assert parse_time(text) == seconds + int(text[20:26]) / 1_000_000


@pytest.mark.parametrize("text", ["2025-02-29T00:00:00.000000Z", "1900-02-29T00:00:00.000000Z",
                                  "2026-04-31T00:00:00.000000Z", "2026-13-01T00:00:00.000000Z",
                                  "1969-12-31T23:59:59.000000Z"])
def test_a_day_the_calendar_does_not_have_is_refused_never_normalised(text):
    with pytest.raises(BadInput) as err:
        parse_time(text)
    assert err.value.code == 65 and "is not a real UTC time" in err.value.message


def test_leap_days_of_leap_years_are_accepted():
    assert parse_time("2024-02-29T12:00:00.000000Z") == calendar.timegm((2024, 2, 29, 12, 0, 0))
    assert parse_time("2000-02-29T00:00:00.000001Z") == calendar.timegm((2000, 2, 29, 0, 0, 0)) + 1e-6
