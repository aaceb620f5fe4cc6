"""A Hypothesis strategy for a stored record value damaged the way a bug or a disk would."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st


@st.composite
def damaged_value(draw: st.DrawFn, values: Sequence[bytes]) -> tuple[int, bytes]:
    """(index, value): one of `values`, cut short or with one byte changed."""
    index = draw(st.integers(0, len(values) - 1))
    value = values[index]
    if draw(st.booleans()):
        return index, value[: draw(st.integers(0, len(value) - 1))]
    at = draw(st.integers(0, len(value) - 1))
    byte = draw(st.integers(0, 255).filter(lambda b: b != value[at]))
    return index, value[:at] + bytes([byte]) + value[at + 1 :]
