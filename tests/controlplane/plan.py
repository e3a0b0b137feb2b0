"""A pod's part in a controller scenario (tests/controlplane/scenarios.py): read PLAN (JSON: for each index, what
each of its pods does in turn), count this index's pods on the shared volume, then run until terminated (exit
143, as the worker does on SIGTERM) or exit with the planned code after the planned seconds."""

import json
import os
import signal
import sys
import time
from pathlib import Path

index = os.environ["JOB_COMPLETION_INDEX"]
steps = json.loads(os.environ["PLAN"])[index]
counter = Path(os.environ.get("PLAN_DIR", "/pvc-home")) / f"plan-attempts-{index}"
attempt = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(attempt + 1))
step = steps[min(attempt, len(steps) - 1)]
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
print(f"index {index}, attempt {attempt}: {step}", flush=True)
if step == "run":
    while True:
        time.sleep(1)
code, seconds = step
time.sleep(seconds)
sys.exit(code)
