"""The stager: the model and dataset of initializer.*.storage_uri staged once onto the shared volume, before
training (the Job's "stage" init container, the Slurm script's stage step; torch-free).

    python -m worker.staging        # index 0 (JOB_COMPLETION_INDEX, SLURM_NODEID) fetches, the others wait

Index 0 fetches each source into a temporary directory beside its place, verifies every file (sizes, and the
digests the source gives: the Hub's LFS sha256 and git blob ids, an object's MD5 ETag), writes the marker and
renames the directory into place: nothing partial is ever visible there, and a rerun that finds the marker
fetches nothing. The other indexes wait for the marker and say what they wait for. A source that cannot be had
(not found, 401, 403) ends with one line naming the URI and the fix and exit 78 (the Job fails at once);
timeouts and 5xx are retried with back-off, then exit 69 (the pod is restarted).
"""
