"""JSON texts of every form for property tests: numbers, strings, nesting, value layouts.

Texts, not Python values: a number's text is what must pass through unchanged, so the
strategies build the text a source would write (``number``: integers of any size, fractions,
exponents, ``-0``, ``1e400``; ``string``: any character but lone surrogates, escaped as JSON).
"""

import json
from typing import Any

from hypothesis import strategies as st

digits = st.text("0123456789", min_size=1, max_size=25)
integer = st.builds(
    lambda sign, d: sign + (d.lstrip("0") or "0"), st.sampled_from(["", "-"]), digits
)
fraction = st.builds(lambda i, f: f"{i}.{f}", integer, digits)
exponent = st.builds(
    lambda m, e, sign, d: f"{m}{e}{sign}{d}",
    st.one_of(integer, fraction),
    st.sampled_from(["e", "E"]),
    st.sampled_from(["", "+", "-"]),
    st.text("0123456789", min_size=1, max_size=3),
)
number = st.one_of(integer, fraction, exponent, st.just("-0"), st.just("1e400"))
string = st.text(st.characters(exclude_categories=("Cs",)), max_size=12).map(
    lambda s: json.dumps(s, ensure_ascii=False)
)
scalar = st.one_of(number, string, st.sampled_from(["true", "false", "null"]))
text = st.recursive(
    scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]"),
        st.dictionaries(string, inner, max_size=4).map(
            lambda d: "{" + ",".join(f"{k}:{v}" for k, v in d.items()) + "}"
        ),
    ),
    max_leaves=12,
)
row = st.dictionaries(string, text, max_size=6).map(
    lambda d: "{" + ",".join(f"{k}:{v}" for k, v in d.items()) + "}"
)


def exact(data: str | bytes) -> Any:
    """The standard library's parse with every number as its text (independent of our code)."""
    return json.loads(data, parse_float=lambda t: ("n", t), parse_int=lambda t: ("n", t))


# A stretch of one source partition, each record in one of the layouts a source writes: the
# wrapped envelope's own members (passed on as it came), without `before` (diff adds it), with
# a time not written as the changefeed writes one, with another member, members reordered.
LAYOUTS = {
    "as_output": '{{"after":{a},"before":{b},"updated":"{t}"}}',
    "no_before": '{{"after":{a},"updated":"{t}"}}',
    "short_time": '{{"after":{a},"before":{b},"updated":"{short}"}}',
    "extra_member": '{{"after":{a},"before":{b},"updated":"{t}","mvcc_timestamp":"{t}"}}',
    "reordered": '{{"before":{b},"after":{a},"updated":"{t}"}}',
    "spaced": '{{ "after" : {a} , "before" : {b} , "updated" : "{t}" }}',
}
