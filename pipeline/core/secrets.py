"""What never reaches a terminal, a log, a manifest, a report or a card: the passwords in URLs
(a database's, an endpoint's) and the credentials the environment holds (HF_TOKEN, AWS keys).

    print(f"store {secrets.url(db_url)}")       # postgresql://nightly:***@db/nightly
    raise UserError(secrets.text(str(e)))       # any message that may quote one

By value first: the secrets this process's environment holds and the URLs it was given
(`remember`), wherever a message repeats them, raw or percent-decoded. Then by form, in every
way libpq and signed URLs carry one:
- a URL's userinfo: whatever stands between `//` and the last `@` after it, past the user's
  `:`, so a malformed URL (`postgresql//…`, a leading space, an unescaped `@` in the password)
  is masked as well as a well-formed one;
- a query or fragment parameter with a secret's name (`?password=…`, `&sslpassword=…`,
  `?X-Amz-Signature=…`, `#access_token=…`): its value up to the next `&name=` (libpq keeps
  `&` and `#` inside a value, so they do not end it) or a space;
- libpq's keyword/value form (`host=h password='a b' dbname=d`): a value quoted or not.
A secret's name ends with one of SECRET_WORDS, or, inside a URL only, is one of
URL_SECRET_NAMES: short names that in prose are ordinary words (`key=value`).
"""

import os
import re
from urllib.parse import unquote

MASK = "***"
# variables whose values are credentials: masked wherever a message repeats them
SECRET_VARIABLES = (
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
    "PGPASSWORD", "RAY_AUTH_TOKEN",
)  # fmt: skip
URL_VARIABLES = ("NIGHTLY_DB", "RUNS_DIR")  # URLs whose passwords are masked by value too
# A name is a secret's when, lowercased without `-` `_` `.`, it ends with one of these:
# libpq's password and sslpassword, PGPASSWORD; OAuth's access_token, client_secret; signed
# URLs' X-Amz-Signature, X-Amz-Security-Token, X-Goog-Signature, and X-Amz-Credential /
# X-Goog-Credential (the key's id, not its secret: masked all the same, nobody reads them);
# API keys (apikey, access_key, AWSAccessKeyId, aws_secret_access_key). Not where the word
# only starts the name (passfile, tokenizer) or is a count (max_tokens), nor sslkey or sslcert
# (paths), nor a tokenizer's special tokens (eos_token=</s>).
SECRET_WORDS = ("password", "passwd", "pwd", "secret", "token", "signature", "credential",
                "credentials", "authorization", "apikey", "accesskey", "accesskeyid",
                "secretkey")  # fmt: skip
_SECRET_NAME = re.compile(rf"(?<!pad|eos|bos|unk|sep|cls)(?<!mask)({'|'.join(SECRET_WORDS)})$")
# inside a URL, these names whole too: Azure SAS's sig, Google's ?key=, ?pass=, ?auth=, ?pw=
URL_SECRET_NAMES = ("sig", "key", "pass", "auth", "pw")
_AUTHORITY = re.compile(r"//([^\n]*)@")  # greedy: to the last @ on the line
_NAME = r"[\w.-]+"
# a parameter after ? & # ;: its value ends at a space or the next `&name=` / `#name=`
_PARAM = re.compile(rf"(?<=[?&#;])({_NAME})=((?:[^&#\s]|[&#](?!{_NAME}=))*)")
_PARAM_WHOLE = re.compile(rf"(?<=[?&#;])({_NAME})=((?:[^&#]|[&#](?!{_NAME}=))*)")  # to the end
# libpq's keyword = value: after a space, a quote, a bracket or a comma; quoted, or to a space;
# a backslash escapes the next character in both (`a\ b` is one value)
_QUOTED = r"'(?:[^'\\]|\\.)*(?:'|\Z)"  # unterminated: to the end
_BARE = r"(?:[^\s'\\]|\\.)(?:[^\s\\]|\\.)*"
_KEYWORD = re.compile(rf"(?<![^\s\"'(\[{{,])({_NAME})[ \t]*=[ \t]*({_QUOTED}|{_BARE})", re.S)
_remembered: set[str] = set()


