"""Text from outside (a remote agent's answer, a model's reply) in a form every database can store."""

NUL = "\x00"
# What a NUL becomes: the character Unicode has for "a character that could not be represented".
REPLACEMENT = "\ufffd"


def without_nul(value):
    """JSON data with every NUL in its strings and keys replaced by U+FFFD.

    JSON may carry NUL (as \\u0000), but PostgreSQL's text columns cannot hold it: a remote agent or a
    model that sends one would otherwise fail the write of its own result, again at every retry.
    """
    if isinstance(value, str):
        return value.replace(NUL, REPLACEMENT)
    if isinstance(value, dict):
        return {without_nul(key): without_nul(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_nul(item) for item in value]
    return value
