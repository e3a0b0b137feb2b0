"""What installing PyTorch will download, said in one line before the download starts (scripts/install.sh).

    PYTHON scripts/torch_download.py WHERE PIP-INSTALL-ARGUMENT...

PYTHON is the Python that will install (its pip, its installed packages, the PIP_* settings and pip's
configuration files). This runs `pip install --dry-run --report` for the arguments and prints on stdout, e.g.

    installing PyTorch 2.14.1 from the package registry: CUDA build (with 17 nvidia/cuda packages), 5.9 GB to download

Sizes: a file:// URL (a local index, a find-links folder) is stat'ed and said to come from local files; a file in
pip's HTTP cache is said to be there; any other URL is asked for its Content-Length (HEAD). A size nobody says
is "size unknown", never guessed. Exit status 0 with that line; else 1 with a short reason on stdout, and
install.sh says what it always said and installs anyway: this is information, never a reason to fail.

Cheap: older pips (23.2, this machine's) download every resolved wheel at the end of a dry run (pypa/pip#12603), even
where the index serves the wheels' metadata apart (PEP 658); here, as in pip 26.3, those are not downloaded.
Where an index serves no metadata files, pip downloads wheels to read theirs: past 200 MB of that, the dry run
stops, unmeasured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import unquote, urlsplit

# What the dry run may download to read metadata an index does not serve separately: more, and it stops.
DOWNLOAD_BUDGET = 200 * 10**6
RESOLVE_TIMEOUT = 300  # seconds, the whole dry run; HEAD requests: HEAD_TIMEOUT each
HEAD_TIMEOUT = 10


def human(size: int) -> str:
    """Bytes in decimal units, as pip shows them: 5.9 GB, 190 MB, 46.6 MB, 2.5 kB."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= scale:
            value = size / scale
            return f"{value:.0f} {unit}" if value >= 100 and unit != "GB" else f"{value:.1f} {unit}"
    return f"{size} bytes"


def canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def build_kind(files: list[dict]) -> str:
    """CPU or CUDA (ROCm) build: the local version label of torch (+cpu, +cu126, +rocm6.2), else whether
    the resolution holds nvidia-*/cuda-* packages."""
    torch = next(f for f in files if f["name"] == "torch")
    label = torch["version"].partition("+")[2]
    gpu = [f["name"] for f in files if f["name"].startswith(("nvidia-", "cuda-"))]
    details = []
    if label.startswith("cu"):
        kind, details = "CUDA build", [label]
    elif label.startswith("rocm"):
        kind, details = "ROCm build", [label]
    elif label == "cpu" or not gpu:
        kind = "CPU build"
    else:
        kind = "CUDA build"
    if gpu:
        details.append(f"with {len(gpu)} nvidia/cuda package{'s' * (len(gpu) != 1)}")
    return f"{kind} ({', '.join(details)})" if details else kind


def describe(where: str, files: list[dict]) -> str:
    torch = next(f for f in files if f["name"] == "torch")
    parts = []
    downloads = [f for f in files if f["origin"] == "download"]
    known = [f["size"] for f in downloads if f["size"] is not None]
    unknown = len(downloads) - len(known)
    if not downloads:
        parts.append("nothing to download")
    elif known:
        parts.append(f"{human(sum(known))} to download"
                     + (f" and {unknown} file{'s' * (unknown != 1)} of unknown size" if unknown else ""))
    else:
        parts.append(f"size unknown ({unknown} file{'s' * (unknown != 1)} to download)")
    for origin, said in (("local", "from local files"), ("cache", "from pip's cache")):
        sizes = [f["size"] for f in files if f["origin"] == origin]
        if sizes:
            missing = sum(size is None for size in sizes)
            parts.append(f"{human(sum(size or 0 for size in sizes))} {said}"
                         + (f" (and {missing} of unknown size)" if missing else ""))
    version = torch["version"].partition("+")[0]
    return f"installing PyTorch {version} from {where}: {build_kind(files)}, {', '.join(parts)}"


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[1] == "--resolve":
        return resolve(Path(argv[2]), argv[3:])
    if len(argv) < 3:
        print(f"usage: {Path(argv[0]).name} WHERE PIP-INSTALL-ARGUMENT...")
        return 2
    where, pip_args = argv[1], argv[2:]
    with tempfile.TemporaryDirectory(prefix="torch-download-") as tmp:
        out = Path(tmp, "resolution.json")
        try:
            # pip's own messages (warnings, its error) stay here: the caller prints one line.
            run = subprocess.run([sys.executable, __file__, "--resolve", str(out), *pip_args], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                                 timeout=RESOLVE_TIMEOUT)
        except subprocess.TimeoutExpired:
            print(f"not measured: pip's dry run took longer than {RESOLVE_TIMEOUT} s")
            return 1
        result = json.loads(out.read_text()) if out.is_file() else {}
    if "files" not in result:
        reason = result.get("error")
        if not reason:
            errors = [line[len("ERROR:"):].strip() for line in run.stdout.splitlines() if line.startswith("ERROR:")]
            reason = f"pip install --dry-run failed: {errors[0][:200]}" if errors else \
                f"the dry run failed (exit status {run.returncode})"
        print(f"not measured: {reason}")
        return 1
    files = [{**f, "name": canonical(f["name"])} for f in result["files"]]
    if not any(f["name"] == "torch" for f in files):
        print("not measured: pip's dry run installs no torch")
        return 1
    print(describe(where, files))
    return 0


# ---- the dry run, in a child process: pip in this process, with the changes below -------------------------

