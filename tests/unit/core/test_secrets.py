"""pipeline/core/secrets.py: no password of a URL, well-formed or not, and no credential of the
environment survives url() or text() (hypothesis draws the passwords)."""

import string

from hypothesis import assume, given
from hypothesis import strategies as st

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
