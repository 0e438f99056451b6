"""Hypothesis strategies shared by the fuzz tests: hostile JSON-like values and YAML bombs."""

from __future__ import annotations

from hypothesis import strategies as st

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.text(alphabet=st.characters(min_codepoint=0x80, max_codepoint=0x10FFFF, exclude_categories=["Cs"]), max_size=8),
    st.sampled_from(["", " ", "\n", "-1", "0", "1e309", "NaN", "true", "null", "x" * 5000, "${HOME}", "$(id)"]),
    st.sampled_from([10**400, -(10**400), 2**1024, 2**63, -(2**63) - 1, float("nan"), float("inf"), 1e-320]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)


def yaml_bomb(depth: int, width: int) -> str:
    """A "billion laughs" YAML value: each level repeats the previous one `width` times by alias."""
    lines = [f"  a0: &a0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, depth):
        lines.append(f"  a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * width)}]")
    return "\n".join(lines) + "\n"
