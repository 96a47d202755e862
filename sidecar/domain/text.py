"""Text every database can store: no NUL character, no unpaired surrogate.

JSON may carry both (as \\u0000 and as a lone \\ud800 escape) and URLs may carry NUL (%00), but no text
column of PostgreSQL can hold NUL, and an unpaired surrogate is no character at all: no database driver
can encode it as UTF-8. Text from a host is refused with the field that holds it (api/parsing.py); text
from a remote agent or a model, which the sidecar cannot send back, has each such code point replaced.
"""

import re

# NUL, and every UTF-16 surrogate: in a Python string a surrogate is always unpaired (JSON's escaped pairs
# are decoded to the one character they encode).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# What such a code point becomes: the character Unicode has for "a character that could not be represented".
REPLACEMENT = "\ufffd"


def unstorable(text: str) -> str | None:
    """What in `text` no database can store ("the NUL character", "an unpaired surrogate"), or None."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    return "the NUL character" if found.group() == "\x00" else "an unpaired surrogate"


def storable(value):
    """JSON data with every NUL and unpaired surrogate in its strings and keys replaced by U+FFFD.

    A remote agent or a model that sends one would otherwise fail the write of its own result, again at
    every retry.
    """
    if isinstance(value, str):
        return _UNSTORABLE.sub(REPLACEMENT, value)
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [storable(item) for item in value]
    return value
