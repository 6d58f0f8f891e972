"""pipeline/core/secrets.py: no password of a URL, well-formed or not, in its userinfo, its query
string or libpq's keyword/value form, no signed URL's signature and no credential of the
environment survives url() or text() (hypothesis draws the passwords); libpq itself
(psycopg.conninfo) says what each form means, and reads the masked one as the same connection
but for the password."""

import string
from urllib.parse import parse_qsl, quote, urlencode

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from psycopg import ProgrammingError
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pipeline.core import secrets

# anything but a line break may stand in a password, @ / : and spaces included
PASSWORDS = st.text(alphabet=st.characters(blacklist_characters="\n\r"), min_size=8, max_size=30)
NAMES = st.text(alphabet=string.ascii_lowercase + string.digits, min_size=1, max_size=12)
SHAPES = (
    "postgresql://{u}:{p}@{h}:5432/{d}",  # well-formed
    "postgresql+psycopg://{u}:{p}@{h}/{d}",
    "postgresql//{u}:{p}@{h}/{d}",  # the colon forgotten
    " postgresql://{u}:{p}@{h}/{d}",  # a leading space
    "postgresql:/{u}:{p}@{h}/{d}",  # one slash: no // at all
    "{u}:{p}@{h}/{d}",  # no scheme
)


@given(PASSWORDS, NAMES, NAMES, NAMES, st.sampled_from(SHAPES))
def test_no_password_survives_any_url_shape(password, user, host, db, shape):
    secrets._remembered.clear()  # an earlier example's password is no secret of this one
    url = shape.format(u=user, p=password, h=host, d=db)
    assume(password not in shape.format(u=user, p="", h=host, d=db))  # it shows only as itself
    assert password not in secrets.url(url)
    secrets.remember(url)  # given on the command line: masked by value in any message after
    assert password not in secrets.text(f"store {url}: could not connect\nagain: {password}")
    secrets._remembered.clear()


def test_what_is_not_a_secret_stays_readable(monkeypatch):
    monkeypatch.delenv("NIGHTLY_DB", raising=False)
    assert secrets.url("postgresql://nightly:pw1234@db:5432/n") == (
        "postgresql://nightly:***@db:5432/n"
    )
    assert secrets.url("sqlite:///runs/nightly.db") == "sqlite:///runs/nightly.db"
    assert secrets.url("s3://bucket/runs") == "s3://bucket/runs"
    assert secrets.text("hf://acme/tiny@main has no card") == "hf://acme/tiny@main has no card"


def test_the_environments_credentials_are_masked_by_value(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_abcdef123456")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG")
    monkeypatch.setenv("NIGHTLY_DB", "postgresql://n:db-pass-99@h/n")
    said = secrets.text("token hf_abcdef123456, key wJalrXUtnFEMI/K7MDENG, pw db-pass-99")
    assert said == "token ***, key ***, pw ***"


# libpq's forms: any character but NUL, line breaks included (quoted, or percent-encoded)
PG_PASSWORDS = st.text(
    alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
    min_size=8,
    max_size=30,
)
PG_KEYS = st.sampled_from(["password", "sslpassword"])
SLOW_HOST = settings(deadline=None)  # a loaded 2-core host: a run's time is no finding here
URL_SAFE = "!$'()*+,:;@/?#~"  # what libpq takes unencoded in a query value (# included)


@pytest.fixture(autouse=True)
def _forget(monkeypatch):
    for name in secrets.URL_VARIABLES + secrets.SECRET_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    yield
    secrets._remembered.clear()


def _parsed(conninfo: str) -> dict:
    try:
        return conninfo_to_dict(conninfo)
    except ProgrammingError:
        assume(False)  # not a form libpq takes
        raise


@SLOW_HOST
@given(PG_PASSWORDS, NAMES, NAMES, NAMES, PG_KEYS, st.booleans())
def test_a_password_in_the_query_string_is_masked(password, user, host, db, key, encode_all):
    secrets._remembered.clear()
    given_as = quote(password, safe="" if encode_all else URL_SAFE)
    url = f"postgresql://{user}@{host}/{db}?sslmode=prefer&{key}={{}}&connect_timeout=5"
    assume(password not in url and given_as not in url)  # it shows only as itself
    url = url.format(given_as)
    parsed = _parsed(url)
    assert parsed[key] == password  # as libpq reads it
    masked = secrets.url(url)
    assert password not in masked and given_as not in masked
    assert conninfo_to_dict(masked) == {**parsed, key: "***"}  # the rest as readable as it was
    secrets.remember(url)  # raw and decoded: masked wherever a library repeats either
    said = secrets.text(f"store {url}: failed\nagain: {password} ({given_as})")
    assert password not in said and given_as not in said


