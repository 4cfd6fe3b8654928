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
# uv is told the venv by the base's own interpreter (/opt/torchyard/base-python, the venv's base, so the same
# version and tags) with --prefix, never by the venv's Python: uv starts the interpreter it is given to learn
# where to install, and the venv's, with site, would run the `.pth` files of the packages earlier layers put
# there (the lock's: a pull request's, in an untrusted build), as root, in a step with the network. uv writes the
# base's path into the scripts it installs; they are pointed at the venv's Python after.
# Bytecode is compiled here, once, by the base's Python without site (-I -S: nothing installed is imported),
# for the files this install wrote, so no file of an earlier layer is written again. The
# suites run as a user who cannot write next to the sources: without it every container start would compile
# every module it imports (~6 s a run).
# `install-layer.sh --wheels <file>...` installs the project's wheels (already in the image) the same way.
set -e -o pipefail
# A fixed PATH and uv by its path: the venv's bin folder holds what the lock's packages put there (a `sed`, a
# `grep`), which must never run here, as root, with the build's network.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
uv=/opt/torchyard/tools/bin/uv
venv=/opt/torchyard/venv
base="$(cat /opt/torchyard/base-python)"
case "${base}" in
    "${venv}"/*) echo "install-layer.sh: the base interpreter ${base} lies in the venv: refusing to start it" >&2; exit 1 ;;
esac

site="${venv}/lib/$("${base}" -I -S -c 'import sys; print("python%d.%d" % sys.version_info[:2])')/site-packages"

# What decides how the venv's interpreter starts: its pyvenv.cfg and lib/ outside site-packages. A wheel's
# `.data/data` lands at the venv's root, where a `pyvenv.cfg` and a `lib/pythonX.Y/os.py` would make that
# interpreter load the wheel's own standard library when it starts (in the final image: inside the seal, where
# the project's code runs anyway); an install that changes them is refused here. Other data (share/man, etc/)
# is a package's own business.
startup() {
    { find "${venv}/pyvenv.cfg" "${venv}/lib" "${venv}/lib64" -path "${site}" -prune -o -printf '%y %p %s %T@\n' \
        2>/dev/null || true; } | sort
}

install() {
    stamp="$(mktemp)"
    before="$(startup)"
    "${uv}" pip install --python "${base}" --prefix "${venv}" --no-deps --no-config --no-cache "$@"
    after="$(startup)"
    if [ "${before}" != "${after}" ]; then
        echo "install-layer.sh: a package wrote the venv's pyvenv.cfg or its lib/ outside site-packages:" >&2
        diff <(echo "${before}") <(echo "${after}") | grep '^>' | head -5 >&2 || true
        exit 1
    fi
    for script in "${venv}"/bin/*; do
        if [ -f "${script}" ] && [ ! -L "${script}" ] && IFS= read -r first < "${script}" && [ "${first}" = "#!${base}" ]; then
            sed -i "1s|.*|#!${venv}/bin/python|" "${script}"
        fi
    done
    # Compiled by the base's interpreter (the venv's version and cache tag), never the venv's: a build step starts
    # no interpreter whose files the lock could have written. Only what this install wrote (uv writes every file
    # anew): the earlier layers' files are neither written again nor read (a project's wheel costs its own files).
    if ! find "${site}" -path '*[[:cntrl:]]*' -prune -o -newer "${stamp}" -name '*.py' -print \
        | "${base}" -I -S -m compileall -q -j 0 -i - >/dev/null; then
        echo "some installed files did not compile (a package's templates or Python 2 files); they are left as they are"
    fi
    rm -f "${stamp}"
}

if [ "$1" = "--wheels" ]; then
    shift
    install --no-index "$@"
    exit 0
fi
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
install "${hashes[@]}" "${index_args[@]}" -r "${requirements}"
