"""Property-based checks of the storage URI parser (trainer_contract/storage.py), which reads what the values
and the pod's environment say: whatever the text, it either gives a URI or one line saying what is wrong (never
another exception: gen-manifests would show a traceback, the stager would die without its record); a parsed
source is staged inside the staged tree; nothing a line shows holds a URL's password or query values."""

from __future__ import annotations

import string
from urllib.parse import quote, unquote

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from trainer_contract import storage
from trainer_contract.storage import StorageUriError

ROLES = st.sampled_from(["model", "dataset", "export", "checkpoint"])
SHARED = "/pvc-home"
# URL-ish text: a scheme, then characters that matter to URL parsing, printable or not
URLISH = st.builds(lambda scheme, rest: f"{scheme}://{rest}",
                   st.sampled_from(["hf", "s3", "https", "http", "ftp", "HTTPS", ""]),
                   st.text(alphabet=st.sampled_from(list("ab.-_/@:?&=#[]%\\ \n\t\x00" + "19")), max_size=40))
SECRET = st.text(alphabet=string.ascii_letters + string.digits, min_size=12, max_size=24)
CHECKS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@CHECKS
@given(text=st.one_of(st.text(max_size=60), URLISH), role=ROLES)
@example("https://../a", "dataset")  # found: staged one level up, beside the https tree
@example("https://./a", "model")
def test_any_text_parses_or_is_refused_in_one_line(text, role):
    try:
        uri = storage.parse(text, role)
    except StorageUriError as error:
        assert "\n" not in str(error) and str(error)
        return
    staged = uri.staged_path(SHARED, role)
    parts = staged.split("/")
    assert not any(character in staged for character in "\n\r\x00")
    if uri.scheme != "path":
        assert staged.startswith(f"{SHARED}/{storage.STAGED_DIR}/{role}s/")
        assert "." not in parts and ".." not in parts and "" not in parts[1:], staged
    else:
        assert ".." not in parts
    assert isinstance(storage.credential_parameters(text), list)  # never raises, whatever the text


@CHECKS
@given(secret=SECRET, key=st.sampled_from(["X-Amz-Signature", "token", "sig", "access_token"]),
       path=st.from_regex(r"/[a-z]{1,8}/[a-z]{1,8}\.(tar\.gz|zip|json)", fullmatch=True))
def test_a_query_value_never_reaches_a_line(secret, key, path):
    text = f"https://files.example{path}?{key}={secret}&X-Amz-Expires=60"
    uri = storage.parse(text, "dataset")
    assert uri.url == text  # fetched as written
    assert key in storage.credential_parameters(text)  # what the render refuses in the values
    for line in (uri.describe, uri.named("dataset"), uri.staged_path(SHARED, "dataset"), storage.redacted(text)):
        assert secret not in line


@CHECKS
@given(user=SECRET, password=SECRET, rest=st.text(alphabet="-_./~", max_size=20))
def test_a_user_and_password_are_refused_and_never_shown(user, password, rest):
    text = f"https://{user}:{password}@files.example/d/f{rest}"
    try:
        storage.parse(text, "model")
    except StorageUriError as error:
        assert user not in str(error) and password not in str(error)
    else:
        raise AssertionError(f"{text} was accepted")


HF_PART = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,6}", fullmatch=True).filter(lambda part: ".." not in part)
SOURCES = st.one_of(
    st.builds(lambda org, name, revision: f"hf://{org}/{name}@{revision}", HF_PART, HF_PART,
              st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,8}", fullmatch=True)),
    st.builds(lambda name: f"hf://{name}", HF_PART),
    st.builds(lambda bucket, prefix: f"s3://{bucket}/{prefix}", st.sampled_from(["abc", "a-b", "a.b"]),
              st.from_regex(r"([a-z%_~-]{1,3}/){0,3}[a-z%_~-]{0,3}", fullmatch=True)),
)


@CHECKS
@given(first=SOURCES, second=SOURCES, role=st.sampled_from(["model", "dataset"]))
def test_two_sources_never_share_a_directory_nor_nest(first, second, role):
    try:
        one, other = storage.parse(first, role), storage.parse(second, role)
    except StorageUriError:
        return
    if (one.scheme, one.repo, one.revision, one.bucket, one.prefix) == \
            (other.scheme, other.repo, other.revision, other.bucket, other.prefix):
        return  # the same source, written two ways (a trailing '/'): one place
    here, there = one.staged_path(SHARED, role), other.staged_path(SHARED, role)
    assert here != there and not there.startswith(f"{here}/") and not here.startswith(f"{there}/"), (first, second)


SECRET_NAME = st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,6}[a-z0-9])?", fullmatch=True)
SECRET_KEY = st.from_regex(r"[-._a-zA-Z0-9]{1,6}", fullmatch=True)


@CHECKS
@given(first=st.tuples(SECRET_NAME, SECRET_KEY), second=st.one_of(st.tuples(SECRET_NAME, SECRET_KEY), SOURCES),
       role=st.sampled_from(["model", "dataset"]))
def test_a_uri_from_a_secret_has_a_place_of_its_own(first, second, role):
    """storage_uri_secret: the place is the Secret's name and key's, one component each ('.' and '..' keys too),
    apart from every other Secret's key and every URI's place."""
    one = storage.from_secret(*first)
    try:
        other = storage.from_secret(*second) if isinstance(second, tuple) else storage.parse(second, role)
    except StorageUriError:
        return
    here, there = one.staged_path(SHARED, role), other.staged_path(SHARED, role)
    assert here.startswith(f"{SHARED}/{storage.STAGED_DIR}/{role}s/secret/")
    assert "." not in here.split("/") and ".." not in here.split("/")
    if isinstance(second, tuple) and first == second:
        assert here == there
        return
    assert here != there and not there.startswith(f"{here}/") and not here.startswith(f"{there}/"), (first, second)


