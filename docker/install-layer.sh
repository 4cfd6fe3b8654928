#!/bin/bash
# One group of the lock into the image's venv, as one layer: /opt/torchyard/layers/<group>.txt, which holds
# exactly that group's pins with their hashes (torchyard.image.layers), so the layer's cache key is those pins.
# Every file is hash-checked and nothing beyond the group is installed (--no-deps: the lock is the whole tree,
# and the groups divide it). A vendor entry's lock never names a vendor package; --override holds them at the
# recorded versions all the same, and the vendor guard on the built image (torchyard.image.check, sealed: this
# step has the network and runs as root, so it runs no installed code) fails the build naming any package
# that was replaced or shadowed. uv refuses an --override pin without a hash under --require-hashes, so vendor
# entries verify every hash the group carries (--verify-hashes) instead of requiring them.
# Index URLs (and any credentials in them) come in as a secret: never in a layer or the history.
# Bytecode is compiled here, once: uv compiles the files that have none yet and leaves earlier groups' alone,
# so no file of an earlier layer is written again. The suites run as a user who cannot write next to the
# sources: without it every container start would compile every module it imports (~6 s a run).
set -e -o pipefail
group="$1"
requirements="/opt/torchyard/layers/${group}.txt"
if ! grep -q '^[A-Za-z0-9]' "${requirements}"; then
    echo "layer ${group}: no package of the lock belongs here"
    exit 0
fi
if [ -f /run/secrets/cacert ]; then export SSL_CERT_FILE=/run/secrets/cacert UV_NATIVE_TLS=1; fi
index_args=()
if [ -f /run/secrets/uv-index-args ]; then read -ra index_args < /run/secrets/uv-index-args; fi
hashes=(--require-hashes)
if [ -n "${VENDOR_PACKAGES}" ]; then hashes=(--verify-hashes --override /opt/torchyard/overrides.txt); fi
if [ -n "${WHEELS_ONLY}" ]; then hashes+=(--no-build); fi
uv pip install --python /opt/torchyard/venv/bin/python --no-deps --no-config --compile-bytecode \
    "${hashes[@]}" "${index_args[@]}" -r "${requirements}"
