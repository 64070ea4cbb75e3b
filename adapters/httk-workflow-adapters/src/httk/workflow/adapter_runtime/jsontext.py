"""The runtime's JSON: one request in, one result out, without importing :mod:`json`.

``import json`` loads ``re`` and ``enum``, which costs a dispatcher more start-up time than
everything else a local ``invoke`` does. The same C scanner and encoder that :mod:`json`
itself uses (``_json``) are driven here directly, with :mod:`json`'s defaults (strict
strings, ``NaN``/``Infinity`` accepted, ASCII output). Where ``_json`` is missing or does
not answer a known document as expected, :mod:`json` is used instead.
"""

from __future__ import annotations

# Typing names only: importing typing costs every adapter call start-up time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_WHITESPACE = " \t\n\r"
_PROBE = {"b": [1, 2.5, None, True, '\u00e9\n"'], "a": {}}
_PROBE_TEXT = '{"a":{},"b":[1,2.5,null,true,"\\u00e9\\n\\""]}'


class _DecoderSettings:
    """The attributes ``_json.make_scanner`` reads, as :class:`json.JSONDecoder` sets them."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    def __init__(self) -> None:
        self.parse_constant = {
            "-Infinity": float("-inf"),
            "Infinity": float("inf"),
            "NaN": float("nan"),
        }.__getitem__


def _unserializable(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _accelerated() -> tuple[Callable[[str, int], tuple[Any, int]], Callable[[Any], str]] | None:
    try:
        import _json

        # typeshed types the context as a scanner; the C code reads only these attributes.
        scanner = _json.make_scanner(_DecoderSettings())  # type: ignore[arg-type]
        encoder = _json.make_encoder(
            {}, _unserializable, _json.encode_basestring_ascii, None, ":", ",", True, False, True
        )

        def encode(value: Any) -> str:
            return "".join(encoder(value, 0))

        if scanner(_PROBE_TEXT, 0) != (_PROBE, len(_PROBE_TEXT)) or encode(_PROBE) != _PROBE_TEXT:
            return None
    except (ImportError, AttributeError, TypeError, ValueError):
        return None
    return scanner, encode


_ACCELERATED = _accelerated()


def loads(text: str) -> Any:
    """Parse one JSON document, as :func:`json.loads` would; ``ValueError`` when malformed."""
    if _ACCELERATED is None:
        import json

        return json.loads(text)
    scan, _ = _ACCELERATED
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = scan(text, start)
    except StopIteration as stop:
        raise ValueError(f"Expecting value: char {stop.value}") from None
    if text[end:].strip(_WHITESPACE):
        raise ValueError(f"Extra data: char {end}")
    return value


def dumps(value: Any) -> str:
    """Compact, key-sorted, ASCII JSON, as ``json.dumps(value, sort_keys=True,
    separators=(",", ":"))`` writes it."""
    if _ACCELERATED is None:
        import json

        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    _, encode = _ACCELERATED
    return encode(value)
