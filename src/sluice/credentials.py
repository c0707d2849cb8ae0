"""Credentials: kept out of everything Sluice prints or stores, and read where they live.

``redact(text)`` masks the secrets a connection string may carry, wherever it appears in a
text (a URL, a libpq DSN, an error message quoting one):

- the password of a URL's user info: ``redis://app:s3cret@host/0`` -> ``redis://app:***@host/0``
  (a lone ``user@`` is kept: many brokers take a token as the user name, so that is masked
  too when the scheme has no password part: ``nats://TOKEN@host`` -> ``nats://***@host``);
- ``password=``, ``token=``, ``secret=`` and the like in a libpq DSN or a URL's query.

Every place a source's or sink's address reaches a message, a dead letter's ``location``,
the backlog files, a spec's ``repr`` or the dashboard goes through it.

``resolve(text)`` is the other half: a connection string may name its secrets instead of
holding them, ``${env:NAME}`` (an environment variable) or ``${file:/path}`` (a file's
content, a trailing newline dropped). They are expanded only when the connector connects,
so the pipeline's definition, its checkpoint and every message hold the placeholder.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from sluice.errors import ConfigError

MASK = "***"

# scheme://user:password@  (the password may hold anything but '@' and '/')
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:@/\s'\"]*:)(?P<secret>[^@/\s'\"]+)(?=@)")
# scheme://token@ (no colon): brokers such as NATS take a token as the user part
_URL_TOKEN = re.compile(r"(?P<head>\b(?:nats|tls|ws|wss)://)(?P<secret>[^:@/\s'\"]+)(?=@)")
# a key name such as these, with any prefix (aws_secret_access_key, auth_token)
_KEYS = (
    r"(?:[a-zA-Z0-9]+[_.-])*(?:password|passwd|pwd|pass|token|secret|secret[_-]?key|api[_-]?key"
    r"|access[_-]?key|secret[_-]?access[_-]?key|credentials?)"
)
# key=value in a DSN or a query string; the value quoted ('...') or up to a separator
_KEY_VALUE = re.compile(rf"(?P<head>(?<![a-zA-Z0-9_]){_KEYS}\s*=\s*)(?P<secret>'(?:[^'\\]|\\.)*'|[^\s&;'\"]+)", re.IGNORECASE)

# "password": "..." in JSON or a dict's repr
_QUOTED_KEY = re.compile(rf"""(?P<head>(?P<q>['"]){_KEYS}(?P=q)\s*:\s*)(?P<secret>'[^']*'|"[^"]*")""", re.IGNORECASE)

_PLACEHOLDER = re.compile(r"\$\{(?P<kind>env|file):(?P<what>[^}]+)\}")


def redact(text: object) -> str:
    """``text`` (anything, as its ``str``) with every credential it carries masked."""
    out = str(text)
    if "@" in out:
        out = _URL_PASSWORD.sub(_mask, out)
        out = _URL_TOKEN.sub(_mask, out)
    if "=" in out:
        out = _KEY_VALUE.sub(_mask, out)
    if ":" in out:
        out = _QUOTED_KEY.sub(
            lambda m: m[0] if _PLACEHOLDER.fullmatch(m["secret"][1:-1]) else m["head"] + m["secret"][0] + MASK + m["secret"][0],
            out,
        )
    return out


def _mask(m: re.Match) -> str:
    # a placeholder (``${env:NAME}``) names where the secret is, which is no secret
    return m[0] if _PLACEHOLDER.fullmatch(m["secret"].strip("'")) else m["head"] + MASK


def resolve(text: str, where: str = "a connection string") -> str:
    """``text`` with its ``${env:NAME}`` and ``${file:/path}`` placeholders replaced by the
    variable's value or the file's content; ConfigError naming the missing one."""

    def value(m: re.Match) -> str:
        kind, what = m["kind"], m["what"].strip()
        if kind == "env":
            if what not in os.environ:
                raise ConfigError(f"{where}: the environment variable {what!r} it names is not set")
            return os.environ[what]
        try:
            with open(os.path.expanduser(what)) as f:
                return f.read().rstrip("\r\n")
        except OSError as e:
            raise ConfigError(f"{where}: cannot read the secret file {what!r} it names: {e.strerror}") from None

    return _PLACEHOLDER.sub(value, text) if text and "${" in text else text


def redacted_repr(cls: type) -> type:
    """Make ``cls``'s ``repr`` (a dataclass', typically) redact what it shows."""
    plain: Callable[[object], str] = getattr(cls, "__repr__")  # noqa: B009

    def __repr__(self: object) -> str:
        return redact(plain(self))

    setattr(cls, "__repr__", __repr__)  # noqa: B010 - mypy refuses an assignment to a method
    return cls
