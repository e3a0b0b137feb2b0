"""Where models, datasets, exports and checkpoints come from and go to: the storage URIs of the values
(initializer.model / initializer.dataset / export / checkpoint .storage_uri), parsed and checked once for the
generator (render-time errors naming the key) and for the stager in the pod, and where each source is staged
on the shared volume.

    hf://org/name[@revision]            a model repository of the Hugging Face Hub (HF_ENDPOINT for another)
    hf://datasets/org/name[@revision]   a dataset repository
    s3://bucket[/prefix]                every object under the prefix (AWS_ENDPOINT_URL for another endpoint)
    https://host/path/file              one file; an archive (.tar, .tar.gz, .tgz, .zip) is unpacked
    /an/absolute/path                   already on the shared volume: used as it is, nothing fetched

A model's or dataset's URI may instead be a Secret's key (initializer.<role>.storage_uri_secret: a presigned
URL, whose signature must not be written out): the render knows only which key, the stager reads the URI from
its environment, and the source is staged at a path derived from the Secret's name and key.

A source is staged under STAGED_DIR of the shared location, at a path derived from the URI alone (so a render
knows it: MODEL_DIR and DATASET_DIR), with the revision in it: a new revision lands beside the old one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote, unquote, urlparse

Scheme = Literal["hf", "s3", "https", "path", "secret"]
Role = Literal["model", "dataset", "export", "checkpoint"]

# Under the shared location (the volume's mount, Slurm's shared directory).
STAGED_DIR = "staged"
# Written last into a staged directory, after every file is verified and the directory renamed into place:
# its presence is what "staged" means, to a rerun and to the indexes that wait.
MARKER = ".indexed-trainer-staged.json"
# What the stager reads: the URIs as the values give them (rendered into the ConfigMap with the rest).
URI_VARIABLES = {"model": "INDEXED_TRAINER_MODEL_URI", "dataset": "INDEXED_TRAINER_DATASET_URI",
                 "export": "INDEXED_TRAINER_EXPORT_URI", "checkpoint": "INDEXED_TRAINER_CHECKPOINT_URI"}
# Beside a URI that comes from a Secret's key (storage_uri_secret), how lines name it: "from Secret NAME key KEY".
# Its text is never shown, not even redacted: a malformed presigned URL cannot be trusted to redact.
URI_SOURCE_VARIABLES = {role: f"{variable}_SOURCE" for role, variable in URI_VARIABLES.items()}
# Where a program leaves what export.storage_uri uploads when training ends (the built-in worker: its model,
# summary, metrics and a model card), and the object written last under the export's prefix, listing every
# file: a reader takes the export as complete only when it is there.
EXPORT_VARIABLE = "EXPORT_DIR"
COMPLETE_OBJECT = ".indexed-trainer-complete.json"
# What a model stages from a Hub repository unless its allow_patterns say otherwise: what from_pretrained loads.
MODEL_FILES = ("*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.jinja")
# The key that signs each checkpoint's listing in the bucket (checkpoint.signing_secret): the mirror signs, the
# restore accepts only a listing signed with it. From a Secret (Kubernetes) or the environment sbatch runs in.
SIGNING_KEY_VARIABLE = "INDEXED_TRAINER_CHECKPOINT_SIGNING_KEY"


@dataclass(frozen=True)
class StagedVariables:
    """The environment of a role staged onto the volume before training."""

    path: str  # what the program reads: where the role's files are (MODEL_DIR)
    # what an https:// archive may unpack to at most, in bytes (unset: the volume's free space is the bound); the
    # members' declared sizes are checked before anything is unpacked
    unpack_limit: str
    # which files of a Hub repository it fetches (initializer.<role>.allow_patterns and ignore_patterns, as
    # huggingface_hub's snapshot_download takes them: fnmatch globs, "dir/" for a folder; JSON lists). Unset, a
    # model fetches what from_pretrained loads (MODEL_FILES): a repository's pickled or other-framework weights and
    # its consolidated originals (Llama's original/*.pth) stay on the Hub; a dataset, every file.
    allow_patterns: str
    ignore_patterns: str


def _staged(role: str, path: str) -> StagedVariables:
    prefix = f"INDEXED_TRAINER_{role.upper()}"
    return StagedVariables(path, f"{prefix}_MAX_BYTES", f"{prefix}_ALLOW_PATTERNS", f"{prefix}_IGNORE_PATTERNS")


# The roles that are read before training (staged), their variables, and those written after (uploaded): uploads
# go to S3 only.
STAGED: dict[Role, StagedVariables] = {"model": _staged("model", "MODEL_DIR"),
                                       "dataset": _staged("dataset", "DATASET_DIR")}
UPLOADED_ROLES: tuple[Role, ...] = ("export", "checkpoint")
# Set in the training pods where the stage step is a Job of its own (initializer.separate_job), to that Job's name:
# every index's stage step then waits for what that Job staged (index 0's included), saying so by the Job's name.
STAGE_JOB_VARIABLE = "INDEXED_TRAINER_STAGE_JOB"
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
# The libraries' own credential variables: only ever from a Secret (or, on Slurm, the submitting environment),
# never in the values' config_map or env values, which a render writes out.
CREDENTIAL_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                        "AWS_SESSION_TOKEN")

# The libraries' endpoint variables: an address only; a user, password or token in one is refused where it
# would be written out (the values), as a credential is.
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "HF_ENDPOINT")

_HF_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_HF_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")
_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_HOST_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*\.?$")  # lower case
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")
_QUERY_VALUE = re.compile(r"([?&][^=&#]*=)[^&#]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Query parameters that carry a credential: presigned S3 and GCS URLs (X-Amz-*, X-Goog-*), Azure SAS (sig), and
# a word of the name (access_token, apiKey, Signature) that says token, key, signature or password.
_SIGNED_URL_PARAMETER = re.compile(r"^x-(amz|goog)-", re.IGNORECASE)
_CREDENTIAL_WORDS = frozenset({"sig", "signature", "token", "key", "secret", "password", "passwd", "pwd",
                               "credential", "credentials", "auth", "authorization", "session", "apikey",
                               "accesstoken"})


def holds_credentials(url: str) -> bool:
    """Whether ``url`` carries a user, a password or query values (where tokens and signatures go)."""
    return redacted(url) != url


def credential_parameters(url: str) -> list[str]:
    """The names of ``url``'s query parameters that look like credentials (a signature, a token, a key)."""
    try:
        query = urlparse(url).query if "://" in url else ""
    except ValueError:  # not a URL (a bracket left open): it has no parameters to name
        return []
    names = [part.partition("=")[0] for part in query.split("&") if part]
    return [name for name in names if _credential_name(name)]


