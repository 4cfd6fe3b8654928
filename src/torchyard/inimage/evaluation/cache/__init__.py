"""What an evaluation keeps for later runs, under the entry's cache: artifacts and their keys, results and the project
code they depend on, inductor's keys and stored XNNPACK patterns."""
