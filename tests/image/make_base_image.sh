#!/usr/bin/env bash
# A local base image for the image tests: no image registry is reachable here, so debootstrap Debian bookworm
# with python3 and venv (what the Dockerfile's PYTHON_IMAGE must offer) and import it into podman.
#
#   tests/image/make_base_image.sh TAG WORK_DIR
#
# The host's locally added CA certificates go into the image, so that pip inside a build can reach the
# package registry through this machine's proxy, as a company's base image would carry its own CA.
set -euo pipefail
tag="$1"
work="$2"
rootfs="$work/rootfs"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

rm -rf -- "$rootfs"
mkdir -p -- "$work"
echo "make_base_image: debootstrap bookworm (python3, python3-venv) from $mirror into $rootfs" >&2
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$rootfs" "$mirror" \
  >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
  chroot "$rootfs" update-ca-certificates >/dev/null
fi
chroot "$rootfs" apt-get clean
rm -rf -- "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin
tar -C "$rootfs" -c . | podman import \
  --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
  --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
  --change 'CMD ["python3"]' - "$tag" >/dev/null
rm -rf -- "$rootfs"
echo "make_base_image: $tag" >&2
