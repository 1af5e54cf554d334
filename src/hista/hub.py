"""Is the Hugging Face Hub usable? One probe shared by models and datasets.

Before anything is fetched from the hub (a model by id, an ``hf:`` dataset), the endpoint
(``HF_ENDPOINT``, default https://huggingface.co) is probed with a short timeout
(``HISTA_HF_TIMEOUT`` seconds, default 5). When it cannot be reached, or offline mode is set
(``HF_HUB_OFFLINE``, ``HF_DATASETS_OFFLINE`` or ``TRANSFORMERS_OFFLINE``), callers load from
the local cache only, so something that is not cached fails in about a second with an
InputError instead of minutes of retries.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


def endpoint() -> str:
    """The hub endpoint: ``$HF_ENDPOINT`` or https://huggingface.co, without a trailing slash."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def timeout() -> float:
    """Seconds the probe waits for the hub: ``$HISTA_HF_TIMEOUT``, default 5."""
    try:
        return float(os.environ.get("HISTA_HF_TIMEOUT", "5"))
    except ValueError:
        return 5.0


def env_offline() -> bool:
    """True when one of ``HF_HUB_OFFLINE``, ``HF_DATASETS_OFFLINE``, ``TRANSFORMERS_OFFLINE``
    is set to 1/on/yes/true."""
    return any(os.environ.get(v, "").strip().upper() in ("1", "ON", "YES", "TRUE") for v in OFFLINE_VARIABLES)


def reachable() -> bool:
    """True when the hub endpoint answers an HTTP request within :func:`timeout` seconds
    (any HTTP status counts as an answer)."""
    try:
        req = urllib.request.Request(endpoint() + "/api/status", method="HEAD")
        with urllib.request.urlopen(req, timeout=timeout()):
            return True
    except urllib.error.HTTPError:
        return True  # it answered
    except Exception:  # noqa: BLE001 - DNS failure, refused, timeout, proxy error ...
        return False


def offline() -> bool:
    """True when the hub must not be contacted: offline mode is set or the endpoint does not
    answer. Then load with ``local_files_only=True`` (cache only)."""
    return env_offline() or not reachable()