# Where a credential hides in a text that may not even parse: a user and password (with one slash, an upper-case
# scheme, no scheme), a query value, a query part without a value, a fragment (an OAuth implicit grant's token)
CREDENTIAL_PLACES = ["{scheme}{secret}:x@h0st.example/f", "{scheme}user:{secret}@h0st.example/f", "{scheme}h0st.example/f?X-Amz-Signature={secret}",
                     "{scheme}h0st.example/f?a=1&{secret}", "{scheme}h0st.example/f#access_token={secret}", "{scheme}h0st.example/f?{secret}",
                     "{scheme}h0st.example/f?sig={secret}#x", "{scheme}[::1/f?sig={secret}"]


@CHECKS
@given(secret=SECRET, place=st.sampled_from(CREDENTIAL_PLACES), role=ROLES,
       scheme=st.sampled_from(["https://", "HTTPS://", "https:/", "https:", "http://", "s3://", "ftp://", ""]),
       known_as=st.sampled_from([None, "from Secret presigned key url"]))
@example(secret="Zk3Jq8Xw2Lm9", place="{scheme}user:{secret}@h0st.example/f", role="dataset", scheme="https:/",
         known_as=None)  # found: redacted() misses a user with one slash after the scheme
def test_a_credential_never_reaches_a_line_whatever_the_uri(secret, place, role, scheme, known_as):
    """Every line the parser or a parsed source gives (its errors, its name, its place) and shown() itself hold
    none of the credential, whether the text parses or not; a URI known by its Secret is named by that alone."""
    text = place.format(scheme=scheme, secret=secret)
    try:
        uri = storage.parse(text, role, known_as=known_as)
        lines = [uri.describe, uri.named(role)]
    except StorageUriError as error:
        lines = [str(error)]
    lines.append(storage.shown(text))
    for line in lines:
        assert secret not in line and secret not in unquote(line), line
        if known_as is not None and line is not lines[-1]:
            assert known_as in line and "h0st" not in line, line  # nothing of the text at all


# Another library's words about a URL it sent, as botocore, requests, huggingface_hub and urllib write them.
LIBRARY_MESSAGES = [
    'EndpointConnectionError: Could not connect to the endpoint URL: "{url}"',
    "ClientError: An error occurred (403) when calling the GetObject operation (reached max retries: 4): {url}",
    "ConnectionError: HTTPConnectionPool(host='s3.example', port=9000): Max retries exceeded with url: {url} "
    "(Caused by NewConnectionError('<urllib3.connection.HTTPConnection object>: Failed to establish a new "
    "connection: [Errno 111] Connection refused'))",
    "HfHubHTTPError: 401 Client Error: Unauthorized for url: {url} (Request ID: Root=1-abc)",
    "ParamValidationError: Parameter validation failed: Invalid bucket name {url!r}: Bucket name must match",
]
CREDENTIAL_NAMES = ["X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token", "X-Goog-Signature", "sig",
                    "token", "access_token", "apiKey", "password"]


def _encoded(text: str, times: int) -> str:
    for _ in range(times):
        text = quote(text, safe="/")
    return text


def _url(where: str, name: str, secret: str, times: int) -> str:
    """A URL holding ``secret`` as ``name``'s value ``where`` a library quotes it: in the path (an S3 key's '?',
    percent-encoded ``times`` times), in a query value (a prefix), in the query itself, or as the user's password."""
    query = f"?{name}={secret}&X-Amz-Expires=60"
    if where == "path":
        return f"http://s3.example:9000/team-data/{_encoded('m.tar.gz' + query, times)}"
    if where == "prefix":
        return f"http://s3.example:9000/team-data?list-type=2&prefix={_encoded('m' + query, max(times, 1))}"
    if where == "query":
        return f"http://s3.example:9000/team-data/m.tar.gz{query}"
    return f"http://minio:{secret}@s3.example:9000/team-data"


@CHECKS
@given(secret=SECRET, name=st.sampled_from(CREDENTIAL_NAMES), times=st.integers(0, 3),
       where=st.sampled_from(["path", "prefix", "query", "user"]), message=st.sampled_from(LIBRARY_MESSAGES),
       bare=st.booleans())
def test_a_credential_quoted_by_another_library_never_survives_scrubbing(secret, name, times, where, message, bare):
    """scrubbed(): whatever a library's error says of a URL that held a signature, a token or a password (plain,
    or percent-encoded once or more: %3F, %3D, %26, %253D), what a line shows holds none of it, decoded or not, and
    still says where (the host)."""
    url = _url(where, name, secret, times)
    text = message.format(url=url.split("://", 1)[1].partition("/")[2] if bare and where != "user" else url)
    line = storage.scrubbed(text)
    for shown_as in (line, unquote(line), unquote(unquote(unquote(line)))):
        assert secret not in shown_as, (text, line)
    assert "s3.example" in line or "team-data" in line, line
    assert storage.scrubbed(line) == line  # scrubbed once is scrubbed


PLAIN = st.text(alphabet=string.ascii_letters + string.digits + " ./-_,()[]\n", max_size=80)


@CHECKS
@given(text=st.one_of(st.text(max_size=200), URLISH, PLAIN))
def test_scrubbing_any_text_never_raises_is_stable_and_leaves_plain_words_alone(text):
    line = storage.scrubbed(text)
    assert storage.scrubbed(line) == line
    if not any(shape in text for shape in ("hf_", "AKIA", "ASIA", "earer", "asic", "=", "?", "&", "%", "@", "#", ":",
                                           "'", '"')):
        assert line == text
