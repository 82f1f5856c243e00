"""The model-facing input of the `delegate_to_agent` tool: its strict validator and its schema.

This module owns what a parent model may put in a delegation request (an agent key, an objective,
optional input and constraints) and the JSON Schema every adapter advertises for it.
`parse_tool_input` takes the raw tool arguments (bytes, text or an already decoded mapping) and
returns a `ToolInput` value or raises one `DelegationError` with code `invalid_input` and
`metadata["field"]` naming the offending field (dotted path, `""` for the input as a whole);
nothing else escapes it. It is sans-IO and pure: it does not know the registry (an unknown but
well-formed key is the engine's `agent_not_found`), it applies no policy defaults or clamps
(`None` means "not given") and it never echoes a credential or a large value back in a message.

Security stance: the model names registry keys, never endpoints or credentials. A field that looks
like one (`endpoint_url`, `token`, `headers`, ...) is refused with a message saying so, wherever it
appears, before any other rule is checked.

Leniency, on purpose: JSON `null` for an optional field counts as absent, because strict
function-calling modes make models send `null` for every optional field they leave out.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final, NoReturn

import attrs

from engine._results import DelegationError, ErrorCode, InputArtifact

__all__ = [
    "AGENT_KEY_PATTERN",
    "MAX_ARTIFACT_NAME_CHARS",
    "MAX_INPUT_ARTIFACTS",
    "MAX_MIME_TYPE_CHARS",
    "MAX_OBJECTIVE_CHARS",
    "MAX_TEXT_CHARS",
    "MAX_TOOL_INPUT_BYTES",
    "MAX_URI_CHARS",
    "TOOL_INPUT_SCHEMA",
    "ToolInput",
    "is_agent_key",
    "parse_tool_input",
    "tool_input_schema",
]

#: Tool arguments larger than this (UTF-8, compact JSON for a mapping) are refused unparsed.
MAX_TOOL_INPUT_BYTES: Final = 1024 * 1024

# Text bounds count characters (code points), as JSON Schema's `maxLength` does, so that an input
# the advertised schema accepts is never refused here for its length.
MAX_OBJECTIVE_CHARS: Final = 16 * 1024
MAX_TEXT_CHARS: Final = 256 * 1024
MAX_INPUT_ARTIFACTS: Final = 32
MAX_URI_CHARS: Final = 2048
MAX_ARTIFACT_NAME_CHARS: Final = 1024
MAX_MIME_TYPE_CHARS: Final = 255

#: A registry key, as advertised in the schema (ECMA-262 syntax, anchored).
AGENT_KEY_PATTERN: Final = "^[a-z0-9][a-z0-9_.-]{0,63}$"
# Python's `$` also matches before a final newline; fullmatch without anchors does not.
_AGENT_KEY: Final = re.compile(AGENT_KEY_PATTERN[1:-1])

#: Integer constraints and their inclusive bounds; the schema is generated from the same table.
_INT_CONSTRAINTS: Final[dict[str, tuple[int, int]]] = {
    "timeout_seconds": (1, 86400),
    "max_artifacts": (0, 1000),
    "history_length": (0, 10000),
}

_TOP_FIELDS: Final = ("agent", "objective", "input", "constraints")
_INPUT_FIELDS: Final = ("prompt", "context", "artifacts")
_ARTIFACT_FIELDS: Final = ("name", "uri", "mime_type")
_CONSTRAINT_FIELDS: Final = ("timeout_seconds", "stream", "max_artifacts", "history_length")
_KNOWN_FIELDS: Final = frozenset(
    _TOP_FIELDS + _INPUT_FIELDS + _ARTIFACT_FIELDS + _CONSTRAINT_FIELDS
)

# Names a model reaches for when it tries to pick an endpoint or pass a secret. Compared after
# lowercasing and dropping separators, so `endpointUrl`, `API-Key` and `base.url` match too.
_ENDPOINT_OR_CREDENTIAL_NAMES: Final = frozenset(
    {
        "endpointurl",
        "url",
        "endpoint",
        "cardurl",
        "agentcardurl",
        "agenturl",
        "baseurl",
        "headers",
        "token",
        "accesstoken",
        "bearertoken",
        "apikey",
        "auth",
        "authorization",
        "password",
        "secret",
    }
)
_USE_ARTIFACTS: Final = "; pass large content as an artifact reference"
_ENDPOINT_MESSAGE: Final = (
    "agents are reached only through host-registered keys; "
    "endpoints and credentials are configured by the host"
)

# Patterns shared by the schema and the validator, in the syntax both ECMA-262 and Python read.
# Labels (artifact names, media types) end up in logs, headers and UI: no control characters.
_LABEL_PATTERN: Final = r"^[^\u0000-\u001f\u007f]+$"
# No whitespace and no C0/C1 control or DEL: none is legal unescaped in a URI.
_URI_PATTERN: Final = r"^[^\s\u0000-\u001f\u007f-\u009f]+$"
_MIME_TYPE_PATTERN: Final = (
    r"^[A-Za-z0-9][\w!#$&^.+-]{0,126}/[A-Za-z0-9][\w!#$&^.+-]{0,126}(?: *;[ -~]*)?$"
)
_LABEL: Final = re.compile(_LABEL_PATTERN[1:-1])
_URI_CHARS: Final = re.compile(_URI_PATTERN[1:-1])
_MIME_TYPE: Final = re.compile(_MIME_TYPE_PATTERN[1:-1], re.ASCII)
_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_URI_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
# After the scheme, WHATWG parsers skip any run of slashes and backslashes before the authority.
_URI_AUTHORITY: Final = re.compile(r"[/\\]*([^/\\?#]*)")
_NETWORK_PATH: Final = re.compile(r"[/\\]{2}")
# Userinfo after any `://`, wherever it is: behind an invalid scheme or in a query (`?next=`).
_EMBEDDED_USERINFO: Final = re.compile(r":[/\\]{2}[^/\\?#]*@")
_PLAIN_KEY: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
_SHOWN_CHARS: Final = 80

_ABSENT: Final = object()


@attrs.frozen(kw_only=True)
class ToolInput:
    """A validated `delegate_to_agent` request, as the model sent it.

    Obtain one from `parse_tool_input`; values are kept exactly as given (`objective` is not
    stripped). `None` means the model did not give the field: the engine applies the agent's
    policy defaults and clamps afterwards. `agent` is well-formed but not yet looked up.
    """

    agent: str
    objective: str
    prompt: str | None = None
    context: str | None = None
    artifacts: tuple[InputArtifact, ...] = ()
    timeout_seconds: int | None = None
    stream: bool | None = None
    max_artifacts: int | None = None
    history_length: int | None = None


def is_agent_key(value: object) -> bool:
    """Whether `value` is a well-formed registry key (the registry uses this for its own keys)."""
    return isinstance(value, str) and _AGENT_KEY.fullmatch(value) is not None


def parse_tool_input(raw: bytes | str | Mapping[str, Any]) -> ToolInput:
    """Validate the raw arguments of one `delegate_to_agent` call.

    Bytes must be UTF-8 JSON; text is JSON; a mapping (arguments an MCP SDK already decoded) goes
    through the same JSON rules after compact serialisation, so all three forms accept exactly the
    same inputs. Raises `DelegationError(code="invalid_input", retryable=False)` with
    `metadata={"field": <dotted path>}` for every failure, and nothing else.
    """
    return _read_tool_input(_decode(raw))


def tool_input_schema(agent_keys: Sequence[str] | None = None) -> dict[str, Any]:
    """A fresh copy of `TOOL_INPUT_SCHEMA`, with `agent` limited to `agent_keys` when given.

    An empty `agent_keys` adds no `enum` (JSON Schema discourages an empty one). Raises
    `ValueError` for a key `parse_tool_input` would refuse: advertising it would be a lie.
    """
    schema = copy.deepcopy(TOOL_INPUT_SCHEMA)
    if agent_keys is None or isinstance(agent_keys, str):
        if isinstance(agent_keys, str):
            raise ValueError("agent_keys must be a sequence of keys, not one string")
        return schema
    keys = list(dict.fromkeys(agent_keys))
    bad = [key for key in keys if not is_agent_key(key)]
    if bad:
        raise ValueError(f"not valid agent keys (pattern {AGENT_KEY_PATTERN}): {bad!r}")
    if keys:
        schema["properties"]["agent"]["enum"] = keys
    return schema


# --- Decoding: bytes, text or mapping -> plain JSON values ------------------------------------


def _refuse(field: str, message: str) -> NoReturn:
    raise DelegationError(
        code=ErrorCode.INVALID_INPUT,
        message=message,
        retryable=False,
        metadata={"field": field},
    )


def _too_large() -> NoReturn:
    _refuse(
        "",
        f"tool input is larger than {MAX_TOOL_INPUT_BYTES} bytes; "
        "pass large content as artifact references",
    )


def _decode(raw: object) -> Any:
    if isinstance(raw, bytes | bytearray | memoryview):
        data = bytes(raw)
        if len(data) > MAX_TOOL_INPUT_BYTES:
            _too_large()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None  # refused below, so the error does not keep `data` alive
        if text is None:
            _refuse("", "tool input is not valid UTF-8")
    elif isinstance(raw, str):
        # A character is at least one UTF-8 byte: only near the limit is encoding worth it.
        if len(raw) > MAX_TOOL_INPUT_BYTES or (
            len(raw) * 4 > MAX_TOOL_INPUT_BYTES
            and len(raw.encode("utf-8", "surrogatepass")) > MAX_TOOL_INPUT_BYTES
        ):
            _too_large()
        text = raw
    elif isinstance(raw, Mapping):
        text = _serialise_mapping(raw)
    else:
        _refuse("", "tool input must be a JSON object with `agent` and `objective`")
    return _parse_json(text)


def _serialise_mapping(raw: Mapping[Any, Any]) -> str:
    def plain(value: object) -> object:
        if isinstance(value, Mapping):
            return dict(value)
        raise TypeError(f"{type(value).__name__} is not a JSON value")

    try:
        text = json.dumps(
            dict(raw), separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=plain
        )
    except RecursionError:
        problem = "tool input is nested too deeply"
    # A mapping handed over by an SDK may raise anything from its own methods; whatever it is,
    # the arguments are not plain JSON data, and the contract is one typed error.
    except Exception as exc:
        problem = f"tool input is not plain JSON data ({_clip(str(exc))})"
    else:
        if len(text.encode("utf-8", "surrogatepass")) > MAX_TOOL_INPUT_BYTES:
            _too_large()
        return text
    _refuse("", problem)


_Pairs = list[tuple[str, Any]]
_Flagged = Mapping[int, tuple[dict[str, Any], _Pairs]]


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _parse_json(text: str) -> Any:
    # The parser hands over every object's fields in order, which is the only place duplicates
    # are visible. Objects with a duplicate or an endpoint/credential name are noted by identity
    # (the hook does not know their path) and located afterwards by one walk; valid input, whose
    # field names are all known, pays one subset test per object.
    # Each entry also holds the object itself, so that its id cannot be reused while we look.
    flagged: dict[int, tuple[dict[str, Any], _Pairs]] = {}

    def object_from_pairs(pairs: _Pairs) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) != len(pairs) or (
            not _KNOWN_FIELDS.issuperset(obj) and any(map(_is_endpoint_or_credential, obj))
        ):
            flagged[id(obj)] = (obj, pairs)
        return obj

    try:
        doc = json.loads(text, object_pairs_hook=object_from_pairs, parse_constant=_reject_constant)
    except RecursionError:
        problem = "tool input is nested too deeply"
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, over-long integer literals
        problem = f"tool input is not valid JSON: {_clip(str(exc))}"
    else:
        if flagged:
            _refuse_first_flagged(doc, flagged)
        return doc
    # Raised outside the handler, so the error does not keep the whole document alive.
    _refuse("", problem)


def _is_endpoint_or_credential(name: str) -> bool:
    if len(name) > 32:
        return False
    # Chained replace: several times faster than str.translate, and every object's keys pass here.
    bare = name.lower().replace("_", "").replace("-", "").replace(".", "").replace(" ", "")
    return bare in _ENDPOINT_OR_CREDENTIAL_NAMES


def _refuse_first_flagged(doc: Any, flagged: _Flagged) -> None:
    """Refuse the first flagged object in document order, naming the offending field's path.

    Depth-first with one iterator per open container, so paths are built only on the way to
    containers, and iterative, because a hostile document may be as deep as the parser allows.
    """
    stack: list[tuple[str, bool, Iterator[tuple[Any, Any]]]]
    if isinstance(doc, dict):
        _refuse_if_flagged(doc, "", flagged)
        stack = [("", True, iter(doc.items()))]
    elif isinstance(doc, list):
        stack = [("", False, enumerate(doc))]
    else:
        return
    while stack:
        path, in_object, children = stack[-1]
        for key, child in children:
            if isinstance(child, dict):
                child_path = _join(path, key) if in_object else f"{path}[{key}]"
                _refuse_if_flagged(child, child_path, flagged)
                stack.append((child_path, True, iter(child.items())))
                break
            if isinstance(child, list):
                child_path = _join(path, key) if in_object else f"{path}[{key}]"
                stack.append((child_path, False, enumerate(child)))
                break
        else:
            stack.pop()


def _refuse_if_flagged(obj: dict[str, Any], path: str, flagged: _Flagged) -> None:
    if id(obj) not in flagged:
        return
    _, pairs = flagged[id(obj)]
    seen: set[str] = set()
    for key, _ in pairs:
        field = _clip_path(_join(path, key))
        if _is_endpoint_or_credential(key):
            _refuse_endpoint_field(field, path)
        if key in seen:
            _refuse(field, f"`{field}` appears more than once")
        seen.add(key)


def _refuse_endpoint_field(field: str, parent: str) -> NoReturn:
    hint = ""
    if parent.startswith("input.artifacts[") and field.endswith(".url"):
        hint = "; an artifact reference goes in `uri`"
    _refuse(field, f"`{field}` is not accepted: {_ENDPOINT_MESSAGE}{hint}")


# --- Validation: plain JSON values -> ToolInput ------------------------------------------------


def _read_tool_input(doc: Any) -> ToolInput:
    top = _object(doc, "", _TOP_FIELDS)
    agent = _agent(top.get("agent", _ABSENT))
    objective = _objective(top.get("objective", _ABSENT))

    prompt = context = None
    artifacts: tuple[InputArtifact, ...] = ()
    if (body := top.get("input")) is not None:
        body = _object(body, "input", _INPUT_FIELDS)
        prompt = _text(body.get("prompt"), "input.prompt", MAX_TEXT_CHARS, hint=_USE_ARTIFACTS)
        context = _text(body.get("context"), "input.context", MAX_TEXT_CHARS, hint=_USE_ARTIFACTS)
        artifacts = _artifacts(body.get("artifacts"))

    ints: dict[str, int | None] = dict.fromkeys(_INT_CONSTRAINTS)
    stream = None
    if (constraints := top.get("constraints")) is not None:
        constraints = _object(constraints, "constraints", _CONSTRAINT_FIELDS)
        for name, (low, high) in _INT_CONSTRAINTS.items():
            ints[name] = _bounded_int(constraints.get(name), f"constraints.{name}", low, high)
        stream = _flag(constraints.get("stream"), "constraints.stream")

    return ToolInput(
        agent=agent,
        objective=objective,
        prompt=prompt,
        context=context,
        artifacts=artifacts,
        timeout_seconds=ints["timeout_seconds"],
        stream=stream,
        max_artifacts=ints["max_artifacts"],
        history_length=ints["history_length"],
    )


def _object(value: Any, path: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    """`value` as an object with only `allowed` fields (unknown ones are refused first)."""
    if not isinstance(value, dict):
        what = f"`{path}`" if path else "tool input"
        _refuse(path, f"{what} must be a JSON object, got {_kind(value)}")
    for key in value:
        if key not in allowed:
            where = f"`{path}`" if path else "the tool input"
            _refuse(
                _join(path, key),
                f"unknown field {_show_key(key)} in {where}; allowed: {', '.join(allowed)}",
            )
    return value


def _agent(value: Any) -> str:
    if value is _ABSENT:
        _refuse("agent", "`agent` is required: the key of a registered agent, e.g. 'research'")
    agent = _string(value, "agent")
    if _AGENT_KEY.fullmatch(agent) is None:
        if any(c in agent for c in ":/@"):
            # Never echo it: an address the model made up may carry a credential.
            _refuse(
                "agent",
                f"`agent` must name a registered agent key, not a URL or address: "
                f"{_ENDPOINT_MESSAGE}",
            )
        _refuse(
            "agent",
            "`agent` must name a registered agent key (1-64 characters: lowercase letters, "
            f"digits, '_', '.', '-'; starting with a letter or digit), got {_show_text(agent)}",
        )
    return agent


def _objective(value: Any) -> str:
    if value is _ABSENT:
        _refuse("objective", "`objective` is required: what the agent must achieve")
    objective = _text(value, "objective", MAX_OBJECTIVE_CHARS, hint="; put details in `input`")
    if objective is None:
        _refuse("objective", "`objective` must be a string, got null")
    if not objective.strip():
        _refuse("objective", "`objective` must not be empty: say what the agent must achieve")
    return objective


def _text(value: Any, path: str, max_chars: int, *, hint: str = "") -> str | None:
    if value is None:
        return None
    text = _string(value, path)
    if len(text) > max_chars:
        _refuse(path, f"`{path}` is longer than {max_chars} characters{hint}")
    return text


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str):
        _refuse(path, f"`{path}` must be a string, got {_kind(value)}")
    # JSON can spell unpaired surrogates ("\ud800"); they cannot be sent on as UTF-8 later.
    if _LONE_SURROGATE.search(value) is not None:
        _refuse(path, f"`{path}` contains an unpaired surrogate; send valid Unicode text")
    return value


def _artifacts(value: Any) -> tuple[InputArtifact, ...]:
    path = "input.artifacts"
    if value is None:
        return ()
    if not isinstance(value, list):
        _refuse(path, f"`{path}` must be an array, got {_kind(value)}")
    if len(value) > MAX_INPUT_ARTIFACTS:
        _refuse(
            path,
            f"`{path}` has {len(value)} entries; at most {MAX_INPUT_ARTIFACTS} are allowed",
        )
    return tuple(_artifact(entry, f"{path}[{i}]") for i, entry in enumerate(value))


def _artifact(value: Any, path: str) -> InputArtifact:
    entry = _object(value, path, _ARTIFACT_FIELDS)
    name = _label(entry.get("name"), f"{path}.name", MAX_ARTIFACT_NAME_CHARS)
    uri = _uri(entry.get("uri"), f"{path}.uri")
    mime_type = _mime_type(entry.get("mime_type"), f"{path}.mime_type")
    if name is None and uri is None:
        _refuse(path, f"`{path}` needs a `uri` or a `name`")
    return InputArtifact(name=name, uri=uri, mime_type=mime_type)


def _label(value: Any, path: str, max_chars: int) -> str | None:
    """A short single-line string: it ends up in logs, headers and UI labels."""
    text = _text(value, path, max_chars)
    if text is None:
        return None
    if not text:
        _refuse(path, f"`{path}` must not be empty")
    if _LABEL.fullmatch(text) is None:
        _refuse(path, f"`{path}` must not contain control characters")
    return text


def _uri(value: Any, path: str) -> str | None:
    uri = _text(value, path, MAX_URI_CHARS)
    if uri is None:
        return None
    # The uri itself is never echoed back: it may carry a credential.
    if not uri:
        _refuse(path, f"`{path}` must not be empty")
    if _URI_CHARS.fullmatch(uri) is None:
        _refuse(
            path, f"`{path}` must not contain spaces or control characters; percent-encode them"
        )
    if _has_userinfo(uri):
        _refuse(
            path,
            f"`{path}` must not carry credentials (user:password@ or token@); "
            "the host grants access to artifacts",
        )
    return uri


def _has_userinfo(uri: str) -> bool:
    """Whether the uri has a userinfo (`user:pass@`, or a bare token as in `https://TOKEN@host`).

    Conservative on purpose, since parsers disagree on odd input: a `mailto:` address counts, and
    so does a `scheme://user@host` embedded anywhere (a redirect target in the query, or after an
    invalid scheme that a lenient parser might still accept).
    """
    if _EMBEDDED_USERINFO.search(uri) is not None:
        return True
    scheme = _URI_SCHEME.match(uri)
    rest = uri[scheme.end() :] if scheme else uri
    if scheme is None and _NETWORK_PATH.match(rest) is None:
        return False  # a relative reference has no authority
    authority = _URI_AUTHORITY.match(rest)
    return authority is not None and "@" in authority.group(1)


def _mime_type(value: Any, path: str) -> str | None:
    mime_type = _label(value, path, MAX_MIME_TYPE_CHARS)
    if mime_type is not None and _MIME_TYPE.fullmatch(mime_type) is None:
        _refuse(path, f"`{path}` must be a media type such as 'text/markdown'")
    return mime_type


def _bounded_int(value: Any, path: str, low: int, high: int) -> int | None:
    if value is None:
        return None
    # bool is an int in Python, and 30.0 is a float: neither is a JSON integer here.
    if type(value) is not int or not low <= value <= high:
        _refuse(path, f"`{path}` must be an integer from {low} to {high}, got {_show(value)}")
    return value


def _flag(value: Any, path: str) -> bool | None:
    if value is None or type(value) is bool:
        return value
    _refuse(path, f"`{path}` must be true or false, got {_show(value)}")


# --- Messages: short, and never a large or secret value ----------------------------------------


def _join(path: str, key: str) -> str:
    segment = key if _PLAIN_KEY.fullmatch(key) else f"[{_show_text(key)}]"
    if not path:
        return segment
    return f"{path}{segment}" if segment.startswith("[") else f"{path}.{segment}"


def _clip(text: str) -> str:
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "..."


def _show_text(text: str) -> str:
    """`text` quoted with ASCII escapes (no control characters or surrogates reach a log or a
    terminal), cut at whole characters once the escaped form reaches `_SHOWN_CHARS`."""
    pieces: list[str] = []
    used = 0
    for char in text:
        piece = json.dumps(char, ensure_ascii=True)[1:-1]
        if used + len(piece) > _SHOWN_CHARS:
            return '"' + "".join(pieces) + '"...'
        pieces.append(piece)
        used += len(piece)
    return '"' + "".join(pieces) + '"'


def _clip_path(path: str) -> str:
    # Only the walk for endpoint names and duplicates can reach deep into a hostile document.
    if len(path) <= 2 * _SHOWN_CHARS:
        return path
    return path[:_SHOWN_CHARS] + "..." + path[-_SHOWN_CHARS:]


def _show_key(key: str) -> str:
    return f"`{key}`" if _PLAIN_KEY.fullmatch(key) else _show_text(key)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _show(value: Any) -> str:
    """A scalar as JSON (numbers clipped), a container or string by its kind only."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        digits = str(value)  # the parser refuses literals too long to convert
        return _clip(digits)
    if isinstance(value, float):
        return _clip(repr(value))
    return _kind(value)


