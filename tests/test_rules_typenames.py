"""taulib.rules.typenames: the Arrow type names an output schema may give, checked against pyarrow itself both ways
(every name the rule accepts builds the pyarrow type that prints as that name; every type pyarrow prints is
accepted), so the rule cannot drift from Arrow."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rules_fixtures import examples

from taulib.rules.typenames import ALIASES, PRIMITIVES, parse, problem, suggestion


def build(tree: tuple) -> pa.DataType:
    """The pyarrow type of a tree `parse` returned."""
    kind = tree[0]
    if len(tree) == 1:
        if kind in ("date32", "date64"):
            return getattr(pa, kind)()
        return pa.type_for_alias(kind) if kind != "month_day_nano_interval" else pa.month_day_nano_interval()
    if kind == "timestamp":
        return pa.timestamp(tree[1], tz=tree[2])
    if kind in ("time32", "time64", "duration"):
        return getattr(pa, kind)(tree[1])
    if kind.startswith("decimal"):
        return getattr(pa, kind)(tree[1], tree[2])
    if kind == "fixed_size_binary":
        return pa.binary(tree[1])
    if kind in ("list", "large_list", "list_view", "large_list_view"):
        return getattr(pa, kind if kind != "list" else "list_")(_field(tree[1]))
    if kind == "fixed_size_list":
        return pa.list_(_field(tree[1]), tree[2])
    if kind == "struct":
        return pa.struct([_field(f) for f in tree[1]])
    if kind == "map":
        return pa.map_(build(tree[1]), build(tree[2]), keys_sorted=tree[3])
    if kind == "dictionary":
        return pa.dictionary(build(tree[2]), build(tree[1]), ordered=tree[3])
    raise AssertionError(f"unknown tree {tree!r}")


def _field(tree: tuple) -> pa.Field:
    name, kind, nullable = tree
    return pa.field(name, build(kind), nullable=nullable)


NAMES = [
    *PRIMITIVES, "date32[day]", "date64[ms]", "time32[s]", "time32[ms]", "time64[us]", "time64[ns]",
    "timestamp[s]", "timestamp[ms]", "timestamp[us]", "timestamp[ns]", "timestamp[us, tz=UTC]",
    "timestamp[ns, tz=Europe/Paris]", "timestamp[s, tz=+01:00]", "duration[s]", "duration[ns]",
    "decimal32(9, 2)", "decimal64(18, 0)", "decimal128(10, 2)", "decimal128(38, -3)", "decimal256(76, 10)",
    "fixed_size_binary[16]", "list<item: int64>", "list<x: int64 not null>", "large_list<item: string>",
    "list_view<item: double>", "large_list_view<item: bool>", "fixed_size_list<item: float>[3]",
    "struct<a: int64, b c: string not null>", "struct<>", "map<string, int64>", "map<string, double, keys_sorted>",
    "dictionary<values=string, indices=int32, ordered=0>", "dictionary<values=string, indices=int8, ordered=1>",
    "list<item: list<item: struct<a: map<string, list<item: int8>>>>>",
]


@pytest.mark.parametrize("name", NAMES)
def test_every_name_the_rule_accepts_builds_the_arrow_type_that_prints_as_it(name):
    assert problem(name) is None
    assert str(build(parse(name))) == name


def test_every_primitive_the_rule_knows_is_one_pyarrow_prints_so():
    for name in PRIMITIVES:
        made = pa.month_day_nano_interval() if name == "month_day_nano_interval" else pa.type_for_alias(name)
        assert str(made) == name


SPELLINGS = [("int", "int64"), ("str", "string"), ("float64", "double"), ("float32", "float"), ("utf8", "string"),
             ("boolean", "bool"), ("Int64", "int64"), ("STRING", "string"), ("strng", "string"),
             ("timestamp", "timestamp[us]"), ("date32", "date32[day]")]


@pytest.mark.parametrize("bad,good", SPELLINGS)
def test_a_misspelt_type_is_refused_with_arrows_spelling_of_it(bad, good):
    assert problem(bad) == f"did you mean {good!r}?"
    assert suggestion(bad) == good
    assert str(build(parse(good))) == good


def test_every_alias_pyarrow_knows_is_suggested_as_pyarrow_spells_it():
    for alias, good in ALIASES.items():
        assert str(build(parse(good))) == good, alias  # every suggestion is itself a valid name
        try:
            theirs = str(pa.type_for_alias(alias))
        except ValueError:
            continue  # an alias of ours alone ("int", "text")
        assert good == theirs, alias


REFUSED = [
    ("", "expected a type at 0"), ("int64 ", "unexpected ' '"), (" int64", "expected a type at 0"),
    ("list<int64>", "expected a field name at 5"), ("list<item:int64>", "expected a field name at 5"),
    ("list< item: int64>", "expected a field name at 5"), ("list<item: int64", "expected '>' at 16"),
    ("timestamp[us,tz=UTC]", "expected ']' at 12"), ("timestamp[us, tz=]", "expected a time zone"),
    ("timestamp[xs]", "timestamp has no unit 'xs'"), ("time32[us]", "time32 has no unit 'us'"),
    ("time64[s]", "time64 has no unit 's'"), ("date32[ms]", "'date32' is not an Arrow type"),
    ("decimal128(39, 2)", "decimal128 precision must be 1 to 38"),
    ("decimal128(0, 0)", "decimal128 precision must be 1 to 38"),
    ("decimal256(77, 2)", "decimal256 precision must be 1 to 76"), ("decimal128(x, 2)", "expected a number at 11"),
    ("map<string>", "expected ', ' at 10"),
    ("dictionary<values=string, indices=string, ordered=0>", "dictionary indices are an integer type"),
    ("dictionary<values=string, indices=int32, ordered=2>", "ordered is 0 or 1"),
    ("struct<a: int64,>", "expected ', ' at 15"), ("struct<>x", "unexpected 'x'"),
    ("fixed_size_binary[-1]", "a width is not negative"),
    ("fixed_size_list<item: int64>[-1]", "a list size is not negative"),
    ("fixed_size_list<item: int64>[x]", "expected a number at 29"),
    ("int64 not null", "unexpected ' not null'"), ("whatever", "'whatever' is not an Arrow type"),
    ("int64[3]", "'int64' is not an Arrow type"), ("int64(3)", "'int64' is not an Arrow type"),
    ("int64<x>", "'int64' is not an Arrow type"),  # a primitive takes no parameters
    ("struct<a : int64>", "expected a field name at 7"),  # a name never ends in a space
]


@pytest.mark.parametrize("name, tree", [
    ("fixed_size_binary[0]", ("fixed_size_binary", 0)),  # zero is a width pyarrow prints
    ("fixed_size_list<item: int64>[0]", ("fixed_size_list", ("item", ("int64",), True), 0)),
    ("timestamp[us]", ("timestamp", "us", None)), ("timestamp[ms, tz=UTC]", ("timestamp", "ms", "UTC")),
    ("duration[s]", ("duration", "s")), ("time32[ms]", ("time32", "ms")),
])
def test_a_name_parses_to_its_tree(name, tree):
    assert parse(name) == tree


@pytest.mark.parametrize("bad, message", REFUSED, ids=[b or "empty" for b, _ in REFUSED])
def test_a_name_arrow_never_prints_is_refused_saying_where_it_goes_wrong(bad, message):
    with pytest.raises(ValueError) as caught:
        parse(bad)
    assert str(caught.value) == message
    assert problem(bad) is not None


def test_a_name_nothing_resembles_is_refused_with_examples_of_valid_names():
    assert problem("whatever") == ("write a type as Arrow prints it, for example 'int64', 'double', 'string', "
                                   "'timestamp[us]' or 'list<item: int64>' (tau-run(5) \"The plan\")")
    assert suggestion("whatever") is None


# -- the other way: every type pyarrow prints (of the kinds the grammar covers) is accepted and parses back ------

_FIELD_NAMES = st.text(alphabet="abcxyz_ 09", min_size=1, max_size=6).filter(lambda s: s.strip() == s)
_LEAVES = st.one_of(
    st.sampled_from([pa.type_for_alias(n) for n in PRIMITIVES if n != "month_day_nano_interval"]
                    + [pa.month_day_nano_interval(), pa.date32(), pa.date64()]),
    st.builds(pa.timestamp, st.sampled_from(["s", "ms", "us", "ns"]),
              st.sampled_from([None, "UTC", "Europe/Paris", "+01:00"])),
    st.builds(pa.time32, st.sampled_from(["s", "ms"])), st.builds(pa.time64, st.sampled_from(["us", "ns"])),
    st.builds(pa.duration, st.sampled_from(["s", "ms", "us", "ns"])),
    st.integers(1, 38).flatmap(lambda p: st.builds(pa.decimal128, st.just(p), st.integers(-5, p))),
    st.integers(1, 76).flatmap(lambda p: st.builds(pa.decimal256, st.just(p), st.integers(0, p))),
    st.builds(pa.binary, st.integers(0, 64)),
)


def _nested(children):
    field = st.tuples(_FIELD_NAMES, children, st.booleans()).map(  # a null field is nullable
        lambda t: pa.field(t[0], t[1], nullable=t[2] or t[1] == pa.null()))
    return st.one_of(
        st.builds(pa.list_, field), st.builds(pa.large_list, field), st.builds(pa.list_, field, st.integers(1, 5)),
        st.builds(pa.list_view, field),
        st.lists(field, max_size=3, unique_by=lambda f: f.name).map(pa.struct),
        st.builds(pa.map_, st.sampled_from([pa.string(), pa.int64()]), children, keys_sorted=st.booleans()),
        st.builds(pa.dictionary, st.sampled_from([pa.int8(), pa.int32(), pa.uint16()]), children,
                  ordered=st.booleans()),
    )


@settings(max_examples=examples(300), deadline=None)
@given(st.recursive(_LEAVES, _nested, max_leaves=6))
def test_every_type_pyarrow_prints_is_accepted_and_parses_back_to_itself(arrow_type):
    name = str(arrow_type)
    assert problem(name) is None, name
    assert str(build(parse(name))) == name


@pytest.mark.parametrize("bad,good", [
    ("Timestamp [ms]", "timestamp[ms]"),  # spaces taken out
    ("List<item: Int64>", "list<item: int64>"),  # another case, with the spaces Arrow prints kept
    ("Strng", "string"),  # lower case is not enough: a near miss of it
    ("timestmp", "timestamp[us]"),  # a near miss of an alias: the alias's spelling
    ("dates", "date32[day]"),
])
def test_a_suggestion_is_arrows_spelling_of_what_was_meant(bad, good):
    assert suggestion(bad) == good
    assert problem(bad) == f"did you mean {good!r}?"


@pytest.mark.parametrize("far", ["dbl", "chars", "dict"])
def test_a_name_only_loosely_like_a_type_gets_no_suggestion(far):
    # difflib's ratio below 0.75 ("dbl" is 0.67 of "double"): a guess that far off would mislead
    assert suggestion(far) is None
