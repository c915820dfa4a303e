"""The orchestrating room: runs sessions and sweeps, starts processes and links, writes
result folders, checks the machine (doctor)."""