@SLOW_HOST
@given(PG_PASSWORDS, NAMES, NAMES, NAMES, PG_KEYS)
def test_a_password_in_libpqs_keyword_value_form_is_masked(password, user, host, db, key):
    secrets._remembered.clear()
    conninfo = make_conninfo(host=host, user=user, dbname=db, sslmode="prefer", **{key: password})
    rest = make_conninfo(host=host, user=user, dbname=db, sslmode="prefer")
    assume(password not in f"{rest} {key}=")  # it shows only as itself
    parsed = _parsed(conninfo)
    assert parsed[key] == password
    masked = secrets.url(conninfo)
    assert password not in masked
    assert conninfo_to_dict(masked) == {**parsed, key: "***"}
    secrets.remember(conninfo)  # the value unquoted, as libpq reads it, masked from now on
    assert password not in secrets.text(f"connection to {host} failed\nagain: {password}")


@SLOW_HOST
@given(PG_PASSWORDS, NAMES, NAMES, NAMES)
def test_a_percent_encoded_password_in_the_authority_is_masked_raw_and_decoded(
    password, user, host, db
):
    secrets._remembered.clear()
    url = f"postgresql://{user}:{quote(password, safe='')}@{host}/{db}"
    assume(password not in f"postgresql://{user}:@{host}/{db}")
    parsed = _parsed(url)
    masked = secrets.url(url)
    assert password not in masked
    assert conninfo_to_dict(masked) == {**parsed, "password": "***"}
    secrets.remember(url)
    assert password not in secrets.text(f"again: {password}")


SIGNED = ["X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token", "X-Goog-Signature",
          "Signature", "AWSAccessKeyId", "sig", "key", "api_key", "access_token", "token",
          "client_secret", "secret", "password"]  # fmt: skip
PLAIN = ["X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders", "sv", "se", "state",
         "versionId", "max_tokens", "passfile"]  # fmt: skip


@SLOW_HOST
@given(
    st.dictionaries(st.sampled_from(SIGNED + PLAIN), st.text(min_size=8, max_size=20), min_size=1),
    st.sampled_from(["?", "#", "?X-Amz-Date=20261204&sv=2025#"]),
)
def test_signed_urls_and_fragments_keep_all_but_their_secrets(params, before):
    url = f"https://bucket.example.com/key/obj.bin{before}{urlencode(params)}"
    masked = secrets.url(url)
    shown = dict(parse_qsl(masked.rsplit("#" if "#" in before else "?", 1)[1]))
    assert shown == {k: "***" if k in SIGNED else v for k, v in params.items()}
    assert masked.startswith(f"https://bucket.example.com/key/obj.bin{before}")


def test_settings_and_prose_stay_readable():
    for said in (
        "missing key=value on line 3",  # `key` is a secret's name only inside a URL
        "max_tokens=256 eos_token=</s> pad_token=<pad> tokenizer=fast",
        "passfile=/home/u/.pgpass sslkey=/etc/k.pem sslcert=/etc/c.pem sslmode=require",
        "postgresql://nightly@db/nightly?sslmode=require&application_name=pipeline",
    ):
        assert secrets.text(said) == said
    assert secrets.text("PGPASSWORD=hunter2 make nightly") == "PGPASSWORD=*** make nightly"


def test_report_never_shows_a_password_given_in_the_query_string(capsys, monkeypatch, tmp_path):
    """Through the command line: the store's error, as `report` prints it."""
    from pipeline.cli.main import main

    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    url = "postgresql://nightly@127.0.0.1:1/nightly?password=Pw-in-query-7Qz&connect_timeout=2"
    code = main(["report", "--db", url, "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 2 and "Pw-in-query-7Qz" not in out + err, err
    assert "postgresql://nightly@127.0.0.1:1/nightly?password=***&connect_timeout=2" in err
