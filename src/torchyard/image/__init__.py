"""Images: the pure build plan and its context, the BuildKit build, loopback serving, the local base."""
