"""Reading a model from the hub: one line with the next step when it cannot be read, instead of
huggingface_hub's five retries (~25 s of `Retrying in 8s`) on a host that has no hub at all.

    hub_access.reach(hub_id)                 # before any hub call: refuses a host with no hub
    except Exception as e: raise hub_access.failure(e, hub_id, "read config.json of")

A hub that cannot be reached is a HubError (exit 1, as the README's table says); a model that
is not there, gated or private is the user's to fix (exit 2). Air-gapped hosts are common: each
message names the ways to run without the hub.
"""

import os
import socket
from urllib.parse import urlparse

from pipeline.core.errors import HubError, PipelineError, UserError, first_line

WITHOUT_A_HUB = (
    "a local folder (--model /path/to/model), HF_HUB_OFFLINE=1 with the model already in the "
    "hub cache, or tiny-llama"
)


def reach(hub_id: str) -> None:
    """Raises HubError at once where the hub's host name does not resolve (no network, no DNS):
    huggingface_hub would retry it for ~25 s. Offline mode and proxies are left to the hub
    client (a proxy resolves the name, not this host)."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or any(
        os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
    ):
        return
    endpoint = urlparse(constants.ENDPOINT)
    try:
        socket.getaddrinfo(endpoint.hostname, endpoint.port or 443, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        reason = e.strerror if isinstance(e, socket.gaierror) else None  # a UnicodeError has none
        raise HubError(
            f"cannot reach the hub at {constants.ENDPOINT} for {hub_id} ({reason or e}): "
            f"this host has no route to it; use {WITHOUT_A_HUB}"
        ) from None


def failure(e: Exception, hub_id: str, what: str) -> PipelineError:
    """One line for a hub call that failed: what to do next."""
    from huggingface_hub import errors

    if isinstance(e, errors.GatedRepoError):
        return UserError(
            f"{hub_id} is gated: accept its terms on the hub, then set HF_TOKEN (a read token) "
            "or run `hf auth login`"
        )
    if isinstance(e, errors.RevisionNotFoundError):
        return UserError(f"{hub_id}: no such revision on the hub ({first_line(e)})")
    if isinstance(e, errors.RemoteEntryNotFoundError):
        return UserError(f"cannot {what} {hub_id}: the hub has the model, not that file")
    status = getattr(getattr(e, "response", None), "status_code", None)
    if isinstance(e, errors.RepositoryNotFoundError) or status in (401, 403, 404):
        return UserError(
            f"no model {hub_id} on the hub, or it is private: check the id, or set HF_TOKEN "
            "(a read token) for a private one"
        )
    if isinstance(e, errors.LocalEntryNotFoundError | errors.OfflineModeIsEnabled):
        from huggingface_hub import constants

        if constants.HF_HUB_OFFLINE:
            return UserError(
                f"cannot {what} {hub_id}: HF_HUB_OFFLINE is set and it is not in the hub cache "
                f"({constants.HF_HUB_CACHE}): `hf download {hub_id}` where the hub is, then "
                "carry the cache; or a local folder (--model /path/to/model), or tiny-llama"
            )
        return HubError(f"cannot {what} {hub_id}: the hub is not reachable; use {WITHOUT_A_HUB}")
    if isinstance(e, errors.HfHubHTTPError | ConnectionError | TimeoutError | OSError):
        return HubError(f"cannot {what} {hub_id} from the hub: {first_line(e)}; re-run later")
    return UserError(f"cannot {what} {hub_id} from the hub: {first_line(e)}")
