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
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from dsl.language.diagnostics import Diagnostic, SourceMap

INSTALL_HINT = 'install MLflow with: pip install "dslrun[mlflow]" (or pip install mlflow)'


def check_mlflow_installed(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """A pipeline with the mlflow callback needs the mlflow package (looked up, not imported)."""
    for index, callback in enumerate(pipeline.get("callbacks") or []):
        if isinstance(callback, dict) and callback.get("type") == "mlflow" and importlib.util.find_spec("mlflow") is None:
            path = ("callbacks", index, "type")
            return [Diagnostic.at(sources.locate(path), path, f"the mlflow callback needs MLflow, which is not installed; "
                                                              f"{INSTALL_HINT}")]
    return []


SERVER_TIMEOUT_SECONDS = 5.0


def check_tracking_server(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """Each mlflow callback's HTTP tracking server answers (its /health, within a few seconds).

    Any HTTP answer will do (a server behind a login says 401): only a server that cannot be
    reached or does not answer in time is an error. Local stores (a folder, sqlite) need nothing.
    """
    found = []
    for index, callback in enumerate(pipeline.get("callbacks") or []):
        if not (isinstance(callback, dict) and callback.get("type") == "mlflow"):
            continue
        written = callback.get("tracking_uri")
        uri = written or os.environ.get("MLFLOW_TRACKING_URI") or ""
        if urllib.parse.urlsplit(uri).scheme not in ("http", "https"):
            continue
        problem = server_problem(uri, SERVER_TIMEOUT_SECONDS)
        if problem:
            path = ("callbacks", index, "tracking_uri" if written else "type")
            source = "" if written else " (from MLFLOW_TRACKING_URI)"
            found.append(Diagnostic.at(sources.locate(path), path, (
                f"the MLflow tracking server {shown_uri(uri)}{source} does not answer: {problem}; start it or "
                "correct the URI (dslrun asks before training, so that a run never waits on it)")))
    return found


def server_problem(uri: str, timeout: float) -> str | None:
    """Why the server at `uri` cannot be reached (None: it answered, whatever it said)."""
    parts = urllib.parse.urlsplit(uri)
    # Credentials in the URI's user-info go in a header, not in the address urllib dials.
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    netloc += f":{parts.port}" if parts.port else ""
    health = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/") + "/health", "", ""))
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