def remember(value: str) -> None:
    """A URL given on the command line (--db): its passwords masked by value from now on."""
    _remembered.update(_passwords(str(value)))


def url(value: str) -> str:
    """A URL (or libpq connection string) as it may be shown: its passwords replaced by ***; a
    string with an @ but no // (not a URL we can read) keeps only what follows its last @."""
    masked = text(value)
    if "//" not in masked and "@" in masked:
        return MASK + "@" + masked.rsplit("@", 1)[1]
    return masked


def text(message: str) -> str:
    """A message with every known secret value masked, then every URL's password, secret-named
    parameter and libpq keyword."""
    masked = str(message)
    for secret in known():
        masked = masked.replace(secret, MASK)
    masked = _PARAM.sub(lambda m: _mask_value(m, in_url=True), masked)
    masked = _KEYWORD.sub(lambda m: _mask_value(m, in_url=False), masked)
    return _AUTHORITY.sub(_mask_userinfo, masked)


def known() -> list[str]:
    """The secret values this process's environment holds, longest first (a value inside
    another is masked with it); values under 8 characters are left: real tokens and keys are
    longer, and masking a short word everywhere would garble messages (URLs are masked by form
    whatever their password's length)."""
    values = [os.environ.get(name, "") for name in SECRET_VARIABLES]
    values += [p for name in URL_VARIABLES for p in _passwords(os.environ.get(name, ""))]
    return sorted({v for v in [*values, *_remembered] if len(v) >= 8}, key=len, reverse=True)


def secret_name(name: str, in_url: bool = True) -> bool:
    """Whether a parameter or keyword called `name` holds a credential."""
    plain = re.sub(r"[-_.]", "", name.lower())
    return bool(_SECRET_NAME.search(plain)) or (in_url and plain in URL_SECRET_NAMES)


def _mask_value(found: re.Match, in_url: bool) -> str:
    """A parameter's or keyword's match, its value masked where its name is a secret's."""
    name, value = found.group(1), found.group(2)
    if not value or value == MASK or not secret_name(name, in_url):
        return found.group(0)
    return found.group(0)[: found.start(2) - found.start(0)] + MASK


def _mask_userinfo(found: re.Match) -> str:
    userinfo = found.group(1)
    if ":" not in userinfo:
        return found.group(0)
    user = userinfo.split(":", 1)[0]
    return f"//{user}:{MASK}@"


def _passwords(value: str) -> list[str]:
    """What may be a secret in one whole value (a URL, a connection string): its userinfo's
    password, after the user's `:` where the URL has a `//`; without one (a scheme's slash
    forgotten) where it starts is unsure, so every text after a `:`; the values of its
    secret-named parameters and keywords; each raw and percent-decoded (as libpq reads it)."""
    found = _AUTHORITY.search(value)
    if found:
        userinfo = found.group(1)
        raw = [userinfo.split(":", 1)[1]] if ":" in userinfo else []
    else:
        userinfo = value.rsplit("@", 1)[0] if "@" in value else ""
        parts = userinfo.split(":")
        raw = [":".join(parts[i:]) for i in range(1, len(parts))]
    raw += [v for n, v in _PARAM_WHOLE.findall(value) if secret_name(n)]
    for name, given in _KEYWORD.findall(value):
        if secret_name(name, in_url=False):
            raw += [given, _unquoted(given)]
    return [v for v in {*raw, *map(unquote, raw)} if v]


def _unquoted(value: str) -> str:
    """A libpq keyword's value as libpq reads it: 'a b\\'c' and a\\ b\\'c are a b'c."""
    if value.startswith("'"):
        value = value[1:].removesuffix("'")
    return re.sub(r"\\(.)", r"\1", value)