def shown(text: str) -> str:
    """``text`` as a line may show it even when it is not a URL at all: redacted, and past that every query part
    without a value and any fragment hidden (either can carry a token), in a non-Hub URI whatever precedes an
    '@' in a part of its path (a malformed URL, https:/user:pw@host, escapes redacted()'s user pattern), and a
    query percent-encoded into the path (s3://bucket/key%3FX-Amz-Signature%3D...)."""
    base, has_fragment, _ = redacted(text).partition("#")
    base, has_query, query = base.partition("?")
    if has_query:  # the values are *** already
        query = "&".join(part if "=" in part else "***" for part in query.split("&"))
    if not base.lower().startswith("hf://"):  # a Hub revision follows an '@'
        base = re.sub(r"[^/@]*@", "***@", base)
    return _pairs_hidden(base) + has_query + query + ("#***" if has_fragment else "")


# Another library's words (botocore's, huggingface_hub's, urllib's) quote URLs as they sent them: a query percent-
# encoded once or more (an S3 key's '?' in a path, a URL inside another's query), a user in an endpoint, a token.
_ENCODED = r"%(?:25)*"  # '%', itself encoded any number of times
_SEPARATOR = rf"(?:[?&]|{_ENCODED}3[Ff]|{_ENCODED}26)"  # '?' or '&', plain or encoded
_EQUALS = rf"(?:=|{_ENCODED}3[Dd])"
_STOP = rf"(?:[&#\s\"'<>`\\]|{_ENCODED}2[36])"  # what ends a value: '&', '#', a space or quote, encoded '&' or '#'
_VALUE = rf"(?:(?!{_STOP}).)*"
# a name holds no separator (each try then ends at the next one: linear in the text, whatever it is)
_AFTER_SEPARATOR = re.compile(rf"({_SEPARATOR}(?:(?!{_STOP}|{_EQUALS}|{_SEPARATOR}).)*{_EQUALS}){_VALUE}")
_NAMED_PAIR = re.compile(rf"(?<![A-Za-z0-9_.-])([A-Za-z0-9_.-]{{1,128}})({_EQUALS}){_VALUE}")  # name=value
_QUOTED_PAIR = re.compile(rf"([\"']([A-Za-z0-9_.-]{{1,128}})[\"']\s*:\s*[\"']?){_VALUE}")  # 'name': 'value' (a dict, JSON)
_SCHEME = r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,31}"
_ANY_USERINFO = re.compile(rf"({_SCHEME}:/+)[^/?#\s@\"'<>]*@")
_URL_TAIL = re.compile(rf"({_SCHEME}://[^\s\"'<>?#]*)(\?[^\s\"'<>#]*)?(#[^\s\"'<>]*)?")
_KNOWN_TOKENS = ((re.compile(r"\b(hf_)[A-Za-z0-9]{16,}"), r"\1***"),  # a Hub token
                 (re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b"), r"\1***"),  # an AWS access key id
                 (re.compile(r"\b([Bb]earer|[Bb]asic)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 ***"))


def scrubbed(text: str) -> str:
    """Free text (another library's exception, a line that quotes one) as a line, a termination message or a file
    on the volume may hold it: every query value after a '?' or '&' and every value of a parameter named like a
    credential, plain or percent-encoded, a URL's user and password, and the tokens whose shape says so, each
    replaced by ``***``; the rest as it was, so that the line still says what failed and where."""
    text = _pairs_hidden(_URL_TAIL.sub(_tail_hidden, _ANY_USERINFO.sub(r"\1***@", text)))
    text = _QUOTED_PAIR.sub(lambda pair: f"{pair[1]}***" if _credential_name(pair[2]) else pair[0], text)
    for pattern, replacement in _KNOWN_TOKENS:
        text = pattern.sub(replacement, text)
    return text


def _pairs_hidden(text: str) -> str:
    """Every value after a '?' or '&', and every value of a parameter named like a credential, plain or
    percent-encoded (a key's '?' in a path: m.tar.gz%3FX-Amz-Signature%3D...)."""
    text = _AFTER_SEPARATOR.sub(r"\1***", text)
    return _NAMED_PAIR.sub(lambda pair: f"{pair[1]}{pair[2]}***" if _credential_name(pair[1]) else pair[0], text)


def _tail_hidden(url: re.Match) -> str:
    """A URL in free text with every query value and every query part without one (a bare token) hidden, and its
    fragment (an OAuth implicit grant's token)."""
    base, query, fragment = url[1], url[2], url[3]
    if query:
        query = "?" + "&".join(part.partition("=")[0] + "=***" if "=" in part else part and "***"
                               for part in query[1:].split("&"))
    return base + (query or "") + ("#***" if fragment else "")


def _credential_name(name: str) -> bool:
    """Whether a parameter's name says it holds a credential: a presigned URL's (X-Amz-*, X-Goog-*), or a word of
    it (access_token, apiKey, Signature) that says token, key, signature or password."""
    name = unquote(name)
    return bool(_SIGNED_URL_PARAMETER.match(name) or _CREDENTIAL_WORDS & {
        word.lower() for word in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", name)})


def redacted(text: str) -> str:
    """``text`` as a line may show it: a URL's user and password, and every query parameter's value (a presigned
    URL's signature, a token), replaced by ``***``. Lines name a source by this, never by the URI itself."""
    return _QUERY_VALUE.sub(r"\1***", _USERINFO.sub(r"\1***@", text))


class StorageUriError(ValueError):
    """What is wrong with a storage URI, worded to follow its key: ``initializer.model.storage_uri: ...``."""


@dataclass(frozen=True)
class StorageUri:
    text: str  # as written
    scheme: Scheme
    repo: str = ""  # hf: org/name (or name)
    repo_type: Literal["model", "dataset"] = "model"  # hf
    revision: str = ""  # hf: a branch, tag or commit ("main" when none is written)
    bucket: str = ""  # s3
    prefix: str = ""  # s3: no leading or trailing '/'
    url: str = ""  # https
    secret: str = ""  # secret: the Secret's name and key that hold the URI (known in the pod only)
    secret_key: str = ""
    known_as: str = ""  # how lines name a source whose text must not be shown (a URI from a Secret's key)

    @property
    def describe(self) -> str:
        """How progress lines and errors name the source: model org/name@rev, s3://bucket/prefix, the URL as
        ``shown`` (no query value, fragment or user), or the Secret and key it came from."""
        if self.known_as:
            return self.known_as
        if self.scheme == "hf":
            kind = "dataset " if self.repo_type == "dataset" else ""
            return f"{kind}{self.repo}@{self.revision}"
        if self.scheme == "secret":
            return f"from Secret {self.secret} key {self.secret_key}"
        return shown(self.text)

    def named(self, role: Role) -> str:
        """The source as a line names it in its role: "model org/name@rev", "dataset s3://bucket/prefix"."""
        return self.describe if self.describe.startswith(f"{role} ") else f"{role} {self.describe}"

    def below(self, name: str) -> StorageUri:
        """The s3:// URI of ``name`` under this one's prefix (a checkpoint's place under checkpoint.storage_uri)."""
        prefix = f"{self.prefix}/{name}" if self.prefix else name
        return dataclasses.replace(self, text=f"s3://{self.bucket}/{prefix}", prefix=prefix)

    @property
    def is_archive(self) -> bool:
        return self.scheme == "https" and urlparse(self.url).path.lower().endswith(ARCHIVE_SUFFIXES)

    def staged_path(self, shared: str, role: Role) -> str:
        """Where this source is staged under ``shared`` (a path as given: it ends in the revision, so another
        revision is staged beside this one); a path source is its own place. One source, one directory: the path
        is injective in (role, scheme, name, revision), and no source's directory is inside another's."""
        if self.scheme == "path":
            return self.text.rstrip("/") or "/"
        base = f"{shared}/{STAGED_DIR}/{role}s"
        if self.scheme == "hf":
            return f"{base}/hf/{_repo_component(self.repo)}/{_component(self.revision)}"
        if self.scheme == "s3":
            return f"{base}/s3/{_component(f'{self.bucket}/{self.prefix}'.rstrip('/'))}"
        if self.scheme == "secret":  # a key named '.' or '..' is a component still
            return f"{base}/secret/{_component(self.secret)}/{re.sub(r'^[.]', '%2E', _component(self.secret_key))}"
        parsed = urlparse(self.url)
        name = _SAFE.sub("_", parsed.path.rsplit("/", 1)[-1] or "index")
        digest = hashlib.sha256(self.url.encode()).hexdigest()[:12]  # two URLs, two places
        return f"{base}/https/{_SAFE.sub('_', parsed.netloc)}/{digest}-{name}"

    @property
    def source(self) -> str:
        """What a staged directory's marker records of its source (the URI, redacted): a marker of another
        source in this source's place is refused, never taken for it."""
        return redacted(self.text)


def from_secret(name: str, key: str) -> StorageUri:
    """The source whose URI is in Secret ``name``'s key ``key``: rendered as a reference to that key (the stage
    step's environment only), staged at a place of its own; the stager parses the URI it finds there."""
    return StorageUri(f"secret:{name}/{key}", "secret", secret=name, secret_key=key)


def _component(text: str) -> str:
    """``text`` as one path component, injectively: letters, digits, '.', '_' and '-' as they are, every other
    character (a '/' of a revision or a prefix among them) percent-encoded, '%' included."""
    return quote(text, safe="")


def _repo_component(repo: str) -> str:
    """A Hub repository as one component: ``org--name`` (the Hub cache's spelling). A part holding '--' itself has
    its hyphens percent-encoded, so that ``a--b`` and ``a/b`` stay apart."""
    return "--".join(part.replace("-", "%2D") if "--" in part else part for part in repo.split("/"))


def parse(text: str, role: Role, *, known_as: str | None = None) -> StorageUri:
    """The URI ``text`` for ``role``; StorageUriError saying what is wrong and what to write, whatever ``text`` is.
    Errors show the URI as ``shown`` does, or only as ``known_as`` (a URI from a Secret: "from Secret NAME key KEY",
    its text never), which the parsed source's lines then name it by too."""
    # a URI known by its Secret shows nothing of its text, not even a part of it
    source = _parse(text, role, Naming(known_as, _hidden) if known_as else Naming(repr(shown(text)), shown))
    return dataclasses.replace(source, known_as=known_as) if known_as else source


@dataclass(frozen=True)
class Naming:
    """How a parse error names the URI and a part of it (a scheme, a host, a bucket)."""

    whole: str
    part: Callable[[str], str]


def _hidden(part: str) -> str:
    return "..."


def _parse(text: str, role: Role, naming: Naming) -> StorageUri:
    name = naming.whole
    if not text or text != text.strip():
        raise StorageUriError(f"{name} is empty or has spaces around it")
    if _CONTROL.search(text):
        raise StorageUriError(f"{name} holds a control character (a newline, a tab): write the URI on "
                              "one line, percent-encoding what must be in it")
    if text.startswith("/"):
        if role in UPLOADED_ROLES:
            raise StorageUriError(f"{name}: {role}s go to a bucket: write s3://bucket/prefix")
        if "//" in text or "/../" in f"{text}/":
            raise StorageUriError(f"{name} is not a plain absolute path (no '//' or '..')")
        return StorageUri(text, "path")
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise StorageUriError(f"{name} has no scheme: write hf://org/name, s3://bucket/prefix, https://... or an "
                              "absolute path on the shared volume")
    if role in UPLOADED_ROLES and scheme != "s3":
        raise StorageUriError(f"{name}: {role}s go to a bucket: write s3://bucket/prefix")
    if scheme == "hf":
        return _hugging_face(text, rest, naming)
    if scheme == "s3":
        return _s3(text, rest, naming)
    if scheme in ("https", "http"):
        return _web(text, naming)
    raise StorageUriError(f"{name}: unknown scheme {naming.part(scheme)}://; write hf://, s3://, https:// or an absolute "
                          "path")


def _web(text: str, naming: Naming) -> StorageUri:
    name = naming.whole
    try:
        parsed = urlparse(text)
        parsed.port  # noqa: B018  # raises ValueError for a port that is not a number in range
    except ValueError:
        # the parser's own words quote parts of the text (a port): not shown
        raise StorageUriError(f"{name} is not a URL (its host or port cannot be read): write "
                              "https://host[:port]/path/file") from None
    if "@" in parsed.netloc:
        raise StorageUriError(f"{name}: a user or password in the URL would be written into the "
                              "ConfigMap and every log (and is not sent as credentials): serve the file without "
                              "them, or from a bucket (s3://, its credentials from a Secret: env_from_secrets)")
    if not parsed.hostname or not parsed.path.strip("/"):
        raise StorageUriError(f"{name} names no file: write https://host/path/file (an archive is "
                              "unpacked)")
    if not (_HOST_NAME.match(parsed.hostname) or ":" in parsed.hostname):  # a name, an IPv4 or an IPv6 address
        raise StorageUriError(f"{name}: {naming.part(parsed.hostname)!r} is not a host name: write "
                              "https://host/path/file")
    return StorageUri(text, "https", url=text)


def _decoded(text: str, times: int = 4) -> str:
    """``text`` percent-decoded until it stays the same (at most ``times``): what a doubly encoded '?' means."""
    for _ in range(times):
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    return text


def _hugging_face(text: str, rest: str, naming: Naming) -> StorageUri:
    name = naming.whole
    repo, at, revision = rest.partition("@")
    repo_type: Literal["model", "dataset"] = "model"
    if repo.startswith("datasets/"):
        repo_type, repo = "dataset", repo[len("datasets/"):]
    parts = repo.split("/")
    if not 1 <= len(parts) <= 2 or not all(_HF_NAME.match(part) for part in parts) or ".." in repo:
        raise StorageUriError(f"{name} is not a Hub repository: write hf://org/name[@revision] or "
                              "hf://datasets/org/name[@revision]")
    if at and not _HF_REVISION.match(revision):
        raise StorageUriError(f"{name}: the revision after '@' must be a branch, tag or commit")
    return StorageUri(text, "hf", repo=repo, repo_type=repo_type, revision=revision or "main")


def _s3(text: str, rest: str, naming: Naming) -> StorageUri:
    name = naming.whole
    if "?" in _decoded(rest):
        raise StorageUriError(f"{name}: an s3:// URI takes no query ('?'): a presigned URL's signature is no key "
                              "to read; write s3://bucket/prefix (credentials from a Secret: env_from_secrets), or "
                              "give the presigned https:// URL as storage_uri_secret")
    bucket, _, prefix = rest.partition("/")
    if not _S3_BUCKET.match(bucket) or ".." in bucket:
        raise StorageUriError(f"{name}: {naming.part(bucket)!r} is not a bucket name (3-63 lower-case letters, digits, '.' "
                              "and '-')")
    if "//" in prefix or any(part in (".", "..") for part in prefix.split("/")):
        raise StorageUriError(f"{name}: the prefix has an empty or relative part")
    return StorageUri(text, "s3", bucket=bucket, prefix=prefix.strip("/"))
