"""Something every rank needs but one rank should make (a dataset downloaded, a cache built): that rank prepares it
and publishes its verdict in the rendezvous' store; the others wait for the verdict, not for a file.

The store (the process group's own) carries the outcome, so nobody relies on file locks, which many NFS servers
ignore; a waiting rank says what it waits for every WAIT_REPORT_SECONDS, and its wait is bounded by the timeout
with a line naming the setting, instead of a 30-minute barrier. A preparer that fails or is stopped says so at
once: its peers exit as its victims (trainer_runtime.peer_failures.PeerLost, 75), not after the timeout."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from trainer_contract.progress import WAIT_REPORT_SECONDS
from trainer_runtime.peer_failures import PeerLost
from trainer_runtime.stop import ending


@dataclass(frozen=True)
class Preparation:
    """What is prepared (``what``: "prepare the data", ``doing``: "preparing the data"), under which store key, by
    whom (``who``, for the waiting ranks' lines), within how many seconds (``timeout``, the setting
    ``timeout_name``)."""

    what: str
    doing: str
    key: str
    who: str
    timeout: float
    timeout_name: str


def prepared_once(preparation: Preparation, store: Any, preparer: bool, prepare: Callable[[], Any],
                  failure: type[Exception], log: Callable[[str], None]) -> Any:
    """``prepare()``'s result (JSON) on every rank: run here when ``preparer``, else waited for in ``store``. A
    ``failure`` raised by the preparer is raised there and becomes its peers' PeerLost naming it."""
    if preparer:
        try:
            result = prepare()
        except failure as exc:
            ending()  # the peers learn of it next, and exit first: this process's own code must stand
            store.set(preparation.key, json.dumps({"ok": False, "error": str(exc)}))
            raise
        except BaseException:  # a stop (trainer_runtime.stop.Terminated) or a crash: the others need not wait it out
            store.set(preparation.key, json.dumps({"ok": False, "stopped": True}))
            raise
        store.set(preparation.key, json.dumps({"ok": True, "result": result}))
        return result
    verdict = wait_for(store, preparation, log)
    if verdict.get("stopped"):
        raise PeerLost(f"{preparation.who} was stopped while {preparation.doing}")
    if not verdict["ok"]:  # the preparing rank exits with its own code; this rank is its victim
        raise PeerLost(f"{preparation.who} could not {preparation.what}: {verdict['error']}")
    return verdict["result"]


def wait_for(store: Any, preparation: Preparation, log: Callable[[str], None]) -> dict:
    """The verdict under the preparation's key, from one blocking wait in the store: its server answers when the key
    is set, so a waiting rank sends no request while it waits (polling check() 5 times a second was 41,000 requests a
    second to one server at 8,192 ranks) and learns the verdict at once. The wait runs on a connection of its own
    (store.clone()) in a helper thread: this one keeps saying what it waits for, and a SIGTERM is handled at once (a
    signal handler runs between Python's own instructions, never inside store.wait)."""
    from torch.distributed import DistStoreError

    who, timeout, key = preparation.who, preparation.timeout, preparation.key
    try:
        waiter = store.clone()
    except (AttributeError, RuntimeError):  # a store that cannot be cloned: waited on itself, from the thread
        waiter = store
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def wait() -> None:
        try:
            waiter.wait([key], timedelta(seconds=timeout))
            outcome["verdict"] = waiter.get(key)
        except Exception as exc:  # a timeout or a store gone: this thread says which, below
            outcome["error"] = exc
        finally:
            done.set()

    began = time.monotonic()
    threading.Thread(target=wait, name=f"waiting for {key}", daemon=True).start()
    while not done.wait(WAIT_REPORT_SECONDS):
        log(f"waiting for {who} to {preparation.what}: {time.monotonic() - began:.0f} s of "
            f"{preparation.timeout_name}={timeout:g} s")
    error = outcome.get("error")
    if isinstance(error, DistStoreError) and time.monotonic() - began >= timeout:
        raise PeerLost(f"{who} did not finish {preparation.doing} within {preparation.timeout_name}={timeout:g} s")
    if error is not None:  # DistNetworkError: its host (torchrun of pod 0) is gone
        said = (str(error).strip().splitlines() or [""])[0]  # torch's message, without its C++ frames
        raise PeerLost(f"{who} went away while {preparation.doing} ({type(error).__name__}: {said})")
    return json.loads(outcome["verdict"])
