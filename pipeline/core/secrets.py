"""What never reaches a terminal, a log, a manifest, a report or a card: the passwords in URLs
(a database's, an endpoint's) and the credentials the environment holds (HF_TOKEN, AWS keys).

    print(f"store {secrets.url(db_url)}")       # postgresql://nightly:***@db/nightly
    raise UserError(secrets.text(str(e)))       # any message that may quote one

Both mask by form — whatever stands between `//` and the last `@` after it, past the user's
`:` — so a malformed URL (`postgresql//…`, a leading space, an unescaped `@` in the password)
is masked as well as a well-formed one, and by value: the secrets this process's environment
holds, wherever a message repeats them.
"""

import os
import re

MASK = "***"
# variables whose values are credentials: masked wherever a message repeats them
SECRET_VARIABLES = (
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
    "PGPASSWORD", "RAY_AUTH_TOKEN",
)  # fmt: skip
URL_VARIABLES = ("NIGHTLY_DB", "RUNS_DIR")  # URLs whose passwords are masked by value too
_AUTHORITY = re.compile(r"//([^\n]*)@")  # greedy: to the last @ on the line
_remembered: set[str] = set()


def remember(value: str) -> None:
    """A URL given on the command line (--db): its password masked by value from now on."""
    _remembered.update(_passwords(str(value)))


def url(value: str) -> str:
    """A URL as it may be shown: its password replaced by ***; a string with an @ but no //
    (not a URL we can read) keeps only what follows its last @."""
    value = str(value)
    if "//" not in value and "@" in value:
        return MASK + "@" + value.rsplit("@", 1)[1]
    return text(value)


def text(message: str) -> str:
    """A message with every URL's password and every known secret value masked."""
    masked = _AUTHORITY.sub(_mask_userinfo, str(message))
    for secret in known():
        masked = masked.replace(secret, MASK)
    return masked


def known() -> list[str]:
    """The secret values this process's environment holds, longest first (a value inside
    another is masked with it); values under 8 characters are left: real tokens and keys are
    longer, and masking a short word everywhere would garble messages (URLs are masked by form
    whatever their password's length)."""
    values = [os.environ.get(name, "") for name in SECRET_VARIABLES]
    values += [p for name in URL_VARIABLES for p in _passwords(os.environ.get(name, ""))]
    return sorted({v for v in [*values, *_remembered] if len(v) >= 8}, key=len, reverse=True)


def _mask_userinfo(found: re.Match) -> str:
    userinfo = found.group(1)
    if ":" not in userinfo:
        return found.group(0)
    user = userinfo.split(":", 1)[0]
    return f"//{user}:{MASK}@"


def _passwords(value: str) -> list[str]:
    """What may be a URL's password: after the user's `:` where the URL has a `//`; without
    one (a scheme's slash forgotten) where it starts is unsure, so every text after a `:`."""
    found = _AUTHORITY.search(value)
    if found:
        userinfo = found.group(1)
        return [userinfo.split(":", 1)[1]] if ":" in userinfo else []
    userinfo = value.rsplit("@", 1)[0] if "@" in value else ""
    parts = userinfo.split(":")
    return [":".join(parts[i:]) for i in range(1, len(parts))]
