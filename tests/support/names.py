"""Names for the property tests of the one rule of names (tests/unit/test_sdk_values.py,
tests/integration/test_value_properties.py): what hypothesis draws, and the rule stated
again from first principles, as the oracle."""

from __future__ import annotations

import unicodedata

from hypothesis import strategies as st

# Letters and digits of several scripts (and a mathematical letter), a combining accent
# (so NFC matters), the allowed punctuation, then reserved and special characters,
# spaces, controls, an emoji and a zero-width joiner.
ALPHABET = st.sampled_from(list(
    "aZ09_.:-é\u0301ßΩж承認٣²Ⅻ\U0001d518ーא"
    "#/?%&+= \t\n\"'\\<>@!*~^`|$;,()[]{}😀\u200d\u00a0\x00"))
NAMES = st.one_of(
    st.text(ALPHABET, max_size=12),
    st.text(ALPHABET, min_size=120, max_size=140),  # around the 128 limit
    st.text(max_size=10),  # anything at all
)


def follows_rule(name: str, *, event: bool = False) -> bool:
    """The rule: in NFC, 1-128 characters, each a letter or a digit (`str.isalnum`) or
    one of `_ . : -` (and `/` for events), the first a letter or a digit."""
    nfc = unicodedata.normalize("NFC", name)
    allowed = "_.:-/" if event else "_.:-"
    return (1 <= len(nfc) <= 128 and nfc[0].isalnum()
            and all(c.isalnum() or c in allowed for c in nfc))
