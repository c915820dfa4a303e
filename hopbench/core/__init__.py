"""The measuring room: the protocol, the transport contract and registry, the timed loops,
the client and the server. Needs numpy, hdrhistogram and the standard library; each optional
library (a transport's, a codec's, CuPy, torch, gguf) is imported where it is used."""
