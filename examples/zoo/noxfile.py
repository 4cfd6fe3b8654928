"""nox sessions for zoo: torchyard's standard ones (lock, matrix, doctor, build-<acc>-image, test-<acc>)."""

import torchyard.nox

torchyard.nox.register()
