"""The measuring room: the protocol, the transport contract and registry, the timed loops,
the client and the server. Needs numpy and a transport's library, nothing else."""