# --- The advertised schema ---------------------------------------------------------------------


def _int_schema(name: str, description: str) -> dict[str, Any]:
    low, high = _INT_CONSTRAINTS[name]
    return {"type": "integer", "minimum": low, "maximum": high, "description": description}


#: JSON Schema (2020-12, the MCP default, so `$schema` is left out for clients that choke on it)
#: of the tool input. Read-only: adapters take a copy from `tool_input_schema()`. JSON Schema's
#: `integer` admits 30.0; this validator does not, and models send integers anyway.
TOOL_INPUT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["agent", "objective"],
    "properties": {
        "agent": {
            "type": "string",
            "pattern": AGENT_KEY_PATTERN,
            "description": "Key of a host-registered agent, e.g. 'research'. Never a URL.",
        },
        "objective": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_OBJECTIVE_CHARS,
            "pattern": "\\S",
            "description": "What the agent must achieve, stated so it can work on its own.",
        },
        "input": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "prompt": {
                    "type": "string",
                    "maxLength": MAX_TEXT_CHARS,
                    "description": "Detailed instructions for the agent.",
                },
                "context": {
                    "type": "string",
                    "maxLength": MAX_TEXT_CHARS,
                    "description": "Background the agent needs; it does not see this chat.",
                },
                "artifacts": {
                    "type": "array",
                    "maxItems": MAX_INPUT_ARTIFACTS,
                    "description": "References to host artifacts (by uri), never their content.",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "anyOf": [{"required": ["uri"]}, {"required": ["name"]}],
                        "properties": {
                            "name": {
                                "type": "string",
                                "maxLength": MAX_ARTIFACT_NAME_CHARS,
                                "pattern": _LABEL_PATTERN,
                            },
                            "uri": {
                                "type": "string",
                                "maxLength": MAX_URI_CHARS,
                                "pattern": _URI_PATTERN,
                                "description": "e.g. host://artifact/notes.md; no credentials.",
                            },
                            "mime_type": {
                                "type": "string",
                                "maxLength": MAX_MIME_TYPE_CHARS,
                                "pattern": _MIME_TYPE_PATTERN,
                            },
                        },
                    },
                },
            },
        },
        "constraints": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "timeout_seconds": _int_schema(
                    "timeout_seconds", "Give up after this long; the host may lower it."
                ),
                "stream": {"type": "boolean", "description": "Stream progress if possible."},
                "max_artifacts": _int_schema(
                    "max_artifacts", "Keep at most this many result artifacts."
                ),
                "history_length": _int_schema(
                    "history_length", "Remote task history messages to return."
                ),
            },
        },
    },
}
