"""Text every database can store: no NUL character, no unpaired surrogate.

JSON may carry both (as \\u0000 and as a lone \\ud800 escape) and URLs may carry NUL (%00), but no text
column of PostgreSQL can hold NUL, and an unpaired surrogate is no character at all: no database driver
can encode it as UTF-8. Text from a host is refused with the field that holds it (api/parsing.py); text
from a remote agent or a model, which the sidecar cannot send back, has each such code point replaced.
"""

import json
import re

# NUL, and every UTF-16 surrogate: in a Python string a surrogate is always unpaired (JSON's escaped pairs
# are decoded to the one character they encode).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# What in JSON text can become such a code point: the code point itself (json.loads decodes bytes letting
# surrogates through) or its escape, which is always exactly four hex digits.
_UNSTORABLE_IN_JSON = re.compile(r"[\x00\ud800-\udfff]|\\u(?:0000|[dD][89a-fA-F])")
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


def may_hold_unstorable(text: str) -> bool:
    """Whether JSON `text` may decode to a string holding what no database can store: one scan of the text,
    which finds every such code point and escape (and a few escaped backslashes that only look like one)."""
    return _UNSTORABLE_IN_JSON.search(text) is not None


def storable_json(data: bytes | str):
    """json.loads(data), made storable. The walk over every string of the result is paid only when the text
    could hold such a code point, which one scan of the text tells (a poll's answer: the walk was a tenth of
    its CPU, bench/bench_cycle.py). ValueError as from json.loads, also for bytes that are not text."""
    text = data if isinstance(data, str) else data.decode(json.detect_encoding(data), "surrogatepass")
    value = json.loads(text)
    return storable(value) if may_hold_unstorable(text) else value
