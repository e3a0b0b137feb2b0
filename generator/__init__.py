"""gen-manifests: render an Indexed Job, its headless Service, ConfigMap and shared volume claim.

Importing this package must stay cheap (no torch, no worker): the CLI starts in a fraction of a second.
"""

__version__ = "0.1.0"