class _Overspent(BaseException):
    """Raised through pip (which catches every Exception) when the dry run would download too much."""


def resolve(out: Path, pip_args: list[str]) -> int:
    def done(**result) -> int:
        out.write_text(json.dumps(result))
        return 0

    try:
        import pip
        from pip._internal.cli.main import main as pip_main
        from pip._vendor.packaging.version import Version
        from pip._vendor.requests import Session
    except ImportError as error:
        return done(error=f"{sys.executable} has no usable pip ({error})")
    if Version(pip.__version__) < Version("22.2"):
        return done(error=f"pip {pip.__version__} has no install --dry-run --report (pip 22.2 or newer has)")

    sessions: list = []
    spent = [0]
    original_send = Session.send

    def send(self, request, **kwargs):
        response = original_send(self, request, **kwargs)
        if not sessions:
            sessions.append(self)
        if request.method == "GET" and request.url.startswith(("http:", "https:")) and \
                not getattr(response, "from_cache", False):
            spent[0] += int(response.headers.get("Content-Length") or 0)
            if spent[0] > DOWNLOAD_BUDGET:
                response.close()  # before its body: a stream
                raise _Overspent(request.url)
        return response

    Session.send = send  # type: ignore[method-assign]
    try:
        metadata_only_without_download()
    except Exception as error:  # pip's insides moved: measuring might download it all, so not at all
        return done(error=f"pip {pip.__version__}: cannot resolve without downloading ({error!r:.150})")

    report = out.with_name("report.json")
    args = ["install", "--dry-run", "--quiet", "--no-input", "--disable-pip-version-check", "--progress-bar", "off",
            "--report", str(report)]
    try:
        status = pip_main([*args, *pip_args])
    except _Overspent:
        status = -1
    if spent[0] > DOWNLOAD_BUDGET:
        return done(error=f"measuring would download more than {human(DOWNLOAD_BUDGET)} (the index serves no "
                          f"separate metadata files, PEP 658)")
    if status != 0 or not report.is_file():
        sys.stdout.flush()
        return 1
    Session.send = original_send  # type: ignore[method-assign]
    entries = json.loads(report.read_text())["install"]
    session = sessions[0] if sessions else None
    with ThreadPoolExecutor(max_workers=8) as pool:
        files = list(pool.map(lambda entry: measure(entry, session), entries))
    return done(files=files)


def metadata_only_without_download() -> None:
    """Make an older pip do what pip 26.3 does in a dry run: a wheel whose metadata came from the index (PEP 658)
    is reported from that metadata, not downloaded. Nothing to do where the resolver no longer downloads."""
    import inspect

    from pip._internal.operations.prepare import RequirementPreparer
    from pip._internal.req.req_install import InstallRequirement
    from pip._internal.resolution.resolvelib.resolver import Resolver
    from pip._internal.utils.direct_url_helpers import direct_url_from_link

    if "prepare_linked_requirements_more" not in inspect.getsource(Resolver.resolve):
        return
    fetch_metadata_only = RequirementPreparer._fetch_metadata_only
    get_dist = InstallRequirement.get_dist

    def _fetch_metadata_only(self, req):
        dist = fetch_metadata_only(self, req)
        if dist is not None:
            req._metadata_only_dist = dist
            if req.download_info is None:
                req.download_info = direct_url_from_link(req.link, req.source_dir)
        return dist

    def prepare_linked_requirements_more(self, reqs, parallel_builds=False):
        # the resolver's last step: download what only metadata was fetched for (this is a dry run)
        return None

    def get_dist_or_metadata(self):
        dist = getattr(self, "_metadata_only_dist", None)
        return dist if dist is not None else get_dist(self)

    RequirementPreparer._fetch_metadata_only = _fetch_metadata_only  # type: ignore[method-assign]
    RequirementPreparer.prepare_linked_requirements_more = prepare_linked_requirements_more  # type: ignore[method-assign]
    InstallRequirement.get_dist = get_dist_or_metadata  # type: ignore[method-assign]


def measure(entry: dict, session) -> dict:
    """One file of the report: where it comes from (local, cache, download) and its size (None: unknown)."""
    url = entry["download_info"]["url"]
    file = {"name": entry["metadata"]["name"], "version": entry["metadata"]["version"], "url": url, "size": None}
    parts = urlsplit(url)
    if parts.scheme == "file":
        path = Path(unquote(parts.path))
        return {**file, "origin": "local", "size": path.stat().st_size if path.is_file() else None}
    origin = "cache" if in_pip_cache(session, url) else "download"
    try:
        if session is not None:  # pip's own session: its certificates, proxy, credentials, trusted hosts
            response = session.head(url, timeout=HEAD_TIMEOUT, allow_redirects=True)
            length = response.headers.get("Content-Length") if response.ok else None
        else:
            import urllib.request

            with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=HEAD_TIMEOUT) as r:
                length = r.headers.get("Content-Length")
        size = int(length) if length and length.isdigit() else None
    except Exception:
        size = None
    return {**file, "origin": origin, "size": size}


def in_pip_cache(session, url: str) -> bool:
    """Whether pip's HTTP cache holds this URL's response (then installing reads it from there)."""
    try:
        adapter = session.get_adapter(url)
        path = adapter.cache._get_cache_path(adapter.controller.cache_url(url))
        return os.path.isfile(path)
    except Exception:  # no session, no cache (--no-cache-dir), or another pip: not known to be cached
        return False


if __name__ == "__main__":
    sys.exit(main(sys.argv))
