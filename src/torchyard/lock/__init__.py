"""Lockfiles: the inputs that decide a lock (one definition), resolving with uv, the offline check, installs."""
