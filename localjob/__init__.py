"""local-job: run a rendered Indexed Job on this machine, as Kubernetes would, with pods as process trees.

    gen-manifests --values variables/variables.json | local-job

It stands in for the parts of Kubernetes the Job uses (indexes, env and Downward API, $(VAR) expansion,
the headless Service's names, volumes, backoffLimit, podFailurePolicy, activeDeadlineSeconds) and refuses
manifests it cannot run faithfully. It imports no torch: it only starts the pods' commands.
"""
