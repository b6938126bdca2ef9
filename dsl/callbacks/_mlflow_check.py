"""Whether a pipeline that tracks with MLflow can: the package is an optional extra, and the
tracking server must answer.

The mlflow callback registers the package check as its check (`register(checks=...)`:
`dslrun validate` runs it without importing MLflow) and the server check as its start check
(`register(start_checks=...)`: `dslrun run` asks the server before building anything, with a
short timeout, rather than let MLflow's client retry for minutes before the first step).
"""

from __future__ import annotations

import importlib.util
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dsl.language.diagnostics import Diagnostic, SourceMap
from dsl.language.diagnostics import Path as JsonPath

INSTALL_HINT = 'install MLflow with: pip install "dslrun[mlflow]" (or pip install mlflow)'


def check_mlflow_installed(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """A pipeline with the mlflow callback needs the mlflow package (looked up, not imported),
    and a store this MLflow writes to (`check_folder_store`)."""
    for index, callback in enumerate(pipeline.get("callbacks") or []):
        if isinstance(callback, dict) and callback.get("type") == "mlflow" and importlib.util.find_spec("mlflow") is None:
            path = ("callbacks", index, "type")
            return [sources.diagnostic(path, f"the mlflow callback needs MLflow, which is not installed; {INSTALL_HINT}")]
    return check_folder_store(pipeline, sources)


# MLflow 3.13 turned its folder store (`file:` URIs, plain paths) into an exception raised when
# the client is made, unless MLFLOW_ALLOW_FILE_STORE is true: the run's first line would be a traceback.
FOLDER_STORE_REFUSED = (3, 13)


def check_folder_store(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """An mlflow callback's store that is a folder, which the installed MLflow refuses to open."""
    if os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").strip().lower() in ("true", "1") or \
            _mlflow_version() < FOLDER_STORE_REFUSED:
        return []
    found = []
    for path, uri, source in _stores(pipeline):
        parts = urllib.parse.urlsplit(uri)
        if not uri or (parts.scheme != "file" and (len(parts.scheme) > 1 or parts.netloc)):
            continue  # MLflow's default (a database), a database, a server: not a folder
        folder = Path(parts.path if parts.scheme == "file" else uri).absolute()
        found.append(sources.diagnostic(path, (
            f"MLflow {'.'.join(map(str, _mlflow_version()))} no longer writes to a folder ({uri}{source}); use a "
            f"database, e.g. tracking_uri: sqlite:///{folder.with_suffix('.db')}, or a tracking server, or set "
            "MLFLOW_ALLOW_FILE_STORE=true to keep the folder")))
    return found


def _stores(pipeline: dict[str, Any]) -> Iterator[tuple[JsonPath, str, str]]:
    """Each mlflow callback's store: (the path an error is located at, its URI ("" for MLflow's
    default), " (from MLFLOW_TRACKING_URI)" when the environment named it)."""
    for index, callback in enumerate(pipeline.get("callbacks") or []):
        if isinstance(callback, dict) and callback.get("type") == "mlflow":
            written = callback.get("tracking_uri")
            yield (("callbacks", index, "tracking_uri" if written else "type"),
                   written or os.environ.get("MLFLOW_TRACKING_URI") or "", "" if written else " (from MLFLOW_TRACKING_URI)")


def _mlflow_version() -> tuple[int, ...]:
    """The installed MLflow's (major, minor), read from its metadata without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("mlflow")
    except PackageNotFoundError:
        return (0, 0)
    numbers = [int(part) for part in re.findall(r"\d+", found)[:2]]
    return tuple(numbers) if len(numbers) == 2 else (0, 0)


SERVER_TIMEOUT_SECONDS = 5.0


def check_tracking_server(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """Each mlflow callback's HTTP tracking server answers (its /health, within a few seconds).

    Any HTTP answer will do there (a server behind a login says 401): a server that cannot be
    reached or does not answer in time is an error, and so is one that refuses the run's login
    (`login_problem`). Local stores (a folder, sqlite) need nothing.
    """
    found = []
    for path, uri, source in _stores(pipeline):
        if urllib.parse.urlsplit(uri).scheme not in ("http", "https"):
            continue
        problem = server_problem(uri, SERVER_TIMEOUT_SECONDS)
        if problem:
            found.append(sources.diagnostic(path, (
                f"the MLflow tracking server {shown_uri(uri)}{source} does not answer: {problem}; start it or "
                "correct the URI (dslrun asks before training, so that a run never waits on it)")))
            continue
        refused = login_problem(uri, SERVER_TIMEOUT_SECONDS, os.environ)
        if refused:
            found.append(sources.diagnostic(
                path,
                f"the MLflow tracking server {shown_uri(uri)}{source} {refused}"))
    return found


def _address(uri: str, path: str) -> str:
    """`uri`'s server with `path` appended, without the user-info (credentials go in a header)."""
    parts = urllib.parse.urlsplit(uri)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    netloc += f":{parts.port}" if parts.port else ""
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/") + path, "", ""))


def login_problem(uri: str, timeout: float, environ: Any) -> str | None:
    """Why the server refuses the run's credentials (None: it lets them read experiments).

    A wrong password passed /health (any answer will do there), then every request of the run
    failed with 401 and training went on untracked. The credentials are MLflow's own:
    MLFLOW_TRACKING_USERNAME / _PASSWORD (or _TOKEN) first, else the URI's user-info.
    """
    import base64

    parts = urllib.parse.urlsplit(uri)
    user = environ.get("MLFLOW_TRACKING_USERNAME")
    password = environ.get("MLFLOW_TRACKING_PASSWORD") if user else None
    given = "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"
    if not user and parts.username:
        user, password = urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or "")
        given = "the user and password in the URI"
    request = urllib.request.Request(_address(uri, "/api/2.0/mlflow/experiments/search?max_results=1"), method="GET")
    if environ.get("MLFLOW_TRACKING_TOKEN") and not user:
        request.add_header("Authorization", f"Bearer {environ['MLFLOW_TRACKING_TOKEN']}")
        given = "MLFLOW_TRACKING_TOKEN"
    elif user:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return None
    except urllib.error.HTTPError as exc:
        if exc.code == 401 and (user or environ.get("MLFLOW_TRACKING_TOKEN")):
            return f"refuses the credentials ({given}): 401 {exc.reason}; correct them"
        if exc.code == 401:
            return ("asks for a login (401): give it MLflow's MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, "
                    "or http://user:${PASSWORD}@host in tracking_uri")
        if exc.code == 403:
            return f"lets {user or 'this login'} in but not read experiments (403 {exc.reason}); ask for permission"
        return None  # another answer (an older server without this endpoint): the run will say
    except OSError:
        return None  # it answered /health a moment ago: what the run meets, it reports as an outage


def server_problem(uri: str, timeout: float) -> str | None:
    """Why the server at `uri` cannot be reached (None: it answered, whatever it said)."""
    health = _address(uri, "/health")  # never the user-info: urllib would dial it as part of the host
    try:
        with urllib.request.urlopen(urllib.request.Request(health, method="GET"), timeout=timeout):
            return None
    except urllib.error.HTTPError as exc:
        if exc.code in (502, 503, 504):  # a gateway in between answered for a server it cannot reach
            return f"{exc.code} {exc.reason}"
        return None  # the server answered
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            return f"no answer within {timeout:g} s"
        return str(getattr(reason, "strerror", None) or reason)
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except OSError as exc:
        return exc.strerror or str(exc)


def shown_uri(uri: str) -> str:
    """`uri` without a password in its user-info, for messages."""
    parts = urllib.parse.urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
